package runner

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/pipeline"
)

// stageBittenBy names, for the transactional stage's scenarios under
// broker faults, the kinds of fault that must each catch the processor
// mid-transaction: a transaction open at some moment of the fault's
// window. A broker fault that only ever fell between two transactions
// tested the group's rejoin, not what a broken transaction leaves behind.
var stageBittenBy = map[string][]string{
	"kafka-txn-stage-kill-broker":    {"kill"},
	"kafka-txn-stage-partition":      {"partition", "reset-peer"},
	"kafka-txn-stage-cluster-leader": {"kill", "isolate"},
}

// txnSpan is one transaction of a processor: when it began and ended
// (0: never), and how.
type txnSpan struct {
	id         string
	start, end int64
	how        string
}

// checkStageBitten fails t unless each fault of o's run of one of kinds
// has a transaction of the stage open in its window, and logs how those
// transactions ended.
func checkStageBitten(t *testing.T, o *Outcome, kinds []string) {
	t.Helper()
	spans := stageTxns(t, o.Dir)
	for _, f := range o.Result.Faults {
		if !slices.Contains(kinds, f.Kind) {
			continue
		}
		var caught []string
		for _, s := range spans {
			if s.start < f.EndNS && (s.end == 0 || s.end > f.StartNS) {
				caught = append(caught, s.id+" "+s.how)
			}
		}
		if len(caught) == 0 {
			t.Errorf("%s %s (%s): no transaction of the stage was open in its window", f.Kind, f.Target, f.Detail)
			continue
		}
		t.Logf("%s %s (%s): %d transactions open in its window: %s", f.Kind, f.Target, f.Detail, len(caught), strings.Join(caught, ", "))
	}
}

// stageTxns reads the transactions of every processor of the run in dir.
func stageTxns(t *testing.T, dir string) []txnSpan {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, pipeline.HistoryDir, "processor-*.jsonl"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no processor history in %s (%v)", dir, err)
	}
	var spans []txnSpan
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		h, _, err := history.Read(f, filepath.Base(name))
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		at := map[string]int{}
		for _, op := range h {
			if op.F != history.Txn {
				continue
			}
			if op.Type == history.Invoke {
				at[op.Value.Txn] = len(spans)
				spans = append(spans, txnSpan{id: op.Value.Txn, start: op.Time, how: "never ended"})
				continue
			}
			if i, ok := at[op.Value.Txn]; ok {
				s := &spans[i]
				s.end = op.Time
				s.how = op.Type.String()
				if op.Value.Reason != "" {
					s.how += " (" + op.Value.Reason + ")"
				}
				s.how += " after " + time.Duration(s.end-s.start).Round(time.Millisecond).String()
			}
		}
	}
	return spans
}
