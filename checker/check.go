package checker

import (
	"cmp"
	"errors"
	"fmt"
	"hash/maphash"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

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
	a := newAnalyzer(opts, 0)
	a.observe(h)
	return a.finish(func(fn func([]history.Op) error) error { return fn(h) })
}

// CheckFiles reads, merges and checks history files, streaming them with
// [history.ScanFiles] so memory grows with the number of events, not ops.
// Files not ordered by time are read whole and sorted instead. The error
// is non-nil only when the input is not a readable history.
func CheckFiles(paths []string, opts Options) (*Result, error) {
	// Size the event tables from the input: a typical event takes a dozen
	// ops of ~150 bytes. A wrong guess only costs a resize or some memory.
	var size int64
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil {
			size += st.Size()
		}
	}
	a := newAnalyzer(opts, int(min(size/2000, 1<<24)))
	rep, err := history.ScanFilesPartitioned(paths, len(a.shards), a.ownerOf, func(b []history.Op, parts [][]int32, release func()) error {
		a.observeParts(b, parts, release)
		return nil
	})
	if errors.Is(err, history.ErrUnordered) {
		a.stop()
		h, cuts, err := history.ReadFiles(paths...)
		if err != nil {
			return nil, err
		}
		r := Check(h, opts)
		r.Facts.Cuts = nonNil(cuts)
		return r, nil
	}
	if err != nil {
		a.stop()
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
	firstPos   int64 // position in the history of the first op naming it
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
	sResolved // applied, skipped or dead-lettered: resolved is set
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
	// applied: some consumer of it wrote apply ops. A subscription
	// without (an external consumer that writes no history) is ordered by
	// its final-read effect rows instead.
	applied bool
	ev      []subEvent
}

func (s *subscription) at(e int32) *subEvent {
	if int(e) >= len(s.ev) {
		n := max(int(e)+1, 2*len(s.ev), 1024)
		s.ev = append(s.ev, make([]subEvent, n-len(s.ev))...)
	}
	return &s.ev[e]
}

// applyRec is the first effect of an event in a subscription, for the
// order check: the positions of its apply invoke and ok.
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

// finding is one anomaly or shown item before grouping.
type finding struct {
	kind     Kind
	sub      int32 // -1: not per subscription
	event    int32
	boundary Boundary
	detail   string
}

// analyzer checks a history with one shard per core: each op belongs to
// the shard of its event (ops without an event to shard 0), and every
// shard sees every batch, in order, keeping only its own ops. Everything a
// shard computes is per event, so the result does not depend on the
// number of shards.
type analyzer struct {
	opts   Options
	shards []*shard
	seed   maphash.Seed
	work   []chan batch
	wg     sync.WaitGroup
	ops    int64
	cuts   []history.Cut
}

// batch is a run of ops handed to every shard; the last shard done with
// it releases it.
type batch struct {
	ops     []history.Op
	own     []int32 // positions of the shard's own ops, or nil: find them
	base    int64   // position of ops[0] in the history
	pending *atomic.Int32
	release func()
}

// shard is the state of the events of one shard.
type shard struct {
	id, n    int
	seed     maphash.Seed
	events   []event
	byID     map[string]int32
	bySource map[[2]string]int32
	keys     map[string]int32
	keyNames []string
	subs     []*subscription
	subByNm  map[string]int32
	pending  map[pendKey]int64
	applies  []applyRec
	// ledger is the first effect row of each event per subscription, in
	// final-read order (the ledger's applied order), for subscriptions
	// whose consumers wrote no apply ops.
	ledger  []applyRec
	series  seriesAcc
	last    int32 // the event of the previous op, or -1
	lastID  string
	lastSub int32 // the subscription of the previous op, or -1
	recent  *[recentEvents]recentEvent
	// Shard 0 only: ops without an event.
	drain, final              string
	faults, crashes, restarts int64
}

// shards is the number of shards, a variable so tests can vary it.
var shards = runtime.GOMAXPROCS(0)

