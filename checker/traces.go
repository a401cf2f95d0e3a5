package checker

import (
	"cmp"
	"hash/maphash"
	"slices"

	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/internal/trace"
)

// Traces is how the events' trace context travelled from the producer to
// the consumers (docs/results.md, "Traces"), judged on the value.trace of
// each op that names a committed event. A trace id is never an event's
// identity: these are figures, never an anomaly.
type Traces struct {
	// Events counts the committed events.
	Events int64 `json:"events"`
	// Propagated counts those whose every op with a trace is in one
	// trace, and every delivery carried it.
	Propagated int64 `json:"propagated"`
	// Broken counts those with ops in more than one trace: a hop
	// started a new trace instead of continuing the event's (a relay
	// that starts one per publish attempt).
	Broken int64 `json:"broken"`
	// Dropped counts those in one trace whose delivery, at least once,
	// carried none: a hop did not pass the context on.
	Dropped int64 `json:"dropped"`
	// Untraced counts those no op gives a trace for.
	Untraced int64 `json:"untraced"`
	// Examples are a few broken or dropped events, first seen first.
	Examples []string `json:"examples,omitempty"`
}

// traceAcc keeps, per event of a shard, the trace its first traced op
// gave (a hash, with the two top bits for what went wrong), indexed as
// shard.events. Nil until an op carries a trace.
type traceAcc struct {
	ids []uint64
	any bool // some op carried a trace
}

const (
	traceBroken  uint64 = 1 << 63 // an op in another trace
	traceDropped uint64 = 1 << 62 // a delivery without a trace
	traceSet     uint64 = 1 << 61 // the event's trace is known
	traceHash           = traceSet - 1
)

// op folds op, naming event ei and not a final-read row, into t.
func (t *traceAcc) op(seed maphash.Seed, ei int32, op *history.Op) {
	id, ok := trace.ID(op.Value.Trace)
	if !ok && !(op.F == history.Deliver && op.Value.Trace == "") {
		return
	}
	if !ok {
		// A delivery without a trace drops the event's, if it has one
		// by now (its commit comes first); histories without traces
		// cost nothing here.
		if int(ei) < len(t.ids) && t.ids[ei]&traceSet != 0 {
			t.ids[ei] |= traceDropped
		}
		return
	}
	if int(ei) >= len(t.ids) {
		t.ids = append(t.ids, make([]uint64, max(int(ei)+1, 2*len(t.ids), 1024)-len(t.ids))...)
	}
	x := &t.ids[ei]
	t.any = true
	h := maphash.String(seed, id) & traceHash
	switch {
	case *x&traceSet == 0:
		*x |= traceSet | h
	case *x&traceHash != h:
		*x |= traceBroken
	}
}

// maxTraceExamples bounds Traces.Examples.
const maxTraceExamples = 5

// tracesSection fills r.Traces when some op carried a trace.
func (a *analyzer) tracesSection(v *view, r *Result) {
	traced := false
	for _, s := range a.shards {
		traced = traced || s.traces.any
	}
	if !traced {
		return
	}
	t := &Traces{}
	type example struct {
		pos int64
		id  string
	}
	var ex []example
	for _, s := range a.shards {
		for i := range s.events {
			e := &s.events[i]
			if !e.committed() {
				continue
			}
			t.Events++
			var x uint64
			if i < len(s.traces.ids) {
				x = s.traces.ids[i]
			}
			switch {
			case x&traceSet == 0:
				t.Untraced++
				continue
			case x&traceBroken != 0:
				t.Broken++
			case x&traceDropped != 0:
				t.Dropped++
			default:
				t.Propagated++
				continue
			}
			ex = append(ex, example{e.firstPos, e.id})
		}
	}
	slices.SortFunc(ex, func(x, y example) int { return cmp.Compare(x.pos, y.pos) })
	for _, e := range ex[:min(len(ex), maxTraceExamples)] {
		t.Examples = append(t.Examples, e.id)
	}
	r.Traces = t
}
