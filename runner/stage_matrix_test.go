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
// broker faults, the kinds of fault of which at least one must bite the
// stage (each is logged): catch
// a transaction open at some moment of the fault's window or, when it
// fell between two (a transaction that aborts is followed by a refetch
// of its inputs, the stage's only idle moments under a slowed link), cost
// the processor its group membership, so that the first transaction to
// end after it was aborted by the session for a rebalance, fenced, or
// failed. Their faults last longer than the processor's 2s group
// session for that. A fault that did neither tested nothing of the stage
// but may have stalled it: the events partition's leader isolated holds
// the processor's fetches, so no transaction opens in the window (seen
// in CI in kafka-txn-stage-cluster-leader, whose kill had caught three
// open); a scenario none of whose faults bit tested nothing.
var stageBittenBy = map[string][]string{
	"kafka-txn-stage-kill-broker":    {"kill"},
	"kafka-txn-stage-partition":      {"partition", "reset-peer"},
	"kafka-txn-stage-cluster-leader": {"kill", "isolate"},
}

// txnSpan is one transaction of a processor: when it began and ended
// (0: never), how, and whether that was the processor's plan (committed,
// or aborted on purpose).
type txnSpan struct {
	id         string
	start, end int64
	how        string
	planned    bool
}

// checkStageBitten fails t unless a fault of o's run of one of kinds
// bit the stage (stageBittenBy), and logs how each did or did not.
func checkStageBitten(t *testing.T, o *Outcome, kinds []string) {
	t.Helper()
	spans := stageTxns(t, o.Dir)
	bit, missed := 0, 0
	for _, f := range o.Result.Faults {
		if !slices.Contains(kinds, f.Kind) {
			continue
		}
		var caught []string
		var next *txnSpan // the first to end after the fault began
		for i, s := range spans {
			if s.start < f.EndNS && (s.end == 0 || s.end > f.StartNS) {
				caught = append(caught, s.id+" "+s.how)
			}
			if s.end > f.StartNS && (next == nil || s.end < next.end) {
				next = &spans[i]
			}
		}
		switch {
		case len(caught) > 0:
			bit++
			t.Logf("%s %s (%s): %d transactions open in its window: %s", f.Kind, f.Target, f.Detail, len(caught), strings.Join(caught, ", "))
		case next != nil && !next.planned:
			bit++
			t.Logf("%s %s (%s): between two transactions; the next, %s, %s", f.Kind, f.Target, f.Detail, next.id, next.how)
		case next != nil:
			missed++
			t.Logf("%s %s (%s): no transaction open in its window, and the next, %s, %s", f.Kind, f.Target, f.Detail, next.id, next.how)
		default:
			missed++
			t.Logf("%s %s (%s): no transaction open in its window, none after it", f.Kind, f.Target, f.Detail)
		}
	}
	if bit == 0 {
		t.Errorf("none of the %d faults of kinds %v bit the stage", missed, kinds)
	}
}

// stageTxns reads the transactions of every processor of the run in dir.
func stageTxns(t *testing.T, dir string) []txnSpan {
	t.Helper()
	var spans []txnSpan
	for _, h := range roleHistories(t, dir, "processor") {
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
				s.planned = op.Type == history.OK || op.Type == history.Fail && op.Value.Reason == history.ReasonAbort
				if op.Value.Reason != "" {
					s.how += " (" + op.Value.Reason + ")"
				}
				s.how += " after " + time.Duration(s.end-s.start).Round(time.Millisecond).String()
			}
		}
	}
	return spans
}

// roleHistories reads the history file of every process of role (its
// name's prefix: producer, processor) of the run in dir, failing t when
// there is none.
func roleHistories(t *testing.T, dir, role string) []history.History {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, pipeline.HistoryDir, role+"-*.jsonl"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no %s history in %s (%v)", role, dir, err)
	}
	var out []history.History
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
		out = append(out, h)
	}
	return out
}
