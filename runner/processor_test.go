package runner

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/pipeline/pipelinetest"
	"github.com/deliverycheck/deliverycheck/scenarios"
)

// TestExampleProcessor runs examples/processor, a team's transactional
// processor that records no lineage, through its own scenario files: the
// correct build comes out valid although its failpoints crashed it with
// a transaction open and right after a commit, judged from the output
// topics alone (the harness's uncommitted read finds the aborted
// records); the buggy build, which commits its input offsets after the
// transaction, is caught writing outputs twice (output-duplicate).
func TestExampleProcessor(t *testing.T) {
	shared.Get(t)
	runs := []struct {
		file, tags string
	}{{"scenario.yaml", ""}, {"scenario-buggy.yaml", "buggy"}}
	bins := make([]string, len(runs))
	for i, r := range runs {
		bins[i] = buildExampleIn(t, "processor", r.tags)
	}
	lanes := []*pipelinetest.Servers{&shared, &lane2}
	var wg sync.WaitGroup
	for i, r := range runs {
		wg.Go(func() {
			t.Run(r.file, func(t *testing.T) { runExampleProcessor(t, lanes[i%len(lanes)], r.file, bins[i]) })
		})
	}
	wg.Wait()
}

func runExampleProcessor(t *testing.T, servers *pipelinetest.Servers, file, bin string) {
	s, err := scenarios.Load(filepath.Join("..", "examples", "processor", file))
	if err != nil {
		t.Fatal(err)
	}
	s.System.Processor.Command = []string{bin}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if os.Getenv("DELIVERYCHECK_KEEP") != "" {
		out = filepath.Join(os.TempDir(), "deliverycheck-example", "processor", file)
	}
	o := runScenarioOn(t, servers, s, 1, out)
	r := o.Result
	t.Logf("%s: %s %v; committed %d, crashes %d (%s)", s.Name, r.Valid, r.Reasons, r.Counts.Committed, r.Counts.Crashes, o.Dir)
	if ok, why := met(o); !ok {
		t.Fatalf("expectation not met: %s", why)
	}
	if r.Counts.Crashes == 0 {
		t.Error("the processor's failpoints never crashed it")
	}
	st := r.TxnStage
	if st == nil {
		t.Fatal("no transactional stage in the result")
	}
	if st.Transactions.Begun != 0 {
		t.Errorf("the example records no lineage, yet %d transactions were recorded", st.Transactions.Begun)
	}
	if st.Inputs == 0 {
		t.Error("no input reached the stage")
	}
	var aborted int64
	for _, tp := range st.Topics {
		aborted += tp.Aborted
		if tp.Uncommitted != "complete" {
			t.Errorf("%s: uncommitted read %q", tp.Topic, tp.Uncommitted)
		}
	}
	if aborted == 0 {
		t.Error("the harness found no aborted record in the output topics")
	}
	if s.Expect.Verdict == checker.Valid && st.Delivery != checker.ExactlyOnce {
		t.Errorf("correct build: delivery %s", st.Delivery)
	}
}
