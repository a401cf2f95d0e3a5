package checker

import (
	"cmp"
	"slices"

	"github.com/deliverycheck/deliverycheck/history"
)

// applyRec is the first effect of an event in a subscription, for the
// order check: when it began and when it was done, in history time: its
// apply invoke and ok, or its effect row's commit_time for both. Equal
// times are not ordered.
type applyRec struct {
	sub, event int32
	inv, ok    int64
	version    int64
}

func byOK(x, y applyRec) int { return cmp.Compare(x.ok, y.ok) }

type pendKey struct {
	process string
	event   int32
}

// apply folds an apply op of event ei in subscription si: an invoke is
// when the apply began, and the ok of an event's first effect becomes its
// order record.
func (s *shard) apply(op *history.Op, ei int32, e *event, si int32, se *subEvent) {
	pk := pendKey{op.Process, ei}
	switch op.Type {
	case history.Invoke:
		s.pending[pk] = op.Time
		return
	case history.Fail, history.Info:
		delete(s.pending, pk)
		if op.Type == history.Fail && duplicateReason(op.Value.Reason) {
			se.flags |= sDupRefused
		}
		return
	}
	inv := op.Time
	if t, ok := s.pending[pk]; ok {
		inv = t
		delete(s.pending, pk)
	}
	if !se.applied(op.Time) {
		return
	}
	s.applies = append(s.applies, applyRec{sub: si, event: ei, inv: inv, ok: op.Time, version: cmp.Or(op.Value.Version, e.version)})
	if e.flags&cTimeSet != 0 {
		s.series.latency(op.Time, op.Time-e.commitTime)
	}
}

// settleOrder settles the shard's order records once the final read is
// settled: an effect row's commit_time orders its effect, if the rows of
// the shard's last attempt count; apply ops order the rest.
func (s *shard) settleOrder(counts bool) {
	if !counts {
		s.ledger = nil
	}
	if len(s.ledger) > 0 {
		recs := s.applies[:0]
		for _, r := range s.applies {
			if sub := s.subs[r.sub]; int(r.event) >= len(sub.ev) || sub.ev[r.event].flags&sTimed == 0 {
				recs = append(recs, r)
			}
		}
		s.applies = append(recs, s.ledger...)
	}
	s.ledger = nil
}

// sweep finds the order regressions and gaps: per subscription and key,
// a first effect that began after the first effect of a higher version
// was done. It counting-sorts the shards' order records by (subscription,
// key) and sorts each bucket by completion (it already nearly is: shards
// append in history order). keyMap, subIndexOf and localToGlobal map each
// shard's keys, subscriptions and events to the view's.
func (a *analyzer) sweep(v *view, keyMap, subIndexOf, localToGlobal [][]int32) {
	nk := v.nk
	usable := func(s *shard, r *applyRec) bool { return s.events[r.event].key >= 0 && r.version > 0 }
	bucketOf := func(si int, s *shard, r *applyRec) int {
		return int(subIndexOf[si][r.sub])*nk + int(keyMap[si][s.events[r.event].key])
	}
	starts := make([]int32, len(v.subs)*nk+1)
	n := 0
	for si, s := range a.shards {
		for i := range s.applies {
			if r := &s.applies[i]; usable(s, r) {
				starts[bucketOf(si, s, r)+1]++
				n++
			}
		}
	}
	if n == 0 {
		return
	}
	for i := 1; i < len(starts); i++ {
		starts[i] += starts[i-1]
	}
	sorted := make([]applyRec, n)
	fill := slices.Clone(starts)
	for si, s := range a.shards {
		for i := range s.applies {
			r := s.applies[i]
			if !usable(s, &r) {
				continue
			}
			b := bucketOf(si, s, &r)
			r.sub = int32(b / max(nk, 1))
			r.event = localToGlobal[si][r.event]
			sorted[fill[b]] = r
			fill[b]++
		}
		s.applies = nil
	}
	for b := 0; b+1 < len(starts); b++ {
		group := sorted[starts[b]:starts[b+1]]
		if len(group) < 2 {
			continue
		}
		if !slices.IsSortedFunc(group, byOK) {
			slices.SortStableFunc(group, byOK)
		}
		// Versions rising in completion order: no version began after
		// a higher one was done, and none came before the one below it.
		if slices.IsSortedFunc(group, func(x, y applyRec) int { return cmp.Compare(x.version, y.version) }) {
			continue
		}
		v.findings = gaps(group, regressions(group, v.findings))
	}
}
