package pipeline

import (
	"testing"

	"github.com/deliverycheck/deliverycheck/pipeline/pipelinetest"
)

// servers are shared by every test of the package. A test whose faults
// are only its own workers' (or none) calls t.Parallel first: it runs
// beside the other such tests once the tests that kill, freeze or cut
// the shared servers, which run alone, are done. A run mostly waits:
// `make test` lets four go at once (-parallel 4), not GOMAXPROCS's two.
var servers pipelinetest.Servers

func TestMain(m *testing.M) { pipelinetest.Main(m, &servers) }

func workerCmd() []string { return pipelinetest.WorkerCmd() }
