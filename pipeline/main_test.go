package pipeline

import (
	"testing"

	"github.com/deliverycheck/deliverycheck/pipeline/pipelinetest"
)

// servers are shared by every test of the package.
var servers pipelinetest.Servers

func TestMain(m *testing.M) { pipelinetest.Main(m, &servers) }

func workerCmd() []string { return pipelinetest.WorkerCmd() }
