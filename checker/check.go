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
	"strings"
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
	cInvoke uint16 = 1 << iota
	cOK
	cFail
	cInfo
	cObserved  // some op downstream of the commit, and after its invoke, mentions it
	cPublished // broker confirmed, or outbox row marked published
	cPoison
	cTimeSet
	// cEarly: published before its commit was invoked (a producer that
	// publishes, then commits). Deliveries and effects then follow from
	// that publish, not from the commit, and prove nothing about it.
	cEarly
	cCommitSeen = cInvoke | cOK | cFail | cInfo
)

// Final-read flags of an event, valid for the final-read attempt frAttempt.
const (
	fObserved  uint8 = 1 << iota // a row names it
	fPublished                   // its outbox row is marked published
)

type event struct {
	id, source string
	firstPos   int64 // position in the history of the first op naming it
	version    int64
	commitTime int64 // ok time, else first invoke time
	key        int32
	flags      uint16
	frFlags    uint8
	frAttempt  uint8 // the final-read attempt frFlags belong to
}

// observe marks e as seen downstream: proof of its commit only if the
// commit was invoked already and, for ops that follow from a publish
// (downstream true), the publish was not the producer's own before it.
func (e *event) observe(downstream bool) {
	if e.flags&cCommitSeen != 0 && (!downstream || e.flags&cEarly == 0) {
		e.flags |= cObserved
	}
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
	// Final-read flags, valid for the attempt frAttempt; merge folds the
	// ones of the attempt that counts into flags.
	sInbox     // an inbox mark
	sBrokerDLQ // in the broker's dead-letter queue
	sTimed     // its first effect row carries commit_time
	sDLQRow    // a dead-letter row
)

// subEvent is what one subscription did with one event.
type subEvent struct {
	resolved   int64 // time of the first apply, skip or dead-letter
	deliveries uint32
	applies    uint32 // apply ok ops
	effects    uint32 // final-read effect rows of attempt frAttempt
	flags      uint8
	frFlags    uint8 // sInbox, sBrokerDLQ, sTimed, sDLQRow of attempt frAttempt
	frAttempt  uint8
}

// row readies se for a final-read row of attempt a: rows of an earlier
// attempt are forgotten (only the attempt that completed counts).
func (se *subEvent) row(a uint8) {
	if se.frAttempt != a {
		se.frAttempt, se.effects, se.frFlags = a, 0, 0
	}
}

type subscription struct {
	name     string
	declared bool
	// applyOps: its consumers write apply ops, which then order its
	// effects (those without a commit_time). A subscription without (an
	// external consumer that writes no history) can only be ordered by
	// its effect rows' commit_time.
	applyOps bool
	ev       []subEvent
	// brokerDLQ is the attempt of each event found in the broker's
	// dead-letter queue, by event (rare, so a map).
	brokerDLQ map[int32]int64
}

func (s *subscription) at(e int32) *subEvent {
	if int(e) >= len(s.ev) {
		n := max(int(e)+1, 2*len(s.ev), 1024)
		s.ev = append(s.ev, make([]subEvent, n-len(s.ev))...)
	}
	return &s.ev[e]
}

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
	pending  map[pendKey]int64 // apply invokes in flight: their time
	applies  []applyRec
	// ledger is the first effect row with a commit_time of each event per
	// subscription, in the current final-read attempt.
	ledger []applyRec
	// attempt counts final-read invokes; good is the last attempt that got
	// its closing ok. Every shard sees the brackets.
	attempt, good uint8
	lastTime      int64
	series        seriesAcc
	last          int32 // the event of the previous op, or -1
	lastID        string
	lastSub       int32 // the subscription of the previous op, or -1
	recent        *[recentEvents]recentEvent
	// Shard 0 only: ops without an event.
	drain, final      string
	crashes, restarts int64
	faults            []Fault
	openFaults        map[faultKey]int // invoked, not yet completed: index in faults
}

