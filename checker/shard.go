package checker

import (
	"cmp"
	"hash/maphash"
	"sync"

	"github.com/deliverycheck/deliverycheck/history"
)

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
	wg     sync.WaitGroup // the shards' goroutines
	done   sync.WaitGroup // the shards still on the current batch
	ops    int64
	cuts   []history.Cut
	// aliases: the ids relays published committed events as (identity.go).
	aliases aliases
}

// batch is a run of ops handed to every shard.
type batch struct {
	ops  []history.Op
	base int64 // position of ops[0] in the history
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
	// intrusions: the events an intrude op names (intruder.go).
	intrusions map[int32]*intrusion
	// traces: the trace each event's ops carried (traces.go).
	traces traceAcc
	// retries: the retries of its events (retries.go); shard 0 keeps
	// maxAttempts, the setup op's attempt.
	retries     retryAcc
	maxAttempts int64
	// fr follows the final read's brackets: every shard sees them.
	fr finalReads
	// publishes: some op of the shard is a publish (lostStage).
	publishes bool
	lastTime  int64
	series    seriesAcc
	last      int32 // the event of the previous op, or -1
	lastID    string
	lastSub   int32 // the subscription of the previous op, or -1
	recent    *[recentEvents]recentEvent
	// maxRSS is the guarantees' max-rss (resources.go); shard 0 keeps
	// drainEnd, the time of the last drain op that ended a drain (0 if
	// none), and peaks, per process measured its peak resident set.
	maxRSS   int64
	drainEnd int64
	peaks    []peakAcc
	// Shard 0 only: ops without an event.
	drain             string
	crashes, restarts int64
	faults            []Fault
	openFaults        map[faultKey]int // invoked, not yet completed: index in faults
	nodeOps           []nodeOp         // crash, restart and leader ops of servers (nodes.go)
	txnStage          *txnState        // the transactional stage, nil if none (transactions.go)
	aliases           aliases          // the analyzer's, read only while a batch is folded
	// Operating the pipeline (issue 25): the Kafka consumers'
	// deliveries and the broker's log, and on shard 0 their assignments,
	// crashes and restarts (positions.go); shard 0 only, the lag
	// samples (lag.go).
	assigns positionsAcc
	lags    lagAcc
}

// subscription is what one subscription did with the events of a shard.
type subscription struct {
	name     string
	declared bool
	// applyOps: its consumers write apply ops, which then order its
	// effects (those without a commit_time). A subscription without (an
	// external consumer that writes no history) can only be ordered by
	// its effect rows' commit_time.
	applyOps bool
	// lineage: its consumers record every delivery, as a lineage op says
	// or a deliver op shows (lostStage).
	lineage bool
	ev      []subEvent
	// brokerDLQ is the attempt of each event found in the broker's
	// dead-letter queue, by event (rare, so a map).
	brokerDLQ map[int32]int64
	// settles are its ops that settle an event, in history order
	// (stall.go).
	settles []settleRec
	// redrive is what its redrives did, nil without a redrive op
	// (redrive.go); retry what its consumers retried and refused, nil
	// without (retries.go).
	redrive *subRedrive
	retry   *subRetries
}

func (s *subscription) at(e int32) *subEvent {
	if int(e) >= len(s.ev) {
		n := max(int(e)+1, 2*len(s.ev), 1024)
		s.ev = append(s.ev, make([]subEvent, n-len(s.ev))...)
	}
	return &s.ev[e]
}

