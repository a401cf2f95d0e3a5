package runner

import (
	"testing"

	"github.com/deliverycheck/deliverycheck/pipeline/pipelinetest"
)

// shared is the set of servers the package's tests run on; lane2 and
// lane3 are more, for the detection matrix's other lanes of single-node
// scenarios (runLanes).
var shared, lane2, lane3 pipelinetest.Servers

func TestMain(m *testing.M) { pipelinetest.Main(m, &shared, &lane2, &lane3) }

func workerCmd() []string { return pipelinetest.WorkerCmd() }