// faultKey pairs a fault's invoke with its completion: the same process,
// fault, target and step.
type faultKey struct{ process, fault, target, detail string }

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

// ownerOf returns the shard of op, or -1 for every shard. It is safe for
// concurrent use.
func (a *analyzer) ownerOf(op *history.Op) int {
	if bracket(op) {
		return -1
	}
	if runLevel(op.F) {
		return 0
	}
	return a.shards[0].owner(&op.Value)
}

// bracket reports whether op opens or closes a final read, which every
// shard must see to know which attempt its rows belong to.
func bracket(op *history.Op) bool {
	return op.F == history.FinalRead && op.Value.Table == ""
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
		case bracket(op):
			owner = s.id
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
	v := &op.Value
	s.lastTime = op.Time
	if bracket(op) {
		s.finalRead(op)
		return
	}
	s.series.op(op)
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
			if v.Reason == DrainQuiet {
				s.drain = DrainQuiet
			}
		case history.Fail, history.Info:
			if s.drain != "complete" && s.drain != DrainQuiet {
				s.drain = "timed-out"
			}
		}
		return
	case history.Fault:
		s.fault(op)
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
		if e.flags&cCommitSeen == 0 {
			e.flags |= cEarly
		}
		e.observe(false)
		if op.Type == history.OK {
			e.flags |= cPublished
		}
		return
	case history.FinalRead:
		if op.Type == history.OK {
			s.row(op, ei, e)
		}
		return
	case history.Deliver, history.Apply, history.SkipStale, history.Ack, history.DLQ:
	default:
		return
	}
	e.observe(true)
	si, sub := s.sub(v.Consumer)
	se := sub.at(ei)
	switch op.F {
	case history.Deliver:
		if op.Type == history.OK {
			se.deliveries++
		}
	case history.Apply:
		sub.applyOps = true
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

// DrainQuiet is the reason a drain ok carries when it ended after a quiet
// window without anything to show that nothing was pending (a team's
// relay, whose outbox the harness cannot see): events not yet applied are
// then unseen, not lost.
const DrainQuiet = history.ReasonQuiet

// finalRead follows a final read's brackets. Each invoke starts an attempt;
// the last one to get its closing ok is the one whose rows count.
func (s *shard) finalRead(op *history.Op) {
	if s.id == 0 {
		s.series.op(op)
	}
	switch op.Type {
	case history.Invoke:
		// A new attempt: the state it reads supersedes what earlier ones
		// read, and the final read is complete only if it completes too.
		if s.attempt < 255 {
			s.attempt++
		}
		s.ledger = s.ledger[:0]
		s.final = "incomplete"
	case history.OK:
		s.final = "complete"
		s.good = s.attempt
	case history.Fail, history.Info:
		if s.final != "complete" {
			s.final = "failed"
		}
	}
}

// row records a final-read row of event ei for the current attempt.
func (s *shard) row(op *history.Op, ei int32, e *event) {
	v := &op.Value
	a := s.attempt
	if e.frAttempt != a {
		e.frAttempt, e.frFlags = a, 0
	}
	if v.Table == history.TableOutbox {
		e.frFlags |= fObserved
		if v.Published {
			e.frFlags |= fPublished
		}
		return
	}
	if e.flags&cEarly == 0 {
		e.frFlags |= fObserved
	}
	si, sub := s.sub(v.Consumer)
	se := sub.at(ei)
	se.row(a)
	switch v.Table {
	case history.TableEffects:
		se.effects++
		resolve(se, op.Time, 0)
		if se.effects == 1 && v.CommitTime != 0 {
			se.frFlags |= sTimed
			version := v.Version
			if version == 0 {
				version = e.version
			}
			s.ledger = append(s.ledger, applyRec{sub: si, event: ei, inv: v.CommitTime, ok: v.CommitTime, version: version})
		}
	case history.TableInbox:
		se.frFlags |= sInbox
	case history.TableDLQ:
		se.frFlags |= sDLQRow
		resolve(se, op.Time, 0)
	case history.TableBrokerDLQ:
		se.frFlags |= sBrokerDLQ
		if sub.brokerDLQ == nil {
			sub.brokerDLQ = map[int32]int64{}
		}
		sub.brokerDLQ[ei] = v.Attempt
	}
}

// fault pairs fault invokes with their completions into s.faults.
func (s *shard) fault(op *history.Op) {
	v := &op.Value
	if v.Fault == "schedule" && op.Type != history.Invoke {
		return // the schedule itself, not a fault
	}
	k := faultKey{op.Process, v.Fault, v.Target, v.Detail}
	if op.Type == history.Invoke {
		if s.openFaults == nil {
			s.openFaults = map[faultKey]int{}
		}
		s.openFaults[k] = len(s.faults)
		s.faults = append(s.faults, Fault{Kind: v.Fault, Target: v.Target, Detail: v.Detail,
			StartNS: op.Time, EndNS: -1, Outcome: FaultCut, Random: v.Reason == history.ReasonRandom})
		return
	}
	i, ok := s.openFaults[k]
	if !ok {
		// A heal that does not repeat the step's detail still heals the
		// fault its process opened on that target: the earliest one.
		for ok2, j := range s.openFaults {
			if ok2.process == k.process && ok2.fault == k.fault && ok2.target == k.target && (!ok || j < i) {
				k, i, ok = ok2, j, true
			}
		}
	}
	if ok {
		delete(s.openFaults, k)
	} else {
		// A completion without its invoke: a window of no length.
		i = len(s.faults)
		s.faults = append(s.faults, Fault{Kind: v.Fault, Target: v.Target, Detail: v.Detail, StartNS: op.Time})
	}
	f := &s.faults[i]
	f.EndNS = op.Time
	f.Random = f.Random || v.Reason == history.ReasonRandom
	f.Evidence, f.Error = v.Evidence, v.Error
	switch op.Type {
	case history.OK:
		f.Outcome, f.TookEffect = FaultTookEffect, true
	case history.Info:
		f.Outcome, f.TookEffect = FaultHealFailed, true
	default:
		f.Outcome = FaultNoEffect
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
		s.pending[pk] = op.Time
		return
	case history.Fail, history.Info:
		delete(s.pending, pk)
		return
	}
	inv := op.Time
	if t, ok := s.pending[pk]; ok {
		inv = t
		delete(s.pending, pk)
	}
	se.applies++
	if se.applies > 1 {
		return
	}
	resolve(se, op.Time, 0)
	version := op.Value.Version
	if version == 0 {
		version = e.version
	}
	s.applies = append(s.applies, applyRec{sub: si, event: ei, inv: inv, ok: op.Time, version: version})
	if e.flags&cTimeSet != 0 {
		s.series.latency(op.Time, op.Time-e.commitTime)
	}
}

func boundary(e *event, se *subEvent) Boundary {
	switch {
	case se.flags&sBrokerDLQ != 0 && se.applies == 0 && se.effects == 0:
		return BrokerDLQ
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
	// Per subscription: it has inbox rows, its consumers wrote apply ops,
	// its effect rows carry commit_time, it has effect rows.
	subInbox, subApplied, subTimed, subEffects []bool
	// maxApplied is the highest version each subscription applied, per
	// key: subscription*nk + key.
	maxApplied []int64
	nk         int
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
	a.foldEvents()
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
	subIndexOf := make([][]int32, len(a.shards))
	for si, s := range a.shards {
		subIndexOf[si] = make([]int32, len(s.subs))
		for i, sub := range s.subs {
			subIndexOf[si][i] = subIndex[sub.name]
		}
	}
	nk := len(v.keyNames)
	v.nk = nk
	a.fold(v, keyMap, subIndexOf)
	// Order regressions: per subscription and key, a first effect that
	// began after the first effect of a higher version was done. Counting
	// sort by (subscription, key); each bucket is then sorted by
	// completion (it already nearly is: shards append in history order).
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
			// Versions rising in completion order: no version began after
			// a higher one was done, and none came before the one below it.
			if slices.IsSortedFunc(group, func(x, y applyRec) int { return cmp.Compare(x.version, y.version) }) {
				continue
			}
			v.regressions(group)
			v.gaps(group)
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

// gaps finds, among the first effects of one subscription and key, each
// version v-1 applied only after version v was: the subscription went
// through a state it must never show (v without v-1).
func (v *view) gaps(recs []applyRec) {
	byVersion := make(map[int64]*applyRec, len(recs))
	for i := range recs {
		if _, ok := byVersion[recs[i].version]; !ok {
			byVersion[recs[i].version] = &recs[i]
		}
	}
	for _, r := range recs {
		if prev, ok := byVersion[r.version-1]; ok && prev.inv > r.ok {
			v.findings = append(v.findings, finding{kind: Gap, sub: prev.sub, event: prev.event,
				detail: "version " + strconv.FormatInt(prev.version, 10) + " applied after version " + strconv.FormatInt(r.version, 10)})
		}
	}
}

// rowsCount reports whether final-read rows of attempt stamp count: those
// of the last attempt, when it completed (or of a history without
// brackets).
func (a *analyzer) rowsCount(stamp uint8) bool {
	s0 := a.shards[0]
	return stamp == s0.good && (s0.final == "complete" || s0.attempt == 0)
}

// foldEvents folds each event's final-read flags of the attempt that
// counts into its flags.
func (a *analyzer) foldEvents() {
	for _, s := range a.shards {
		for i := range s.events {
			e := &s.events[i]
			if !a.rowsCount(e.frAttempt) {
				continue
			}
			if e.frFlags&fObserved != 0 && e.flags&cCommitSeen != 0 {
				e.flags |= cObserved
			}
			if e.frFlags&fPublished != 0 {
				e.flags |= cPublished
			}
		}
	}
}

// fold settles the final read: only the rows of the attempt that counts
// (the last, if it completed) stay, folded into each event's flags; and
// it gathers what the judge needs across events: which subscriptions have
// an inbox, which are timed, the highest version each applied per key,
// and the order records (an effect row's commit_time wins over its apply
// ops' times).
func (a *analyzer) fold(v *view, keyMap, subIndexOf [][]int32) {
	counts := a.rowsCount
	v.subInbox = make([]bool, len(v.subs))
	v.subApplied = make([]bool, len(v.subs))
	v.subTimed = make([]bool, len(v.subs))
	v.subEffects = make([]bool, len(v.subs))
	for si, s := range a.shards {
		for li, sub := range s.subs {
			g := subIndexOf[si][li]
			v.subApplied[g] = v.subApplied[g] || sub.applyOps
			var any uint8
			effects := false
			for j := range sub.ev {
				se := &sub.ev[j]
				if se.frFlags == 0 && se.effects == 0 {
					continue
				}
				if !counts(se.frAttempt) {
					se.effects, se.frFlags = 0, 0
					continue
				}
				se.flags |= se.frFlags
				if se.frFlags&sDLQRow != 0 {
					se.flags |= sDLQ
				}
				any |= se.frFlags
				effects = effects || se.effects > 0
			}
			v.subInbox[g] = v.subInbox[g] || any&sInbox != 0
			v.subTimed[g] = v.subTimed[g] || any&sTimed != 0
			v.subEffects[g] = v.subEffects[g] || effects
		}
	}
	// The highest version applied per key, for subscriptions with an inbox
	// (an inbox mark without an effect under a later version is a skip).
	for si, s := range a.shards {
		for li, sub := range s.subs {
			g := subIndexOf[si][li]
			if !v.subInbox[g] {
				continue
			}
			if v.maxApplied == nil {
				v.maxApplied = make([]int64, len(v.subs)*v.nk)
			}
			for j := range sub.ev {
				se := &sub.ev[j]
				if se.effects == 0 && se.applies == 0 {
					continue
				}
				if e := &s.events[j]; e.key >= 0 && e.version > 0 {
					m := &v.maxApplied[int(g)*v.nk+int(keyMap[si][e.key])]
					*m = max(*m, e.version)
				}
			}
		}
	}
	for _, s := range a.shards {
		if !counts(s.attempt) {
			s.ledger = nil
		}
		// An effect row's commit_time orders it; apply ops order the rest.
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
}

// facts are what the judge may rely on for a subscription's events.
type facts struct {
	drained bool // the drain completed: whatever is not applied will not be
	final   bool // the final read completed: the effects ledger is authoritative
}

func (a *analyzer) finish(replay func(func([]history.Op) error) error) *Result {
	v := a.merge()
	g := a.opts.Guarantees
	s0 := a.shards[0]
	drain, final := s0.drain, s0.final
	f := facts{drained: drain == "complete", final: final == "complete"}
	established := f.final && (f.drained || drain == DrainQuiet)
	var end int64
	for _, s := range a.shards {
		end = max(end, s.lastTime)
	}
	faults := nonNil(s0.faults)
	var took int64
	for i := range faults {
		if faults[i].Outcome == FaultCut {
			faults[i].EndNS = end
		}
		if faults[i].TookEffect {
			took++
		}
	}
	c := Counts{Ops: a.ops, Events: int64(len(v.events)), Faults: took, Crashes: s0.crashes, Restarts: s0.restarts}
	for i := range v.events {
		e := &v.events[i]
		if e.flags&cCommitSeen != 0 {
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
	var unseen int64
	for si, s := range v.subs {
		st := SubscriptionStats{Name: s.name, Declared: s.declared}
		for i := range v.events {
			se := v.se(s, i)
			v.judge(&st, s, int32(i), &v.events[i], int32(si), &se, f)
		}
		unseen += st.Unseen
		stats = append(stats, st)
	}
	r := &Result{
		Guarantees:    g,
		Facts:         Facts{Drain: drain, FinalRead: final, Cuts: nonNil(a.cuts)},
		Counts:        c,
		Subscriptions: stats,
		Reasons:       []string{},
		Faults:        faults,
	}
	v.group(r, a.opts)
	v.examples(r, a.opts, replay)
	r.Series = buildSeries(a.shards, v)
	for _, an := range r.Anomalies {
		if an.Fatal {
			r.Reasons = append(r.Reasons, fmt.Sprintf("%d %s in %s", an.Count, an.Kind, an.Subscription))
		}
	}
	unknown := func(reason string) {
		r.Reasons = append(r.Reasons, reason)
		established = false
	}
	switch {
	case drain == DrainQuiet && unseen > 0:
		unknown(fmt.Sprintf("drain ended after a quiet window with %d events not applied, and nothing shows nothing was pending: they are lost or still on their way", unseen))
	case drain != "complete" && drain != DrainQuiet:
		unknown("drain " + drain)
	}
	if final != "complete" {
		unknown("final read " + final)
	}
	if c.Committed > 0 && len(v.subs) == 0 {
		unknown("no subscriptions declared or observed")
	}
	if c.Committed == 0 {
		unknown("nothing was exercised: no commit took effect")
	}
	var randomDone, randomTook int
	for _, f := range faults {
		switch {
		case f.Random && f.Outcome != FaultCut:
			randomDone++
			if f.TookEffect {
				randomTook++
			}
		case !f.Random && f.Outcome == FaultNoEffect:
			step := f.Detail
			if step == "" {
				step = strings.TrimSpace(f.Kind + " " + f.Target)
			}
			why := f.Error
			if why == "" {
				why = "no reason recorded"
			}
			unknown(fmt.Sprintf("scheduled fault %s did not take effect: %s", step, why))
		}
	}
	if randomDone > 0 && randomTook == 0 {
		unknown("no random fault took effect")
	}
	if g.Order == PerKey || g.Gaps == None {
		for i, s := range v.subs {
			if v.subEffects[i] && !v.subApplied[i] && !v.subTimed[i] {
				unknown("order in " + s.name + " not judged: its effect rows carry no commit_time and its consumers wrote no apply ops (row order is insert order, not commit order)")
			}
		}
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

// judge classifies what subscription s (index si) did with event ei.
func (v *view) judge(st *SubscriptionStats, s *gsub, ei int32, e *event, si int32, se *subEvent, f facts) {
	add := func(k Kind, b Boundary, detail string) {
		v.findings = append(v.findings, finding{kind: k, sub: si, event: ei, boundary: b, detail: detail})
	}
	// Once the final read is complete the effects ledger is authoritative:
	// an event is applied iff it has an effect row. Before, apply ops are
	// all there is.
	effects := max(se.applies, se.effects)
	if f.final {
		effects = se.effects
	}
	st.Deliveries += int64(se.deliveries)
	st.Effects += int64(effects)
	if se.deliveries > 0 {
		st.Delivered++
	}
	if se.deliveries > 1 {
		st.Redelivered++
		add(Redelivered, "", "")
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
	inbox := f.final && v.subInbox[si]
	skipped := se.flags&sSkipped != 0
	if !skipped && inbox && se.flags&sInbox != 0 && effects == 0 && !dlq && e.key >= 0 && e.version > 0 &&
		v.maxApplied[int(si)*v.nk+int(e.key)] > e.version {
		// Taken in (inbox mark) but not applied, while a later version
		// was: the version guard skipped it, with no skip-stale op.
		skipped = true
	}
	if skipped {
		st.StaleSkipped++
		add(StaleSkipped, "", "")
	}
	if !e.committed() {
		if effects > 0 && !e.indeterminate() {
			st.Unexpected++
			add(Unexpected, boundary(e, se), "")
		}
		return
	}
	if effects > 1 {
		st.DuplicateEffect++
		add(DuplicateEffect, boundary(e, se), "")
	}
	if effects > 0 && e.flags&cPoison != 0 {
		st.PoisonApplied++
		add(PoisonApplied, "", "")
	}
	if dlq && e.flags&cPoison == 0 {
		add(WronglyDeadLettered, "", "")
	}
	if inbox {
		switch {
		case se.flags&sInbox != 0 && effects == 0 && !dlq && !skipped:
			st.InboxMismatch++
			add(InboxMismatch, "", "inbox mark without its effect")
		case effects > 0 && se.flags&sInbox == 0:
			st.InboxMismatch++
			add(InboxMismatch, "", "effect without its inbox mark")
		}
	}
	if effects > 0 || dlq {
		return
	}
	b := boundary(e, se)
	detail := ""
	if b == BrokerDLQ {
		detail = "in the broker's dead-letter queue"
		if n := v.brokerAttempt(s, int(ei)); n > 0 {
			detail += " after " + strconv.FormatInt(n, 10) + " deliveries"
		}
	}
	switch {
	case skipped:
		add(Gap, "", "")
	case f.final && se.applies > 0:
		st.Lost++
		add(Lost, Applied, "apply ok but no effect in the ledger")
	case !f.drained || !f.final:
		st.Unseen++
		add(Unseen, b, detail)
	case e.flags&cPoison != 0:
		add(DLQUnaccounted, b, detail)
	default:
		st.Lost++
		add(Lost, b, detail)
	}
}

// brokerAttempt returns how many deliveries event i had before the broker
// dead-lettered it in subscription s, 0 if unknown.
func (v *view) brokerAttempt(s *gsub, i int) int64 {
	r := v.refs[i]
	if p := s.parts[r.shard]; p != nil {
		return p.brokerDLQ[r.local]
	}
	return 0
}

var kindRank = func() map[Kind]int {
	m := map[Kind]int{}
	for i, k := range append(AnomalyKinds(), ShownKinds()...) {
		m[k] = i
	}
	return m
}()

var boundaryOrder = []Boundary{Committed, Published, Delivered, BrokerDLQ, Applied, Acked}

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
