package checker

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/deliverycheck/deliverycheck/history"
)

// Options configure a check.
type Options struct {
	Guarantees Guarantees
	// MaxEvents caps Anomaly.Events, overriding the default 100.
	MaxEvents int
	// MaxExamples caps Anomaly.Examples, overriding the default 5.
	MaxExamples int
	// MaxOps caps Example.Ops, overriding the default 20.
	MaxOps int
}

func (o Options) withDefaults() Options {
	if o.MaxEvents <= 0 {
		o.MaxEvents = 100
	}
	if o.MaxExamples <= 0 {
		o.MaxExamples = 5
	}
	if o.MaxOps <= 0 {
		o.MaxOps = 20
	}
	o.Guarantees = o.Guarantees.Normalize()
	return o
}

// Check checks an in-memory history, ordered as [history.Merge] orders it.
func Check(h history.History, opts Options) *Result {
	a := newAnalyzer(opts)
	a.observe(h)
	return a.finish(func(fn func([]history.Op) error) error { return fn(h) })
}

// CheckFiles reads, merges and checks history files, streaming them with
// [history.ScanFiles] so memory grows with the number of events, not ops.
// Files not ordered by time are read whole and sorted instead. The error
// is non-nil only when the input is not a readable history.
func CheckFiles(paths []string, opts Options) (*Result, error) {
	a := newAnalyzer(opts)
	rep, err := history.ScanFiles(paths, func(b []history.Op) error { a.observe(b); return nil })
	if errors.Is(err, history.ErrUnordered) {
		h, cuts, err := history.ReadFiles(paths...)
		if err != nil {
			return nil, err
		}
		r := Check(h, opts)
		r.Facts.Cuts = nonNil(cuts)
		return r, nil
	}
	if err != nil {
		return nil, err
	}
	a.cuts = rep.Cuts()
	return a.finish(func(fn func([]history.Op) error) error {
		_, err := history.ScanFiles(paths, fn)
		return err
	}), nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// commit flags of an event.
const (
	cInvoke uint8 = 1 << iota
	cOK
	cFail
	cInfo
	cObserved  // some op downstream of the commit mentions it
	cPublished // broker confirmed, or outbox row marked published
	cPoison
	cTimeSet
)

type event struct {
	id, source string
	key        int32
	version    int64
	commitTime int64 // ok time, else first invoke time
	flags      uint8
}

func (e *event) committed() bool {
	return e.flags&cOK != 0 || (e.indeterminate() && e.flags&cObserved != 0)
}

func (e *event) indeterminate() bool {
	return e.flags&cOK == 0 && (e.flags&cInfo != 0 || (e.flags&cInvoke != 0 && e.flags&cFail == 0))
}

// subEvent flags.
const (
	sAcked uint8 = 1 << iota
	sDLQ
	sSkipped
	sResolved // applied, skipped or dead-lettered: firstResolved is set
	sInbox
)

// subEvent is what one subscription did with one event.
type subEvent struct {
	resolved   int64 // time of the first apply, skip or dead-letter
	deliveries uint32
	applies    uint32 // apply ok ops
	effects    uint32 // final-read effect rows
	flags      uint8
}

type subscription struct {
	name     string
	declared bool
	ev       []subEvent
	maxDone  []int64 // per key: highest version whose first apply completed
}

func (s *subscription) at(e int32) *subEvent {
	if int(e) >= len(s.ev) {
		n := max(int(e)+1, 2*len(s.ev), 1024)
		s.ev = append(s.ev, make([]subEvent, n-len(s.ev))...)
	}
	return &s.ev[e]
}

func (s *subscription) maxDoneAt(k int32) *int64 {
	for int(k) >= len(s.maxDone) {
		s.maxDone = append(s.maxDone, 0)
	}
	return &s.maxDone[k]
}

type pendingApply struct {
	event, sub int32
	snapshot   int64 // maxDone of the key when the apply was invoked
}

// finding is one anomaly or shown item before grouping.
type finding struct {
	kind     Kind
	sub      int32 // -1: not per subscription
	event    int32
	boundary Boundary
	detail   string
}

type analyzer struct {
	opts     Options
	events   []event
	byID     map[string]int32
	bySource map[[2]string]int32
	keys     map[string]int32
	keyNames []string
	subs     []*subscription
	subByNm  map[string]int32
	pending  map[string]pendingApply // by process
	findings []finding
	counts   Counts
	drain    string
	final    string
	cuts     []history.Cut
	series   seriesAcc
}

func newAnalyzer(opts Options) *analyzer {
	opts = opts.withDefaults()
	a := &analyzer{
		opts:     opts,
		byID:     make(map[string]int32),
		bySource: make(map[[2]string]int32),
		keys:     make(map[string]int32),
		subByNm:  make(map[string]int32),
		pending:  make(map[string]pendingApply),
		drain:    "missing",
		final:    "missing",
	}
	for _, s := range opts.Guarantees.Subscriptions {
		a.sub(s).declared = true
	}
	return a
}

func (a *analyzer) event(v *history.Value) (int32, *event) {
	var i int32
	var ok bool
	if v.Source == "" {
		i, ok = a.byID[v.Event]
	} else {
		i, ok = a.bySource[[2]string{v.Source, v.Event}]
	}
	if !ok {
		i = int32(len(a.events))
		a.events = append(a.events, event{id: v.Event, source: v.Source, key: -1})
		if v.Source == "" {
			a.byID[v.Event] = i
		} else {
			a.bySource[[2]string{v.Source, v.Event}] = i
		}
	}
	e := &a.events[i]
	if e.key < 0 && v.Key != "" {
		k, ok := a.keys[v.Key]
		if !ok {
			k = int32(len(a.keyNames))
			a.keys[v.Key] = k
			a.keyNames = append(a.keyNames, v.Key)
		}
		e.key = k
	}
	if e.version == 0 {
		e.version = v.Version
	}
	if v.Poison {
		e.flags |= cPoison
	}
	return i, e
}

const defaultSubscription = "default"

func (a *analyzer) sub(name string) *subscription {
	_, s := a.subIdx(name)
	return s
}

func (a *analyzer) subIdx(name string) (int32, *subscription) {
	if name == "" {
		name = defaultSubscription
	}
	i, ok := a.subByNm[name]
	if !ok {
		i = int32(len(a.subs))
		a.subByNm[name] = i
		a.subs = append(a.subs, &subscription{name: name})
	}
	return i, a.subs[i]
}

// observe folds a batch of ops, in history order, into the analysis.
func (a *analyzer) observe(ops []history.Op) {
	a.counts.Ops += int64(len(ops))
	for i := range ops {
		op := &ops[i]
		a.series.op(op)
		v := &op.Value
		switch op.F {
		case history.Setup:
			for _, s := range v.Subscriptions {
				a.sub(s).declared = true
			}
			continue
		case history.Drain:
			switch op.Type {
			case history.OK:
				a.drain = "complete"
			case history.Fail, history.Info:
				if a.drain != "complete" {
					a.drain = "timed-out"
				}
			}
			continue
		case history.Fault:
			if op.Type == history.Invoke {
				a.counts.Faults++
			}
			continue
		case history.Crash:
			if op.Type != history.Invoke {
				a.counts.Crashes++
			}
			continue
		case history.Restart:
			if op.Type != history.Invoke {
				a.counts.Restarts++
			}
			continue
		case history.FinalRead:
			if v.Table == "" {
				switch op.Type {
				case history.Invoke:
					if a.final != "complete" {
						a.final = "incomplete"
					}
				case history.OK:
					a.final = "complete"
				case history.Fail, history.Info:
					if a.final != "complete" {
						a.final = "failed"
					}
				}
				continue
			}
		}
		if v.Event == "" {
			continue
		}
		ei, e := a.event(v)
		switch op.F {
		case history.Commit:
			switch op.Type {
			case history.Invoke:
				e.flags |= cInvoke
				if e.flags&cTimeSet == 0 {
					e.commitTime, e.flags = op.Time, e.flags|cTimeSet
				}
			case history.OK:
				e.flags |= cOK | cTimeSet
				e.commitTime = op.Time
			case history.Fail:
				e.flags |= cFail
			case history.Info:
				e.flags |= cInfo
			}
			if e.flags&cTimeSet == 0 {
				e.commitTime, e.flags = op.Time, e.flags|cTimeSet
			}
			continue
		case history.Publish:
			e.flags |= cObserved
			if op.Type == history.OK {
				e.flags |= cPublished
			}
			continue
		case history.FinalRead:
			if op.Type != history.OK {
				continue
			}
			e.flags |= cObserved
			switch v.Table {
			case history.TableOutbox:
				if v.Published {
					e.flags |= cPublished
				}
			case history.TableEffects:
				_, s := a.subIdx(v.Consumer)
				se := s.at(ei)
				se.effects++
				a.resolve(se, op.Time, 0)
			case history.TableInbox:
				_, s := a.subIdx(v.Consumer)
				s.at(ei).flags |= sInbox
			case history.TableDLQ:
				_, s := a.subIdx(v.Consumer)
				a.resolve(s.at(ei), op.Time, sDLQ)
			}
			continue
		case history.Deliver, history.Apply, history.SkipStale, history.Ack, history.DLQ:
		default:
			continue
		}
		e.flags |= cObserved
		si, s := a.subIdx(v.Consumer)
		se := s.at(ei)
		switch op.F {
		case history.Deliver:
			if op.Type == history.OK {
				se.deliveries++
			}
		case history.Apply:
			a.apply(op, ei, e, si, s, se)
		case history.SkipStale:
			if op.Type == history.OK {
				a.resolve(se, op.Time, sSkipped)
			}
		case history.Ack:
			if op.Type == history.OK {
				se.flags |= sAcked
			}
		case history.DLQ:
			if op.Type == history.OK {
				a.resolve(se, op.Time, sDLQ)
			}
		}
	}
}

func (a *analyzer) resolve(se *subEvent, t int64, flag uint8) {
	se.flags |= flag
	if se.flags&sResolved == 0 {
		se.flags |= sResolved
		se.resolved = t
	}
}

func (a *analyzer) apply(op *history.Op, ei int32, e *event, si int32, s *subscription, se *subEvent) {
	version := op.Value.Version
	if version == 0 {
		version = e.version
	}
	var maxDone *int64
	if e.key >= 0 && version > 0 {
		maxDone = s.maxDoneAt(e.key)
	}
	switch op.Type {
	case history.Invoke:
		p := pendingApply{event: ei, sub: si, snapshot: -1}
		if maxDone != nil {
			p.snapshot = *maxDone
		}
		a.pending[op.Process] = p
		return
	case history.Fail, history.Info:
		delete(a.pending, op.Process)
		return
	}
	snapshot := int64(-1)
	if maxDone != nil {
		snapshot = *maxDone
	}
	if p, ok := a.pending[op.Process]; ok {
		delete(a.pending, op.Process)
		if p.event == ei && p.sub == si {
			snapshot = p.snapshot
		}
	}
	first := se.applies == 0
	se.applies++
	if !first {
		return
	}
	a.resolve(se, op.Time, 0)
	if maxDone != nil {
		if version < snapshot {
			a.findings = append(a.findings, finding{kind: OrderRegression, sub: si, event: ei,
				detail: "version " + strconv.FormatInt(version, 10) + " applied after version " + strconv.FormatInt(snapshot, 10)})
		}
		*maxDone = max(*maxDone, version)
	}
	if e.flags&cTimeSet != 0 {
		a.series.latency(op.Time, op.Time-e.commitTime)
	}
}

func boundary(e *event, se *subEvent) Boundary {
	switch {
	case se.flags&sAcked != 0:
		return Acked
	case se.applies > 0 || se.effects > 0:
		return Applied
	case se.deliveries > 0:
		return Delivered
	case e.flags&cPublished != 0:
		return Published
	}
	return Committed
}

func (a *analyzer) finish(replay func(func([]history.Op) error) error) *Result {
	g := a.opts.Guarantees
	established := a.drain == "complete" && a.final == "complete"
	// Run-wide counts and commit classification.
	c := &a.counts
	c.Events = int64(len(a.events))
	for i := range a.events {
		e := &a.events[i]
		if e.flags&(cInvoke|cOK|cFail|cInfo) != 0 {
			c.Attempted++
		}
		switch {
		case e.flags&cOK != 0:
			c.Acknowledged++
		case e.indeterminate():
			c.Indeterminate++
			if e.flags&cObserved != 0 {
				c.Recovered++
				a.findings = append(a.findings, finding{kind: Recovered, sub: -1, event: int32(i)})
			} else {
				c.InDoubt++
				a.findings = append(a.findings, finding{kind: InDoubt, sub: -1, event: int32(i)})
			}
		case e.flags&cFail != 0:
			c.Failed++
		}
		if e.committed() {
			c.Committed++
			if e.flags&cPublished != 0 {
				c.Published++
			}
			if e.flags&cPoison != 0 {
				c.Poison++
			}
		}
	}
	// Subscriptions in name order; findings refer to the original indexes.
	order := make([]int32, len(a.subs))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(x, y int32) int { return cmpString(a.subs[x].name, a.subs[y].name) })
	stats := make([]SubscriptionStats, 0, len(a.subs))
	for _, si := range order {
		s := a.subs[si]
		st := SubscriptionStats{Name: s.name, Declared: s.declared}
		for i := range a.events {
			e := &a.events[i]
			var se subEvent
			if i < len(s.ev) {
				se = s.ev[i]
			}
			a.judge(&st, int32(i), e, si, &se, established)
		}
		stats = append(stats, st)
	}
	r := &Result{
		Guarantees:    g,
		Facts:         Facts{Drain: a.drain, FinalRead: a.final, Cuts: nonNil(a.cuts)},
		Counts:        a.counts,
		Subscriptions: stats,
		Reasons:       []string{},
	}
	a.group(r, order)
	a.examples(r, replay)
	r.Series = a.series.build(a, order)
	// Verdict.
	for _, an := range r.Anomalies {
		if an.Fatal {
			r.Reasons = append(r.Reasons, fmt.Sprintf("%d %s in %s", an.Count, an.Kind, an.Subscription))
		}
	}
	if a.drain != "complete" {
		r.Reasons = append(r.Reasons, "drain "+a.drain)
	}
	if a.final != "complete" {
		r.Reasons = append(r.Reasons, "final read "+a.final)
	}
	if c.Committed > 0 && len(a.subs) == 0 {
		r.Reasons = append(r.Reasons, "no subscriptions declared or observed")
		established = false
	}
	switch {
	case slices.ContainsFunc(r.Anomalies, func(an Anomaly) bool { return an.Fatal }):
		r.Valid = Invalid
	case !established:
		r.Valid = Unknown
	default:
		r.Valid = Valid
	}
	return r
}

