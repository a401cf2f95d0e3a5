package checker

import (
	"math"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/deliverycheck/deliverycheck/history"
)

const never = math.MaxInt64

func pend(commit, first int64) pendingEvent { return pendingEvent{commit: commit, first: first} }

func TestOldestAgeCurve(t *testing.T) {
	// Committed at 1, 2, 3; settled at 5, 4, never: the oldest is the
	// first until 5, then the third (the second settled at 4).
	evs := []pendingEvent{pend(1, 5), pend(2, 4), pend(3, never)}
	got := oldestAgeCurve(evs, 9, 2, 6)
	// bucket ends 2, 4, 6, 8, 9 (capped), 9
	want := []int64{1, 3, 3, 5, 6, 6}
	if !slices.Equal(got, want) {
		t.Errorf("curve %v, want %v", got, want)
	}
	if got := oldestAgeCurve(nil, 9, 2, 3); !slices.Equal(got, []int64{0, 0, 0}) {
		t.Errorf("empty curve %v", got)
	}
}

func TestBacklogOvers(t *testing.T) {
	for _, c := range []struct {
		name  string
		evs   []pendingEvent
		end   int64
		limit int64
		want  []backlogOver
	}{
		{name: "young", evs: []pendingEvent{pend(1, 3), pend(2, 4)}, end: 10, limit: 5},
		{name: "one old event", evs: []pendingEvent{pend(1, 9), pend(2, 4)}, end: 10, limit: 5,
			want: []backlogOver{{start: 6, end: 9, worstAge: 8, worstAt: 9, worst: 0}}},
		{name: "the oldest changes, still over", evs: []pendingEvent{pend(1, 8), pend(2, 10)}, end: 20, limit: 5,
			want: []backlogOver{{start: 6, end: 10, worstAge: 8, worstAt: 10, worst: 1}}},
		{name: "two stretches", evs: []pendingEvent{pend(1, 8), pend(9, 17)}, end: 20, limit: 5,
			want: []backlogOver{{start: 6, end: 8, worstAge: 7, worstAt: 8, worst: 0}, {start: 14, end: 17, worstAge: 8, worstAt: 17, worst: 1}}},
		{name: "open at the end", evs: []pendingEvent{pend(1, never)}, end: 10, limit: 5,
			want: []backlogOver{{start: 6, end: 10, worstAge: 9, worstAt: 10, worst: 0, open: true}}},
		{name: "settled before its commit op", evs: []pendingEvent{pend(5, 1)}, end: 20, limit: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := backlogOvers(c.evs, c.end, c.limit)
			if !slices.Equal(got, c.want) {
				t.Errorf("overs %+v, want %+v", got, c.want)
			}
		})
	}
}

// The chain walk gives the exact largest age: the brute force over every
// settle and commit time (where the age function has its breaks) agrees.
func TestOldestSpansMaxIsExact(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 30).Draw(t, "n")
		var evs []pendingEvent
		for range n {
			c := rapid.Int64Range(0, 100).Draw(t, "commit")
			f := int64(never)
			if rapid.Bool().Draw(t, "settles") {
				f = c + rapid.Int64Range(1, 50).Draw(t, "wait")
			}
			evs = append(evs, pend(c, f))
		}
		end := rapid.Int64Range(0, 160).Draw(t, "end")
		slices.SortFunc(evs, byCommit)
		var chain int64
		oldestSpans(evs, end, func(s oldestSpan) { chain = max(chain, s.to-evs[s.i].commit) })
		var brute int64
		age := func(at int64) int64 {
			oldest := int64(-1)
			for _, e := range evs {
				if e.commit <= at && e.first > at && (oldest < 0 || e.commit < oldest) {
					oldest = e.commit
				}
			}
			if oldest < 0 {
				return 0
			}
			return at - oldest
		}
		for _, e := range evs {
			for _, at := range []int64{e.first - 1, e.commit, end} {
				if at <= end && at >= 0 {
					brute = max(brute, age(at))
				}
			}
		}
		// Ages are taken just before a settle (first-1) by the brute
		// force and at it by the chain, in integer ns.
		if chain != brute && chain != brute+1 {
			t.Fatalf("chain max %d, brute force %d (evs %v, end %d)", chain, brute, evs, end)
		}
	})
}

func TestMaxPendingAndWaits(t *testing.T) {
	evs := []pendingEvent{pend(1, 5), pend(2, 4), pend(3, never), pend(6, 7)}
	if most, at := maxPending(newPendingSet(evs, 10)); most != 3 || at != 3 {
		t.Errorf("max pending %d at %d, want 3 at 3", most, at)
	}
	p50, p99, most, n := waitQuantiles(evs)
	if p50 != 2 || p99 != 4 || most != 4 || n != 3 {
		t.Errorf("waits p50 %d p99 %d max %d n %d", p50, p99, most, n)
	}
}

func TestInFlight(t *testing.T) {
	var a, b flightAcc
	op := func(acc *flightAcc, t int64, proc string, typ history.Type, f history.F, id, reason, errText string) {
		acc.op(&history.Op{Time: t, Process: proc, Type: typ, F: f, Value: history.Value{Event: id, Consumer: "inventory", Reason: reason, Error: errText}})
	}
	// Two shards' events in one process: e1 and e2 delivered at 1s, e2
	// retried (still held), e1 applied at 2s, e3 delivered at 2.5s, e2
	// refused at 3s; the process crashes at 4s holding e3.
	op(&a, 1*sec, "c-0", history.OK, history.Deliver, "e1", "", "")
	op(&b, 1*sec, "c-0", history.OK, history.Deliver, "e2", "", "")
	op(&b, 1*sec+1, "c-0", history.Fail, history.Apply, "e2", "", "connection refused")
	op(&a, 2*sec, "c-0", history.OK, history.Apply, "e1", "", "")
	op(&a, 2*sec+sec/2, "c-0", history.OK, history.Deliver, "e3", "", "")
	op(&b, 3*sec+1, "c-0", history.Fail, history.Apply, "e2", "unsupported", "")
	a.op(&history.Op{Time: 4 * sec, Process: "nemesis", Type: history.Info, F: history.Crash, Value: history.Value{Target: "c-0"}})
	op(&a, 5*sec, "c-0", history.OK, history.Apply, "e3", "", "")
	got := inFlight([]*flightAcc{&a, &b}, sec, 6)
	if len(got) != 1 {
		t.Fatalf("processes %+v", got)
	}
	p := got[0]
	if p.process != "c-0" || p.subscription != "inventory" || p.most != 2 {
		t.Errorf("flight %+v", p)
	}
	if want := []int64{0, 2, 2, 2, 1, 0}; !slices.Equal(p.curve, want) {
		t.Errorf("curve %v, want %v", p.curve, want)
	}
}