func newAnalyzer(opts Options, eventsHint int) *analyzer {
	opts = opts.withDefaults()
	a := &analyzer{opts: opts, seed: maphash.MakeSeed()}
	n := max(1, shards)
	for i := range n {
		s := &shard{
			id: i, n: n, seed: a.seed,
			events:   make([]event, 0, eventsHint/n),
			byID:     make(map[string]int32, eventsHint/n),
			bySource: make(map[[2]string]int32),
			keys:     make(map[string]int32),
			subByNm:  make(map[string]int32),
			pending:  make(map[pendKey]int64),
			drain:    "missing",
			final:    "missing",
			last:     -1,
			lastSub:  -1,
			recent:   new([recentEvents]recentEvent),
		}
		a.shards = append(a.shards, s)
	}
	if n > 1 {
		for _, s := range a.shards {
			ch := make(chan batch, 16)
			a.work = append(a.work, ch)
			a.wg.Add(1)
			go func() {
				defer a.wg.Done()
				for b := range ch {
					if b.own != nil {
						for _, i := range b.own {
							s.op(&b.ops[i], b.base+int64(i))
						}
					} else {
						s.observe(b.ops, b.base)
					}
					if b.pending.Add(-1) == 0 {
						b.release()
					}
				}
			}()
		}
	}
	return a
}

// stop waits until every shard has seen every batch.
func (a *analyzer) stop() {
	for _, ch := range a.work {
		close(ch)
	}
	a.work = nil
	a.wg.Wait()
}

// observe folds a batch of ops, in history order, into the analysis.
func (a *analyzer) observe(ops []history.Op) {
	done := make(chan struct{})
	a.observeHeld(ops, func() { close(done) })
	<-done
}

// ownerOf returns the shard of op. It is safe for concurrent use.
func (a *analyzer) ownerOf(op *history.Op) int {
	if runLevel(op.F) {
		return 0
	}
	return a.shards[0].owner(&op.Value)
}

// observeParts is observeHeld for a batch already split by ownerOf.
func (a *analyzer) observeParts(ops []history.Op, parts [][]int32, release func()) {
	if len(a.work) == 0 || parts == nil {
		a.observeHeld(ops, release)
		return
	}
	base := a.ops
	a.ops += int64(len(ops))
	pending := new(atomic.Int32)
	pending.Store(int32(len(a.work)))
	for i, ch := range a.work {
		own := parts[i]
		if own == nil {
			own = []int32{}
		}
		ch <- batch{ops: ops, own: own, base: base, pending: pending, release: release}
	}
}

// observeHeld is observe for a batch the shards may finish later; release
// is called once they have.
func (a *analyzer) observeHeld(ops []history.Op, release func()) {
	base := a.ops
	a.ops += int64(len(ops))
	if len(a.work) == 0 {
		a.shards[0].observe(ops, base)
		release()
		return
	}
	pending := new(atomic.Int32)
	pending.Store(int32(len(a.work)))
	for _, ch := range a.work {
		ch <- batch{ops: ops, base: base, pending: pending, release: release}
	}
}

func (s *shard) owner(v *history.Value) int {
	if v.Event == "" || s.n == 1 {
		return 0
	}
	h := maphash.String(s.seed, v.Event)
	if v.Source != "" {
		h ^= maphash.String(s.seed, v.Source) * 0x9e3779b97f4a7c15
	}
	return int(h % uint64(s.n))
}

type recentEvent struct {
	id  string
	idx int32
}

const recentEvents = 1 << 12

// recentSlot hashes the length and the last 8 bytes of id, where event ids
// usually differ.
func recentSlot(id string) int {
	var x uint64
	for i := max(0, len(id)-8); i < len(id); i++ {
		x = x<<8 | uint64(id[i])
	}
	x ^= uint64(len(id)) << 56
	return int((x * 0x9e3779b97f4a7c15) >> (64 - 12))
}