// judge classifies what subscription si did with event ei.
func (a *analyzer) judge(st *SubscriptionStats, ei int32, e *event, si int32, se *subEvent, established bool) {
	add := func(k Kind, b Boundary) {
		a.findings = append(a.findings, finding{kind: k, sub: si, event: ei, boundary: b})
	}
	effects := max(se.applies, se.effects)
	st.Deliveries += int64(se.deliveries)
	st.Effects += int64(effects)
	if se.deliveries > 0 {
		st.Delivered++
	}
	if se.deliveries > 1 {
		st.Redelivered++
		add(Redelivered, "")
	}
	if effects > 0 {
		st.Applied++
	}
	if se.flags&sAcked != 0 {
		st.Acked++
	}
	dlq := se.flags&sDLQ != 0
	if dlq {
		st.DeadLettered++
	}
	if se.flags&sSkipped != 0 {
		st.StaleSkipped++
		add(StaleSkipped, "")
	}
	if !e.committed() {
		if effects > 0 && !e.indeterminate() {
			st.Unexpected++
			add(Unexpected, boundary(e, se))
		}
		return
	}
	if effects > 1 {
		st.DuplicateEffect++
		add(DuplicateEffect, boundary(e, se))
	}
	if dlq && e.flags&cPoison == 0 {
		add(WronglyDeadLettered, "")
	}
	if effects > 0 || dlq {
		return
	}
	switch {
	case se.flags&sSkipped != 0:
		add(Gap, "")
	case !established:
		st.Unseen++
		add(Unseen, boundary(e, se))
	case e.flags&cPoison != 0:
		add(DLQUnaccounted, boundary(e, se))
	default:
		st.Lost++
		add(Lost, boundary(e, se))
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

var kindRank = func() map[Kind]int {
	m := map[Kind]int{}
	for i, k := range AnomalyKinds {
		m[k] = i
	}
	for i, k := range ShownKinds {
		m[k] = len(AnomalyKinds) + i
	}
	return m
}()

var boundaryOrder = []Boundary{Committed, Published, Delivered, Applied, Acked}

// group turns findings into Anomalies and Shown, sorted by kind,
// subscription name, then event first appearance.
func (a *analyzer) group(r *Result, order []int32) {
	subRank := make([]int, len(a.subs))
	for rank, si := range order {
		subRank[si] = rank
	}
	rank := func(f *finding) int {
		if f.sub < 0 {
			return -1
		}
		return subRank[f.sub]
	}
	slices.SortFunc(a.findings, func(x, y finding) int {
		if d := kindRank[x.kind] - kindRank[y.kind]; d != 0 {
			return d
		}
		if d := rank(&x) - rank(&y); d != 0 {
			return d
		}
		return int(x.event) - int(y.event)
	})
	r.Anomalies, r.Shown = []Anomaly{}, []Anomaly{}
	for i := 0; i < len(a.findings); {
		j := i
		for j < len(a.findings) && a.findings[j].kind == a.findings[i].kind && a.findings[j].sub == a.findings[i].sub {
			j++
		}
		fs := a.findings[i:j]
		f0 := fs[0]
		an := Anomaly{Kind: f0.kind, Count: len(fs), Events: []string{}}
		if f0.sub >= 0 {
			an.Subscription = a.subs[f0.sub].name
		}
		var byBoundary [5]int
		for n, f := range fs {
			if n < a.opts.MaxEvents {
				an.Events = append(an.Events, a.events[f.event].id)
			}
			if f.boundary != "" {
				byBoundary[slices.Index(boundaryOrder, f.boundary)]++
			}
		}
		if f0.kind == Lost || f0.kind == DuplicateEffect {
			for b, n := range byBoundary {
				if n > 0 {
					an.Boundaries = append(an.Boundaries, BoundaryCount{Boundary: boundaryOrder[b], Count: n})
				}
			}
		}
		if slices.Contains(AnomalyKinds, f0.kind) {
			an.Fatal = r.Guarantees.Fatal(f0.kind)
			for _, f := range fs[:min(len(fs), a.opts.MaxExamples)] {
				e := &a.events[f.event]
				ex := Example{Event: e.id, Source: e.source, Version: e.version, Boundary: f.boundary, Detail: f.detail, Ops: []history.Op{}}
				if e.key >= 0 {
					ex.Key = a.keyNames[e.key]
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
func (a *analyzer) examples(r *Result, replay func(func([]history.Op) error) error) {
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
	_ = replay(func(ops []history.Op) error {
		for i := range ops {
			op := &ops[i]
			if op.Value.Event == "" {
				continue
			}
			slots, ok := want[[2]string{op.Value.Source, op.Value.Event}]
			if !ok {
				continue
			}
			for _, s := range slots {
				c := op.Value.Consumer
				if c == "" && subscribed(op) {
					c = defaultSubscription
				}
				if (c == "" || c == s.sub) && len(s.ex.Ops) < a.opts.MaxOps {
					s.ex.Ops = append(s.ex.Ops, *op)
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
