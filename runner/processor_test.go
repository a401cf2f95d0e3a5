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

// TestExampleProcessor runs the example team processors through their
// own scenario files: each correct build comes out valid although its
// failpoints crashed it with a transaction open and right after a
// commit; each buggy build, which commits its input offsets after the
// transaction, is caught writing outputs twice (output-duplicate).
// examples/processor (Go, franz-go) records no lineage: it is judged
// from the output topics alone, the harness's uncommitted read finding
// the aborted records. examples/consumer-node's processor (Node.js,
// kafkajs) posts its transactions as lineage through the endpoint.
func TestExampleProcessor(t *testing.T) {
	shared.Get(t)
	type run struct {
		dir, file string
		command   []string // nil: the scenario's own
		lineage   bool
	}
	runs := []run{
		{"processor", "scenario.yaml", []string{buildExampleIn(t, "processor", "")}, false},
		{"processor", "scenario-buggy.yaml", []string{buildExampleIn(t, "processor", "buggy")}, false},
	}
	installNodeExample(t)
	runs = append(runs, run{"consumer-node", "scenario-processor.yaml", nil, true}, run{"consumer-node", "scenario-processor-buggy.yaml", nil, true})
	lanes := []*pipelinetest.Servers{&shared, &lane2}
	var wg sync.WaitGroup
	for i, servers := range lanes {
		wg.Go(func() {
			for j := i; j < len(runs); j += len(lanes) {
				r := runs[j]
				t.Run(r.dir+"/"+r.file, func(t *testing.T) { runExampleProcessor(t, servers, r.dir, r.file, r.command, r.lineage) })
			}
		})
	}
	wg.Wait()
}

func runExampleProcessor(t *testing.T, servers *pipelinetest.Servers, dir, file string, command []string, lineage bool) {
	s, err := scenarios.Load(filepath.Join("..", "examples", dir, file))
	if err != nil {
		t.Fatal(err)
	}
	if command != nil {
		s.System.Processor.Command = command
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if os.Getenv("DELIVERYCHECK_KEEP") != "" {
		out = filepath.Join(os.TempDir(), "deliverycheck-example", dir, file)
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
	switch {
	case !lineage && st.Transactions.Begun != 0:
		t.Errorf("the example records no lineage, yet %d transactions were recorded", st.Transactions.Begun)
	case lineage && (st.Transactions.Committed == 0 || st.Transactions.Aborted == 0):
		t.Errorf("the example's lineage: %+v", st.Transactions)
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
