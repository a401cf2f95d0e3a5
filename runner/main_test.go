package runner

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/deliverycheck/deliverycheck/pipeline/pipelinetest"
)

// shared is the set of servers the package's tests run on; lane2 and
// lane3 are more, for the other lanes of tests that run single-node
// scenarios side by side (runLanes, inLanes).
var shared, lane2, lane3 pipelinetest.Servers

// lanes are the package's sets of single-node servers, one per lane: a
// scenario's faults kill and cut the servers it runs on, so two runs
// never share a set at once.
func lanes() []*pipelinetest.Servers { return []*pipelinetest.Servers{&shared, &lane2, &lane3} }

// inLanes calls run(servers, i) for each i in [0, n), three at once, one
// per set of servers: each lane takes the next i when its run is done,
// so list the longest runs first.
func inLanes(n int, run func(servers *pipelinetest.Servers, i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for _, servers := range lanes() {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				run(servers, i)
			}
		})
	}
	wg.Wait()
}

func TestMain(m *testing.M) { pipelinetest.Main(m, &shared, &lane2, &lane3) }

func workerCmd() []string { return pipelinetest.WorkerCmd() }
