package checker

import (
	"path/filepath"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/deliverycheck/deliverycheck/history"
)

// maxWindowBrute is maxWindow by brute force: for every time t of times,
// how many fall in [t, t+w).
func maxWindowBrute(times []int64, w int64) int64 {
	var best int64
	for _, t := range times {
		var n int64
		for _, u := range times {
			if u >= t && u < t+w {
				n++
			}
		}
		best = max(best, n)
	}
	return best
}

// The most redrives in any 1 s window, found in one sweep, is what
// counting every window by brute force finds, and its window's start
// holds that many.
func TestMaxWindowIsBruteForce(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		times := rapid.SliceOfN(rapid.Int64Range(0, 5*second), 0, 60).Draw(t, "times")
		slices.Sort(times)
		n, start := maxWindow(times, second)
		if want := maxWindowBrute(times, second); n != want {
			t.Fatalf("maxWindow = %d, brute force %d", n, want)
		}
		var in int64
		for _, u := range times {
			if u >= start && u < start+second {
				in++
			}
		}
		if in != n {
			t.Fatalf("the window from %d holds %d, maxWindow said %d", start, in, n)
		}
	})
}

// What the redrive section counts of the golden redrive histories.
func TestRedriveCounts(t *testing.T) {
	for _, tc := range []struct {
		name string
		want SubscriptionRedrive
	}{
		{"redrive-recovered", SubscriptionRedrive{Subscription: "email", Rate: 50, MaxRate: 3, Redriven: 3, Redrives: 3, Recovered: 3, Kept: 1, CanaryOutcome: redriveRecovered}},
		{"redrive-unrecovered", SubscriptionRedrive{Subscription: "email", Rate: 200, MaxRate: 2, Redriven: 2, Redrives: 2, ReFailed: 2, Unrecovered: 2}},
		{"redrive-purged", SubscriptionRedrive{Subscription: "email", Rate: 200, MaxRate: 2, Redriven: 2, Redrives: 2, ReFailed: 2, Purged: 2}},
		{"redrive-rate", SubscriptionRedrive{Subscription: "email", Rate: 1, MaxRate: 3, Redriven: 3, Redrives: 3, Recovered: 3, CanaryOutcome: redriveRecovered}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := CheckFiles([]string{filepath.Join("testdata", tc.name+".jsonl")}, Options{Guarantees: mustGuarantees(t, "effectively-once,subscriptions=email")})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Redrive) != 1 {
				t.Fatalf("redrive = %+v, want one subscription", r.Redrive)
			}
			got := r.Redrive[0]
			got.MaxRateNS, got.Canary = 0, ""
			if got != tc.want {
				t.Errorf("redrive =\n %+v, want\n %+v", got, tc.want)
			}
		})
	}
}

func mustGuarantees(t *testing.T, s string) Guarantees {
	t.Helper()
	g, err := ParseGuarantees(s)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// An event redriven, turned away by the inbox as a duplicate of its own
// earlier effect, was already applied; a poison one dead-lettered again
// was rejected; one skipped as stale was superseded.
func TestRedriveOutcome(t *testing.T) {
	poison := &event{flags: cPoison}
	plain := &event{}
	for _, tc := range []struct {
		e       *event
		a       redriveAcc
		effects uint32
		skipped bool
		want    string
	}{
		{plain, redriveAcc{redrives: 1, after: afterDuplicate}, 1, false, redriveAlreadyApplied},
		{plain, redriveAcc{redrives: 1, after: afterApplied}, 1, false, redriveRecovered},
		{plain, redriveAcc{redrives: 1, after: afterSkipped}, 0, false, redriveSuperseded},
		{plain, redriveAcc{redrives: 1}, 0, true, redriveSuperseded},
		{poison, redriveAcc{redrives: 1, after: afterDLQ}, 0, false, redriveRejected},
		{plain, redriveAcc{redrives: 1, after: afterDLQ}, 0, false, redriveReFailed},
		{plain, redriveAcc{redrives: 1}, 0, false, redrivePending},
	} {
		if got := redriveOutcome(tc.e, &tc.a, tc.effects, tc.skipped); got != tc.want {
			t.Errorf("redriveOutcome(%+v, effects %d, skipped %v) = %s, want %s", tc.a, tc.effects, tc.skipped, got, tc.want)
		}
	}
}

// withOps returns h with ops added before its last op (the final read's
// closing ok), at its time.
func withOps(h history.History, ops ...history.Op) history.History {
	h = slices.Clone(h)
	last := h[len(h)-1]
	h = h[:len(h)-1]
	for _, op := range ops {
		op.Time = last.Time
		h = append(h, op)
	}
	return append(h, last)
}

func init() {
	// Unrecovered: applied events of one subscription turned into new-
	// schema dead letters still in its dead-letter queue after a redrive
	// of it took effect.
	plants[Unrecovered] = func(t *rapid.T, g *genHistory) (history.History, []string, bool) {
		s, es, ok := pickApplied(t, g, g.applied)
		if !ok {
			return nil, nil, false
		}
		m := set(es)
		h := without(g.h, func(op *history.Op) bool {
			return m[op.Value.Event] && op.Value.Consumer == s &&
				(op.F == history.Apply || op.Value.Table == history.TableEffects || op.Value.Table == history.TableInbox)
		})
		for i := range h {
			if h[i].F == history.Commit && m[h[i].Value.Event] {
				h[i].Value.Schema = 2
			}
		}
		step := history.Value{Fault: FaultRedrive, Target: s, Detail: "at 1s: redrive " + s + " at 10/s"}
		done := step
		done.Evidence = "redrove them"
		h = withOps(h, history.Op{Process: "nemesis", Type: history.Invoke, F: history.Fault, Value: step},
			history.Op{Process: "nemesis", Type: history.OK, F: history.Fault, Value: done})
		return withRows(h, es, func(e *genEvent) []history.Value {
			return []history.Value{{Table: history.TableDLQ, Event: e.id, Consumer: s, Reason: "schema version 2 is not supported (accepts 1)"},
				{Table: history.TableBrokerDLQ, Event: e.id, Consumer: s}}
		}), ids(s, es), true
	}
}
