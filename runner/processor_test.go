package runner

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
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
// kafkajs) posts its transactions as lineage through the endpoint. And
// the correct Go build told to abort nothing and never crashed leaves
// the run unknown: no reader ever had an aborted record to skip.
func TestExampleProcessor(t *testing.T) {
	shared.Get(t)
	type run struct {
		dir, file string
		command   []string // nil: the scenario's own
		lineage   bool
		noAborts  bool
	}
	correct := []string{buildExampleIn(t, "processor", "")}
	installNodeExample(t)
	// The Node.js processor's correct run first: the longest.
	runs := []run{
		{dir: "consumer-node", file: "scenario-processor.yaml", lineage: true},
		{dir: "consumer-node", file: "scenario-processor-buggy.yaml", lineage: true},
		{dir: "processor", file: "scenario.yaml", command: correct},
		{dir: "processor", file: "scenario-buggy.yaml", command: []string{buildExampleIn(t, "processor", "buggy")}},
		{dir: "processor", file: "scenario.yaml", command: correct, noAborts: true},
	}
	inLanes(len(runs), func(servers *pipelinetest.Servers, i int) {
		r := runs[i]
		name := r.dir + "/" + r.file
		if r.noAborts {
			t.Run(name+"/no-aborts", func(t *testing.T) { runExampleProcessorNoAborts(t, servers, r.dir, r.file, r.command) })
			return
		}
		t.Run(name, func(t *testing.T) { runExampleProcessor(t, servers, r.dir, r.file, r.command, r.lineage) })
	})
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

// runExampleProcessorNoAborts runs a correct processor that aborts
// nothing (its abort ratio overridden to 0) and is never crashed: its
// transactions all commit, no aborted record exists, and without its
// lineage nothing shows a reader would have skipped one, so the run is
// unknown, never valid.
func runExampleProcessorNoAborts(t *testing.T, servers *pipelinetest.Servers, dir, file string, command []string) {
	s, err := scenarios.Load(filepath.Join("..", "examples", dir, file))
	if err != nil {
		t.Fatal(err)
	}
	s.System.Processor.Command = command
	// The command's env comes after the contract's, and the last wins.
	s.System.Processor.Env = map[string]string{"DELIVERYCHECK_ABORT_RATIO": "0"}
	s.Nemesis.Failpoints = nil
	s.Expect = scenarios.Expect{}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	o := runScenarioOn(t, servers, s, 1, t.TempDir())
	r := o.Result
	t.Logf("%s, no aborts: %s %v", s.Name, r.Valid, r.Reasons)
	const want = "transactional stage: no transaction was recorded, and the output topics read uncommitted hold no record the committed read does not"
	if r.Valid != checker.Unknown || !slices.ContainsFunc(r.Reasons, func(s string) bool { return strings.HasPrefix(s, want) }) {
		t.Errorf("verdict %s %q, want unknown because %q", r.Valid, r.Reasons, want)
	}
	if st := r.TxnStage; st == nil || len(st.Topics) == 0 || st.Topics[0].Aborted != 0 || st.Topics[0].Records == 0 {
		t.Errorf("stage %+v: want records visible and none aborted", st)
	}
}
