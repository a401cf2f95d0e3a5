package runner

import (
	"testing"

	"github.com/deliverycheck/deliverycheck/pipeline/pipelinetest"
)

// shared is the one set of servers the package's tests run on.
var shared pipelinetest.Servers

func TestMain(m *testing.M) { pipelinetest.Main(m, &shared) }

func workerCmd() []string { return pipelinetest.WorkerCmd() }
