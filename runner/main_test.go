package runner

import (
	"testing"

	"github.com/deliverycheck/deliverycheck/pipeline/pipelinetest"
)

// shared is the set of servers the package's tests run on; lane2 is a
// second one, for the detection matrix's second lane of single-node
// scenarios (matrixLanes).
var shared, lane2 pipelinetest.Servers

func TestMain(m *testing.M) { pipelinetest.Main(m, &shared, &lane2) }

func workerCmd() []string { return pipelinetest.WorkerCmd() }