func newAnalyzer(opts Options, eventsHint int) *analyzer {
	opts = opts.withDefaults()
	a := &analyzer{opts: opts, seed: maphash.MakeSeed(), aliases: aliases{}}
	n := opts.Shards
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
			fr:       finalReads{state: "missing", broker: "missing", dlqRead: "missing"},
			last:     -1,
			lastSub:  -1,
			recent:   new([recentEvents]recentEvent),
			aliases:  a.aliases,
			maxRSS:   opts.Guarantees.MaxRSS,
		}
		a.shards = append(a.shards, s)
	}
	if n > 1 {
		for _, s := range a.shards {
			ch := make(chan batch, 1) // observe waits for each batch
			a.work = append(a.work, ch)
			a.wg.Add(1)
			go func() {
				defer a.wg.Done()
				for b := range ch {
					s.observe(b.ops, b.base)
					a.done.Done()
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

// observe folds a batch of ops, in history order, into the analysis. The
// shards are done with it when observe returns.
func (a *analyzer) observe(ops []history.Op) {
	base := a.ops
	a.ops += int64(len(ops))
	a.aliases.learn(ops)
	if len(a.work) == 0 {
		a.shards[0].observe(ops, base)
		return
	}
	a.done.Add(len(a.work))
	for _, ch := range a.work {
		ch <- batch{ops: ops, base: base}
	}
	a.done.Wait()
}

// bracket reports whether op opens or closes a final read, which every
// shard must see to know which attempt its rows belong to.
func bracket(op *history.Op) bool {
	return op.F == history.FinalRead && op.Value.Table == ""
}

// runLevel reports whether ops of f describe the run, not one event.
func runLevel(f history.F) bool {
	switch f {
	case history.Setup, history.Lineage, history.Drain, history.Fault, history.Crash, history.Restart, history.Leader, history.TxnStage, history.Resources,
		history.Assign, history.Lag:
		return true
	}
	return false
}

// owner returns the shard of the event v names, 0 if it names none.
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

// observe folds the shard's own ops of a batch.
func (s *shard) observe(ops []history.Op, base int64) {
	// Ops of one event tend to come together: remember the last owner.
	var lastEvent, lastSource string
	lastOwner := -1
	for i := range ops {
		op := s.aliases.resolve(&ops[i])
		v := &op.Value
		owner := lastOwner
		switch {
		case bracket(op):
			owner = s.id
		case runLevel(op.F), txnOwned(op):
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
		if s.id == 0 && s.txnStage != nil && txnReads(op) {
			s.txnStage.also(op)
		}
	}
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

// event returns the event v names, and its index in the shard, adding it
// at position pos if it is new.
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
	e.named(v)
	return i, e
}

const defaultSubscription = "default"

// sub returns the subscription called name, and its index in the shard,
// adding it if it is new.
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

// op folds op, at position pos of the history, into the shard: ops of the
// run into its run-level state, ops of an event into the event's state
// (rules.go) and the order records (order.go).
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
		s.maxAttempts = max(s.maxAttempts, v.Attempt)
		for _, name := range v.Subscriptions {
			_, sub := s.sub(name)
			sub.declared = true
		}
		return
	case history.Lineage:
		_, sub := s.sub(v.Consumer)
		sub.lineage = true
		return
	case history.Drain:
		s.drain = drainAfter(s.drain, op.Type, v.Reason)
		if op.Type != history.Invoke {
			s.drainEnd = op.Time
		}
		return
	case history.Resources:
		s.resource(op)
		return
	case history.Fault:
		s.fault(op)
		return
	case history.Crash:
		if op.Type != history.Invoke {
			s.crashes++
		}
		s.nodeOp(op)
		s.assigns.end(op, pos)
		return
	case history.Restart:
		if op.Type != history.Invoke {
			s.restarts++
		}
		s.nodeOp(op)
		s.assigns.end(op, pos)
		return
	case history.Leader:
		s.nodeOp(op)
		return
	case history.TxnStage:
		s.txnState().declare(v)
		return
	case history.Assign:
		s.assigns.op(op, pos)
		return
	case history.Lag:
		s.lags.op(op)
		return
	}
	if txnOwned(op) {
		s.txnState().op(op)
		return
	}
	if v.Event == "" {
		switch {
		case op.F == history.FinalRead && v.Table == history.TableBroker:
			s.fr.brokerRead(op.Type)
		case op.F == history.FinalRead && v.Table == history.TableBrokerDLQ:
			s.fr.deadLettersRead(op.Type)
		}
		return
	}
	ei, e := s.event(v, pos)
	if op.F != history.FinalRead && (v.Trace != "" || op.F == history.Deliver) {
		s.traces.op(s.seed, ei, op)
	}
	if op.F == history.FinalRead {
		if op.Type == history.OK {
			if v.Table == history.TableBroker {
				s.assigns.brokerRow(v)
			}
			s.row(op, ei, e)
		}
		return
	}
	if op.F == history.Intrude {
		s.intrude(op, ei, e)
		return
	}
	if !e.op(op) {
		if op.F == history.Publish {
			s.publishes = true
		}
		return
	}
	si, sub := s.sub(v.Consumer)
	se := sub.at(ei)
	if op.F == history.Redrive {
		s.redrive(op, sub, ei)
		return
	}
	se.flags |= sSeen
	if sub.redrive != nil {
		sub.redrive.afterRedrive(op, ei)
	}
	if settles(op) {
		sub.settles = append(sub.settles, settleRec{op.Time, ei})
	}
	if op.F == history.Deliver {
		sub.lineage = true
		s.assigns.deliver(op, pos, ei)
	}
	if op.F == history.Apply || op.F == history.DLQ {
		s.retryOp(op, ei, sub)
	}
	if op.F == history.Apply {
		sub.applyOps = true
		s.apply(op, ei, e, si, se)
		return
	}
	if op.F == history.DLQ {
		s.rejected(ei, e, sub.name, op)
	}
	se.op(op)
}

// finalRead follows a final read's brackets.
func (s *shard) finalRead(op *history.Op) {
	if s.id == 0 {
		s.series.op(op)
	}
	if s.fr.bracket(op.Type) {
		s.ledger = s.ledger[:0]
		if s.txnStage != nil {
			s.txnStage.newAttempt()
		}
	}
}

// row folds a final-read row of event ei into the current attempt.
func (s *shard) row(op *history.Op, ei int32, e *event) {
	v := &op.Value
	if !e.row(s.fr.attempt, v) {
		return
	}
	si, sub := s.sub(v.Consumer)
	se := sub.at(ei)
	if se.row(s.fr.attempt, op.Time, v) {
		s.ledger = append(s.ledger, applyRec{sub: si, event: ei, inv: v.CommitTime, ok: v.CommitTime, version: cmp.Or(v.Version, e.version)})
	}
	if v.Table == history.TableDLQ {
		s.rejected(ei, e, sub.name, op)
	}
	if v.Table == history.TableBrokerDLQ {
		if sub.brokerDLQ == nil {
			sub.brokerDLQ = map[int32]int64{}
		}
		sub.brokerDLQ[ei] = v.Attempt
	}
}