func (s *shard) event(v *history.Value, pos int64) (int32, *event) {
	var i int32
	var ok bool
	var slot *recentEvent
	if s.last >= 0 && v.Event == s.lastID && v.Source == s.events[s.last].source {
		i, ok = s.last, true
	} else if v.Source == "" {
		// Ops of an event come close together: a small cache of recent
		// events answers most lookups without probing the large map.
		slot = &s.recent[recentSlot(v.Event)]
		if slot.id == v.Event && len(v.Event) > 0 {
			i, ok = slot.idx, true
		} else {
			i, ok = s.byID[v.Event]
		}
	} else {
		i, ok = s.bySource[[2]string{v.Source, v.Event}]
	}
	if !ok {
		i = int32(len(s.events))
		s.events = append(s.events, event{id: v.Event, source: v.Source, key: -1, firstPos: pos})
		if v.Source == "" {
			s.byID[v.Event] = i
		} else {
			s.bySource[[2]string{v.Source, v.Event}] = i
		}
	}
	if slot != nil {
		slot.id, slot.idx = v.Event, i
	}
	s.last, s.lastID = i, v.Event
	e := &s.events[i]
	if e.key < 0 && v.Key != "" {
		k, ok := s.keys[v.Key]
		if !ok {
			k = int32(len(s.keyNames))
			s.keys[v.Key] = k
			s.keyNames = append(s.keyNames, v.Key)
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

func (s *shard) sub(name string) (int32, *subscription) {
	if name == "" {
		name = defaultSubscription
	}
	if s.lastSub >= 0 && s.subs[s.lastSub].name == name {
		return s.lastSub, s.subs[s.lastSub]
	}
	i, ok := s.subByNm[name]
	if !ok {
		i = int32(len(s.subs))
		s.subByNm[name] = i
		s.subs = append(s.subs, &subscription{name: name})
	}
	s.lastSub = i
	return i, s.subs[i]
}

func (s *shard) observe(ops []history.Op, base int64) {
	// Ops of one event tend to come together: remember the last owner.
	var lastEvent, lastSource string
	lastOwner := -1
	for i := range ops {
		op := &ops[i]
		v := &op.Value
		owner := lastOwner
		switch {
		case runLevel(op.F):
			// Counted once, by shard 0, even when they name the
			// event in flight (a worker's crash at a failpoint does).
			owner = 0
		case owner < 0 || v.Event != lastEvent || v.Source != lastSource:
			owner = s.owner(v)
			lastEvent, lastSource, lastOwner = v.Event, v.Source, owner
		}
		if owner == s.id {
			s.op(op, base+int64(i))
		}
	}
}

// runLevel reports whether ops of f describe the run, not one event.
func runLevel(f history.F) bool {
	switch f {
	case history.Setup, history.Drain, history.Fault, history.Crash, history.Restart:
		return true
	}
	return false
}

func (s *shard) op(op *history.Op, pos int64) {
	s.series.op(op)
	v := &op.Value
	switch op.F {
	case history.Setup:
		for _, name := range v.Subscriptions {
			_, sub := s.sub(name)
			sub.declared = true
		}
		return
	case history.Drain:
		switch op.Type {
		case history.OK:
			s.drain = "complete"
		case history.Fail, history.Info:
			if s.drain != "complete" {
				s.drain = "timed-out"
			}
		}
		return
	case history.Fault:
		if op.Type == history.Invoke {
			s.faults++
		}
		return
	case history.Crash:
		if op.Type != history.Invoke {
			s.crashes++
		}
		return
	case history.Restart:
		if op.Type != history.Invoke {
			s.restarts++
		}
		return
	case history.FinalRead:
		if v.Table == "" {
			switch op.Type {
			case history.Invoke:
				if s.final != "complete" {
					s.final = "incomplete"
				}
			case history.OK:
				s.final = "complete"
			case history.Fail, history.Info:
				if s.final != "complete" {
					s.final = "failed"
				}
			}
			return
		}
	}
	if v.Event == "" {
		return
	}
	ei, e := s.event(v, pos)
	switch op.F {
	case history.Commit:
		switch op.Type {
		case history.Invoke:
			e.flags |= cInvoke
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
		return
	case history.Publish:
		e.flags |= cObserved
		if op.Type == history.OK {
			e.flags |= cPublished
		}
		return
	case history.FinalRead:
		if op.Type != history.OK {
			return
		}
		e.flags |= cObserved
		switch v.Table {
		case history.TableOutbox:
			if v.Published {
				e.flags |= cPublished
			}
		case history.TableEffects:
			si, sub := s.sub(v.Consumer)
			se := sub.at(ei)
			se.effects++
			resolve(se, op.Time, 0)
			if se.effects == 1 {
				version := v.Version
				if version == 0 {
					version = e.version
				}
				s.ledger = append(s.ledger, applyRec{sub: si, event: ei, inv: pos, ok: pos, version: version})
			}
		case history.TableInbox:
			_, sub := s.sub(v.Consumer)
			sub.at(ei).flags |= sInbox
		case history.TableDLQ:
			_, sub := s.sub(v.Consumer)
			resolve(sub.at(ei), op.Time, sDLQ)
		}
		return
	case history.Deliver, history.Apply, history.SkipStale, history.Ack, history.DLQ:
	default:
		return
	}
	e.flags |= cObserved
	si, sub := s.sub(v.Consumer)
	se := sub.at(ei)
	switch op.F {
	case history.Deliver:
		if op.Type == history.OK {
			se.deliveries++
		}
	case history.Apply:
		s.apply(op, pos, ei, e, si, se)
	case history.SkipStale:
		if op.Type == history.OK {
			resolve(se, op.Time, sSkipped)
		}
	case history.Ack:
		if op.Type == history.OK {
			se.flags |= sAcked
		}
	case history.DLQ:
		if op.Type == history.OK {
			resolve(se, op.Time, sDLQ)
		}
	}
}

func resolve(se *subEvent, t int64, flag uint8) {
	se.flags |= flag
	if se.flags&sResolved == 0 {
		se.flags |= sResolved
		se.resolved = t
	}
}

func (s *shard) apply(op *history.Op, pos int64, ei int32, e *event, si int32, se *subEvent) {
	pk := pendKey{op.Process, ei}
	switch op.Type {
	case history.Invoke:
		s.pending[pk] = pos
		return
	case history.Fail, history.Info:
		delete(s.pending, pk)
		return
	}
	inv := pos
	if p, ok := s.pending[pk]; ok {
		inv = p
		delete(s.pending, pk)
	}
	s.subs[si].applied = true
	se.applies++
	if se.applies > 1 {
		return
	}
	resolve(se, op.Time, 0)
	version := op.Value.Version
	if version == 0 {
		version = e.version
	}
	s.applies = append(s.applies, applyRec{sub: si, event: ei, inv: inv, ok: pos, version: version})
	if e.flags&cTimeSet != 0 {
		s.series.latency(op.Time, op.Time-e.commitTime)
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

// ref locates an event in its shard.
type ref struct {
	shard uint8
	local int32
}

// gsub is a subscription across shards.
type gsub struct {
	name     string
	declared bool
	parts    []*subscription // per shard, nil where the shard never saw it
}

// view is the merged state of all shards, events in order of first
// appearance.
type view struct {
	events   []event
	refs     []ref
	keyNames []string
	subs     []*gsub // sorted by name
	findings []finding
}

func (v *view) se(s *gsub, i int) subEvent {
	r := v.refs[i]
	p := s.parts[r.shard]
	if p == nil || int(r.local) >= len(p.ev) {
		return subEvent{}
	}
	return p.ev[r.local]
}

// merge stops the shards and builds the view.
func (a *analyzer) merge() *view {
	a.stop()
	for _, s := range a.shards {
		s.byID, s.bySource, s.keys, s.pending = nil, nil, nil, nil
	}
	v := &view{}
	// Events: each shard's are in first-appearance order; merge them.
	total := 0
	for _, s := range a.shards {
		total += len(s.events)
	}
	v.events = make([]event, 0, total)
	v.refs = make([]ref, 0, total)
	next := make([]int, len(a.shards))
	globalKey := map[string]int32{}
	keyMap := make([][]int32, len(a.shards))
	for si, s := range a.shards {
		keyMap[si] = make([]int32, len(s.keyNames))
		for k, name := range s.keyNames {
			g, ok := globalKey[name]
			if !ok {
				g = int32(len(v.keyNames))
				globalKey[name] = g
				v.keyNames = append(v.keyNames, name)
			}
			keyMap[si][k] = g
		}
	}
	localToGlobal := make([][]int32, len(a.shards))
	for si, s := range a.shards {
		localToGlobal[si] = make([]int32, len(s.events))
	}
	for len(v.events) < total {
		best := -1
		for si, s := range a.shards {
			if next[si] < len(s.events) && (best < 0 || s.events[next[si]].firstPos < a.shards[best].events[next[best]].firstPos) {
				best = si
			}
		}
		e := a.shards[best].events[next[best]]
		if e.key >= 0 {
			e.key = keyMap[best][e.key]
		}
		localToGlobal[best][next[best]] = int32(len(v.events))
		v.events = append(v.events, e)
		v.refs = append(v.refs, ref{shard: uint8(best), local: int32(next[best])})
		next[best]++
	}
	// Subscriptions by name.
	byName := map[string]*gsub{}
	add := func(name string) *gsub {
		g, ok := byName[name]
		if !ok {
			g = &gsub{name: name, parts: make([]*subscription, len(a.shards))}
			byName[name] = g
			v.subs = append(v.subs, g)
		}
		return g
	}
	for _, name := range a.opts.Guarantees.Subscriptions {
		add(name).declared = true
	}
	for si, s := range a.shards {
		for _, sub := range s.subs {
			g := add(sub.name)
			g.parts[si] = sub
			g.declared = g.declared || sub.declared
		}
	}
	slices.SortFunc(v.subs, func(x, y *gsub) int { return cmp.Compare(x.name, y.name) })
	subIndex := map[string]int32{}
	for i, g := range v.subs {
		subIndex[g.name] = int32(i)
	}
	// A subscription no consumer wrote apply ops for is ordered by its
	// effect ledger: the final read lists effects in applied order.
	applied := make([]bool, len(v.subs))
	for i, g := range v.subs {
		for _, p := range g.parts {
			applied[i] = applied[i] || p != nil && p.applied
		}
	}
	for _, s := range a.shards {
		for _, r := range s.ledger {
			if !applied[subIndex[s.subs[r.sub].name]] {
				s.applies = append(s.applies, r)
			}
		}
		s.ledger = nil
	}
	// Order regressions: per subscription and key, a first effect whose
	// apply began after the first effect of a higher version completed.
	// Counting sort by (subscription, key); each bucket is then sorted by
	// completion (it already nearly is: shards append in history order).
	nk := len(v.keyNames)
	usable := func(s *shard, r *applyRec) bool { return s.events[r.event].key >= 0 && r.version > 0 }
	subIndexOf := make([][]int32, len(a.shards))
	for si, s := range a.shards {
		subIndexOf[si] = make([]int32, len(s.subs))
		for i, sub := range s.subs {
			subIndexOf[si][i] = subIndex[sub.name]
		}
	}
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
	if n > 0 {
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
			v.regressions(group)
		}
	}
	return v
}

// regressions finds the order regressions among the first effects of one
// subscription and key, sorted by completion.
func (v *view) regressions(recs []applyRec) {
	prefixMax := make([]int64, len(recs))
	m := int64(0)
	for i, r := range recs {
		m = max(m, r.version)
		prefixMax[i] = m
	}
	for _, r := range recs {
		// Effects completed before r's apply began: recs[:n].
		n, _ := slices.BinarySearchFunc(recs, r.inv, func(x applyRec, inv int64) int { return cmp.Compare(x.ok, inv) })
		if n > 0 && prefixMax[n-1] > r.version {
			v.findings = append(v.findings, finding{kind: OrderRegression, sub: r.sub, event: r.event,
				detail: "version " + strconv.FormatInt(r.version, 10) + " applied after version " + strconv.FormatInt(prefixMax[n-1], 10)})
		}
	}
}

func (a *analyzer) finish(replay func(func([]history.Op) error) error) *Result {
	v := a.merge()
	g := a.opts.Guarantees
	s0 := a.shards[0]
	drain, final := s0.drain, s0.final
	established := drain == "complete" && final == "complete"
	c := Counts{Ops: a.ops, Events: int64(len(v.events)), Faults: s0.faults, Crashes: s0.crashes, Restarts: s0.restarts}
	for i := range v.events {
		e := &v.events[i]
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
				v.findings = append(v.findings, finding{kind: Recovered, sub: -1, event: int32(i)})
			} else {
				c.InDoubt++
				v.findings = append(v.findings, finding{kind: InDoubt, sub: -1, event: int32(i)})
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
	stats := make([]SubscriptionStats, 0, len(v.subs))
	for si, s := range v.subs {
		st := SubscriptionStats{Name: s.name, Declared: s.declared}
		for i := range v.events {
			se := v.se(s, i)
			v.judge(&st, int32(i), &v.events[i], int32(si), &se, established)
		}
		stats = append(stats, st)
	}
	r := &Result{
		Guarantees:    g,
		Facts:         Facts{Drain: drain, FinalRead: final, Cuts: nonNil(a.cuts)},
		Counts:        c,
		Subscriptions: stats,
		Reasons:       []string{},
	}
	v.group(r, a.opts)
	v.examples(r, a.opts, replay)
	r.Series = buildSeries(a.shards, v)
	for _, an := range r.Anomalies {
		if an.Fatal {
			r.Reasons = append(r.Reasons, fmt.Sprintf("%d %s in %s", an.Count, an.Kind, an.Subscription))
		}
	}
	if drain != "complete" {
		r.Reasons = append(r.Reasons, "drain "+drain)
	}
	if final != "complete" {
		r.Reasons = append(r.Reasons, "final read "+final)
	}
	if c.Committed > 0 && len(v.subs) == 0 {
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
func (v *view) judge(st *SubscriptionStats, ei int32, e *event, si int32, se *subEvent, established bool) {
	add := func(k Kind, b Boundary) {
		v.findings = append(v.findings, finding{kind: k, sub: si, event: ei, boundary: b})
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

var kindRank = func() map[Kind]int {
	m := map[Kind]int{}
	for i, k := range append(AnomalyKinds(), ShownKinds()...) {
		m[k] = i
	}
	return m
}()

var boundaryOrder = []Boundary{Committed, Published, Delivered, Applied, Acked}

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
		var byBoundary [5]int
		for n, f := range fs {
			if n < opts.MaxEvents {
				an.Events = append(an.Events, v.events[f.event].id)
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
		if slices.Contains(AnomalyKinds(), f0.kind) {
			an.Fatal = r.Guarantees.Fatal(f0.kind)
			for _, f := range fs[:min(len(fs), opts.MaxExamples)] {
				e := &v.events[f.event]
				ex := Example{Event: e.id, Source: e.source, Version: e.version, Boundary: f.boundary, Detail: f.detail, Ops: []history.Op{}}
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
func (v *view) examples(r *Result, opts Options, replay func(func([]history.Op) error) error) {
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
	_ = replay(func(ops []history.Op) error {
		base := pos
		pos += int64(len(ops))
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
