package checker

import (
	"slices"

	"github.com/deliverycheck/deliverycheck/history"
)

// finding is one anomaly or shown item before grouping.
type finding struct {
	kind     Kind
	sub      int32 // -1: not per subscription
	event    int32
	boundary Boundary
	stage    stage // lost only
	detail   string
}

var kindRank = func() map[Kind]int {
	m := map[Kind]int{}
	for i, k := range slices.Concat(AnomalyKinds(), TxnStageKinds(), ResourceKinds(), OperationKinds(), ShownKinds()) {
		m[k] = i
	}
	return m
}()

var boundaryOrder = []Boundary{Committed, Published, Delivered, BrokerDLQ, Applied, Acked}

// runs calls fn with each run of adjacent elements of s that same puts
// together, in order: the findings of one anomaly, once sorted.
func runs[F any](s []F, same func(x, y F) bool, fn func(run []F)) {
	for i := 0; i < len(s); {
		j := i + 1
		for j < len(s) && same(s[i], s[j]) {
			j++
		}
		fn(s[i:j])
		i = j
	}
}

// fillAnomaly sets an's Count and lists fs in its Events and Examples,
// each capped as opts says: event names a finding, example says it (only
// called for the examples kept).
func fillAnomaly[F any](an *Anomaly, fs []F, opts Options, event func(F) string, example func(F) Example) {
	an.Count = len(fs)
	if an.Events == nil {
		an.Events = []string{}
	}
	for n, f := range fs {
		if n < opts.MaxEvents {
			an.Events = append(an.Events, event(f))
		}
		if n < opts.MaxExamples {
			an.Examples = append(an.Examples, example(f))
		}
	}
}

// group turns findings into Anomalies and Shown, sorted by kind,
// subscription name, then event first appearance.
func (v *view) group(r *Result, opts Options) {
	rank := func(f *finding) int { return int(f.sub) }
	slices.SortFunc(v.findings, func(x, y finding) int {
		if d := kindRank[x.kind] - kindRank[y.kind]; d != 0 {
			return d
		}
		if d := rank(&x) - rank(&y); d != 0 {
			return d
		}
		return int(x.event) - int(y.event)
	})
	r.Anomalies, r.Shown = []Anomaly{}, []Anomaly{}
	for i := 0; i < len(v.findings); {
		j := i
		for j < len(v.findings) && v.findings[j].kind == v.findings[i].kind && v.findings[j].sub == v.findings[i].sub {
			j++
		}
		fs := v.findings[i:j]
		f0 := fs[0]
		an := Anomaly{Kind: f0.kind, Count: len(fs), Events: []string{}}
		if f0.sub >= 0 {
			an.Subscription = v.subs[f0.sub].name
		}
		var byBoundary [6]int
		var byStage [1 << 8]int
		for n, f := range fs {
			if n < opts.MaxEvents {
				an.Events = append(an.Events, v.events[f.event].id)
			}
			if f.boundary != "" {
				byBoundary[slices.Index(boundaryOrder, f.boundary)]++
			}
			byStage[f.stage]++
		}
		// Packed as seen<<4 | notReached, stages sort in pipeline order.
		for st, n := range byStage[1:] {
			if n > 0 {
				an.Stages = append(an.Stages, StageCount{Stage: stage(st + 1).Stage(), Count: n})
			}
		}
		if f0.kind == Lost || f0.kind == DuplicateEffect {
			for b, n := range byBoundary {
				if n > 0 {
					an.Boundaries = append(an.Boundaries, BoundaryCount{Boundary: boundaryOrder[b], Count: n})
				}
			}
		}
		if slices.Contains(AnomalyKinds(), f0.kind) {
			an.Fatal = r.Guarantees.Fatal(f0.kind)
			for _, f := range fs[:min(len(fs), opts.MaxExamples)] {
				e := &v.events[f.event]
				ex := Example{Event: e.id, Source: e.source, Version: e.version, Boundary: f.boundary, Stage: f.stage.Stage(), Detail: f.detail, Ops: []history.Op{}}
				if e.key >= 0 {
					ex.Key = v.keyNames[e.key]
				}
				an.Examples = append(an.Examples, ex)
			}
			r.Anomalies = append(r.Anomalies, an)
		} else {
			r.Shown = append(r.Shown, an)
		}
		i = j
	}
}

// examples fills each example with its ops by replaying the history. It
// only replays when there is an anomaly to show.
func (v *view) examples(r *Result, opts Options, replay func(restart func(), fn func([]history.Op) error) error) {
	type slot struct {
		ex  *Example
		sub string
	}
	want := map[[2]string][]slot{}
	for i := range r.Anomalies {
		an := &r.Anomalies[i]
		sub := an.Subscription
		for j := range an.Examples {
			ex := &an.Examples[j]
			k := [2]string{ex.Source, ex.Event}
			want[k] = append(want[k], slot{ex, sub})
		}
	}
	if len(want) == 0 {
		return
	}
	pos := int64(0)
	restart := func() {
		pos = 0
		for _, slots := range want {
			for _, s := range slots {
				s.ex.Ops = s.ex.Ops[:0]
			}
		}
	}
	_ = replay(restart, func(ops []history.Op) error {
		base := pos
		pos += int64(len(ops))
		for i := range ops {
			op := &ops[i]
			if op.Value.Event == "" {
				continue
			}
			slots, ok := want[[2]string{op.Value.Source, v.aliases.resolve(op).Value.Event}]
			if !ok {
				continue
			}
			for _, s := range slots {
				c := op.Value.Consumer
				if c == "" && subscribed(op) {
					c = defaultSubscription
				}
				if (c == "" || c == s.sub) && len(s.ex.Ops) < opts.MaxOps {
					o := *op
					o.Index = base + int64(i) // the position, as ScanFiles numbers it
					s.ex.Ops = append(s.ex.Ops, o)
				}
			}
		}
		return nil
	})
}

// subscribed reports whether op belongs to a subscription.
func subscribed(op *history.Op) bool {
	switch op.F {
	case history.Deliver, history.Apply, history.SkipStale, history.Ack, history.DLQ:
		return true
	case history.FinalRead:
		return op.Value.Table != history.TableOutbox
	}
	return false
}
