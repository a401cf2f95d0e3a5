package checker

// The measures of a subscription's backlog (backlog.go says what they
// mean), as pure functions of its pending events: each event's commit
// time and first settle, in commit order.

import (
	"cmp"
	"math"
	"slices"
)

// pendingEvent is one event that was pending in a subscription: committed
// at commit, first settled at first (math.MaxInt64 if never); ev is its
// index in the view.
type pendingEvent struct {
	ev     int32
	commit int64
	first  int64
}

// byCommit orders pending events by commit time, then by first settle.
func byCommit(x, y pendingEvent) int {
	if c := cmp.Compare(x.commit, y.commit); c != 0 {
		return c
	}
	return cmp.Compare(x.first, y.first)
}

// oldestSpan is a stretch during which one event (evs[i]) was the oldest
// pending: from From (when the one before it settled, or its commit) to
// To (its first settle, or the end). Its age grows from From-commit to
// To-commit.
type oldestSpan struct {
	i        int
	from, to int64
}

// oldestSpans calls fn for each stretch during which one event was the
// oldest pending, in time order, up to end. evs are sorted by commit
// time. The oldest event's age grows until it settles, then the oldest
// becomes the next one in commit order still pending: its age peaks at
// the settle of each event of that chain, so walking it once gives the
// exact maximum, with no buckets (O(len(evs))).
func oldestSpans(evs []pendingEvent, end int64, fn func(oldestSpan)) {
	t := int64(math.MinInt64) // when the previous oldest settled
	for i, e := range evs {
		if e.commit > end {
			return
		}
		if e.first <= t || e.first <= e.commit {
			continue // settled before it could be the oldest
		}
		from, to := max(e.commit, t), min(e.first, end)
		fn(oldestSpan{i: i, from: from, to: to})
		if to >= end {
			return
		}
		t = to
	}
}

// oldestAgeCurve is the age of the oldest pending event at the end of
// each of n buckets of width ns (0 when none is pending), judged up to
// end: a bucket ending later shows the age at end. evs are sorted by
// commit time. An event settled stays settled, so one pointer sweeps them
// once: O(len(evs) + n).
func oldestAgeCurve(evs []pendingEvent, end, width int64, n int) []int64 {
	out := make([]int64, n)
	p := 0
	for b := range n {
		t := min(int64(b+1)*width, end)
		for p < len(evs) && (evs[p].first <= t || evs[p].first <= evs[p].commit) {
			p++
		}
		if p < len(evs) && evs[p].commit <= t {
			out[b] = t - evs[p].commit
		}
	}
	return out
}

// backlogOver is a stretch during which the oldest pending event was
// older than the limit: from start to end, with its worst age (the
// oldest event's wait at worstAt, evs[worst]); open when it lasted to
// the end of the judged window.
type backlogOver struct {
	start, end int64
	worstAge   int64
	worstAt    int64
	worst      int
	open       bool
}

// backlogOvers returns the stretches, up to end, during which the oldest
// pending event of evs (sorted by commit time) was older than limit.
// Stretches that meet are one: the oldest event changed, the backlog did
// not get younger than the limit in between.
func backlogOvers(evs []pendingEvent, end, limit int64) []backlogOver {
	var out []backlogOver
	oldestSpans(evs, end, func(s oldestSpan) {
		e := evs[s.i]
		if s.to-e.commit <= limit {
			return
		}
		start := max(s.from, e.commit+limit)
		age := s.to - e.commit
		if n := len(out); n > 0 && out[n-1].end == start {
			o := &out[n-1]
			o.end = s.to
			if age > o.worstAge {
				o.worstAge, o.worstAt, o.worst = age, s.to, s.i
			}
			o.open = s.to >= end && e.first > end
			return
		}
		out = append(out, backlogOver{start: start, end: s.to, worstAge: age, worstAt: s.to, worst: s.i, open: s.to >= end && e.first > end})
	})
	return out
}

// maxPending is the most events of p pending at once, and the first
// time it was reached.
func maxPending(p *pendingSet) (most, at int64) {
	var n int64
	j := 0
	for _, u := range p.ups {
		for j < len(p.downs) && p.downs[j] <= u {
			n--
			j++
		}
		n++
		if n > most {
			most, at = n, u
		}
	}
	return most, at
}

// waitQuantiles are the p50, p99 and max of the waits (commit to first
// settle) of the events of evs that settled, and how many did.
func waitQuantiles(evs []pendingEvent) (p50, p99, most int64, n int) {
	waits := make([]int64, 0, len(evs))
	for _, e := range evs {
		if e.first != math.MaxInt64 {
			waits = append(waits, max(e.first-e.commit, 0))
		}
	}
	if len(waits) == 0 {
		return 0, 0, 0, 0
	}
	slices.Sort(waits)
	q := func(p float64) int64 { return waits[min(len(waits)-1, int(p*float64(len(waits))))] }
	return q(0.50), q(0.99), waits[len(waits)-1], len(waits)
}
