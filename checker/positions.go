package checker

import (
	"cmp"
	"fmt"
	"iter"
	"math"
	"slices"
	"sort"

	"github.com/deliverycheck/deliverycheck/history"
)

// Positions: Jepsen's per-consumer checks of a Kafka consumer's polls
// (tests/kafka.clj, poll-skip and nonmonotonic-poll), judged per
// subscription, process and partition, only for processes that record
// assign ops (docs/results.md, "Positions").
//
// An assignment session runs from an assigned op of a partition to the
// process's next revoked or lost op of it, or to its crash or restart.
// Within a session the consumer should be handed each offset after the
// one before: the first delivery may start anywhere (the committed
// offset), and a record handed back to the broker (the subscriber's
// Retry, after a refusal) comes again with its attempt one higher, which
// moves the position back to it legitimately. Otherwise a delivery below
// the position is a nonmonotonic-poll, and one above it, past a record
// the broker's log holds at an offset in between, a poll-skip.

// SubscriptionPositions is how one subscription's Kafka consumers'
// positions were judged (docs/results.md, "Positions").
type SubscriptionPositions struct {
	Subscription string `json:"subscription"`
	// Judged: some process of the subscription recorded assign ops and
	// the broker's log was read whole (which poll-skip needs).
	Judged bool `json:"judged"`
	// ProcessesWithoutAssign are the processes that delivered its
	// events and recorded no assign op: not judged.
	ProcessesWithoutAssign []string `json:"processes_without_assign"`
	// Sessions counts assignment sessions, Deliveries the deliveries
	// judged within them.
	Sessions   int64 `json:"sessions"`
	Deliveries int64 `json:"deliveries"`
	PollSkip   int64 `json:"poll_skip"`
	// NonmonotonicPoll counts deliveries below the position.
	NonmonotonicPoll int64 `json:"nonmonotonic_poll"`
}

// posKind is what a positions record is.
type posKind uint8

const (
	posDeliver  posKind = iota
	posAssigned         // a partition assigned to the process
	posRevoked          // revoked or lost
	posEnd              // the process crashed or restarted
)

// posRec is one op the positions check follows.
type posRec struct {
	pos       int64 // in the history
	time      int64
	offset    int64
	attempt   int64
	partition int32
	kind      posKind
	process   string
	sub       string
	event     string
}

// brokerRec is one record of the broker's log (a final-read broker row):
// where it is, and whose redrive copy it is ("" for everyone's).
type brokerRec struct {
	partition int32
	offset    int64
	consumer  string
}

// positionsAcc collects, in each shard, the Kafka deliveries of its
// events and the broker rows; shard 0 also the assign, crash and restart
// ops.
type positionsAcc struct {
	recs []posRec // assign, crash and restart ops
	// dels are the deliveries, a record each: kept compact and without
	// pointers (the collector does not scan them), their process and
	// subscription an index in names, their event the shard's index.
	dels   []posDel
	names  []posName
	index  map[posName]int32
	last   int32 // the names entry of the previous delivery: they come in runs
	broker []brokerRec
}

// posDel is one Kafka delivery as a shard keeps it (positionsAcc).
type posDel struct {
	pos, time, offset int64
	attempt           int32
	partition         int32
	name              int32 // in positionsAcc.names
	ev                int32 // the shard's event index
}

// posName is a delivering process and its subscription.
type posName struct{ process, sub string }

// op folds an assign op (shard 0).
func (p *positionsAcc) op(op *history.Op, pos int64) {
	v := &op.Value
	k := posAssigned
	switch v.Detail {
	case history.AssignAssigned:
	case history.AssignRevoked, history.AssignLost:
		k = posRevoked
	default:
		return
	}
	p.recs = append(p.recs, posRec{pos: pos, time: op.Time, kind: k, partition: int32(v.Partition), process: op.Process, sub: subName(v.Consumer)})
}

// end folds a crash or restart op (shard 0): the process it names
// starts over, its sessions ended.
func (p *positionsAcc) end(op *history.Op, pos int64) {
	if op.Value.Target != "" && op.Type != history.Invoke {
		p.recs = append(p.recs, posRec{pos: pos, time: op.Time, kind: posEnd, process: op.Value.Target})
	}
}

// deliver folds a deliver op of a Kafka consumer: one without a
// RabbitMQ delivery tag.
func (p *positionsAcc) deliver(op *history.Op, pos int64, ei int32) {
	v := &op.Value
	if op.Type != history.OK || v.Tag != 0 {
		return
	}
	n := posName{op.Process, subName(v.Consumer)}
	i := p.last
	if int(i) >= len(p.names) || p.names[i] != n {
		var ok bool
		if i, ok = p.index[n]; !ok {
			if p.index == nil {
				p.index = map[posName]int32{}
			}
			i = int32(len(p.names))
			p.names = append(p.names, n)
			p.index[n] = i
		}
		p.last = i
	}
	p.dels = append(p.dels, posDel{pos: pos, time: op.Time, offset: v.Offset, attempt: int32(min(v.Attempt, math.MaxInt32)),
		partition: int32(v.Partition), name: i, ev: ei})
}

// posRecs yields the records of shards in history order, as the judge
// reads them: each shard's ops and deliveries are two runs already in
// that order, merged here without building one slice of them all.
func posRecs(shards []*shard) iter.Seq[posRec] {
	return func(yield func(posRec) bool) {
		ri, di := make([]int, len(shards)), make([]int, len(shards))
		for {
			best, del := -1, false
			bestPos := int64(math.MaxInt64)
			for i, s := range shards {
				a := &s.assigns
				if ri[i] < len(a.recs) && a.recs[ri[i]].pos < bestPos {
					best, del, bestPos = i, false, a.recs[ri[i]].pos
				}
				if di[i] < len(a.dels) && a.dels[di[i]].pos < bestPos {
					best, del, bestPos = i, true, a.dels[di[i]].pos
				}
			}
			if best < 0 {
				return
			}
			s := shards[best]
			a := &s.assigns
			var rc posRec
			if del {
				d := a.dels[di[best]]
				di[best]++
				n := a.names[d.name]
				rc = posRec{pos: d.pos, time: d.time, kind: posDeliver, offset: d.offset, attempt: int64(d.attempt),
					partition: d.partition, process: n.process, sub: n.sub, event: s.events[d.ev].id}
			} else {
				rc = a.recs[ri[best]]
				ri[best]++
			}
			if !yield(rc) {
				return
			}
		}
	}
}

// brokerRow folds a final-read broker row.
func (p *positionsAcc) brokerRow(v *history.Value) {
	p.broker = append(p.broker, brokerRec{partition: int32(v.Partition), offset: v.Offset, consumer: v.Consumer})
}

func subName(s string) string { return cmp.Or(s, defaultSubscription) }

// posFinding is one poll-skip or nonmonotonic-poll.
type posFinding struct {
	kind      Kind
	sub       string
	process   string
	event     string
	partition int32
	position  int64 // where the consumer should have been
	offset    int64 // where it was handed a record
	skipped   int64 // poll-skip: the first record skipped
	session   int64 // when the session started
}

// positionsSection fills r.Positions and adds the poll-skip and
// nonmonotonic-poll anomalies.
func (a *analyzer) positionsSection(_ *view, r *Result, f facts) {
	var log []brokerRec
	for _, s := range a.shards {
		log = append(log, s.assigns.broker...)
	}
	var fs []posFinding
	var joined map[string]int64
	r.Positions, fs, joined = judgePositions(posRecs(a.shards), newBrokerLog(log, f.brokerRead))
	for _, s := range a.shards {
		s.assigns = positionsAcc{}
	}
	for i := range r.Subscriptions {
		r.Subscriptions[i].JoinedNS = joined[r.Subscriptions[i].Name]
	}
	addPositionAnomalies(r, fs, a.opts)
}

// brokerLog is the broker's log by partition, offsets sorted; nil when
// it was not read whole.
type brokerLog map[int32][]brokerRec

func newBrokerLog(recs []brokerRec, complete bool) brokerLog {
	if !complete {
		return nil
	}
	l := brokerLog{}
	for _, b := range recs {
		l[b.partition] = append(l[b.partition], b)
	}
	for _, rs := range l {
		slices.SortFunc(rs, func(x, y brokerRec) int { return cmp.Compare(x.offset, y.offset) })
	}
	return l
}

// skipped is the first offset in [from, to) of partition p that the log
// holds a record of for subscription sub (not another subscription's
// redrive copy), or -1.
func (l brokerLog) skipped(p int32, from, to int64, sub string) int64 {
	rs := l[p]
	i := sort.Search(len(rs), func(i int) bool { return rs[i].offset >= from })
	for ; i < len(rs) && rs[i].offset < to; i++ {
		if c := rs[i].consumer; c == "" || c == sub {
			return rs[i].offset
		}
	}
	return -1
}

type sessKey struct {
	sub, process string
	partition    int32
}

// session is one assignment of a partition to a process.
type session struct {
	start    int64 // time of its assigned op
	first    int64 // the offset of its first delivery
	position int64 // the offset the next delivery should have
	started  bool  // a delivery was judged in it
}

// judgePositions follows recs (in history order) and judges every
// session. log is nil when the broker's log was not read whole: then no
// delivery is judged a poll-skip, and no subscription is judged. It
// returns the figures per subscription, sorted by name, the findings,
// and each subscription's first Kafka delivery's time (when it joined).
func judgePositions(recs iter.Seq[posRec], log brokerLog) ([]SubscriptionPositions, []posFinding, map[string]int64) {
	assigners := map[string]bool{} // processes that record assign ops
	for rc := range recs {
		if rc.kind == posAssigned || rc.kind == posRevoked {
			assigners[rc.process] = true
		}
	}
	joined := map[string]int64{}
	offsets := false // a delivery past offset 0: a Kafka consumer
	stats := map[string]*SubscriptionPositions{}
	stat := func(sub string) *SubscriptionPositions {
		st := stats[sub]
		if st == nil {
			st = &SubscriptionPositions{Subscription: sub, ProcessesWithoutAssign: []string{}}
			stats[sub] = st
		}
		return st
	}
	sessions := map[sessKey]*session{}
	var fs []posFinding
	for rc := range recs {
		key := sessKey{rc.sub, rc.process, rc.partition}
		switch rc.kind {
		case posAssigned:
			sessions[key] = &session{start: rc.time}
			stat(rc.sub).Sessions++
		case posRevoked:
			delete(sessions, key)
		case posEnd:
			for k := range sessions {
				if k.process == rc.process {
					delete(sessions, k)
				}
			}
		case posDeliver:
			if _, ok := joined[rc.sub]; !ok {
				joined[rc.sub] = rc.time
			}
			offsets = offsets || rc.offset > 0
			st := stat(rc.sub)
			if !assigners[rc.process] {
				if !slices.Contains(st.ProcessesWithoutAssign, rc.process) {
					st.ProcessesWithoutAssign = append(st.ProcessesWithoutAssign, rc.process)
				}
				continue
			}
			s := sessions[key]
			if s == nil {
				// Handed out before a revocation and recorded after it:
				// no session to judge it in.
				continue
			}
			st.Deliveries++
			if f, ok := s.deliver(rc, log); !ok {
				f.sub, f.process, f.event, f.partition, f.session = rc.sub, rc.process, rc.event, rc.partition, s.start
				fs = append(fs, f)
				if f.kind == PollSkip {
					st.PollSkip++
				} else {
					st.NonmonotonicPoll++
				}
			}
		}
	}
	if len(assigners) == 0 && !offsets {
		return nil, nil, joined // no Kafka consumer: nothing to judge or list
	}
	out := make([]SubscriptionPositions, 0, len(stats))
	for _, st := range stats {
		slices.Sort(st.ProcessesWithoutAssign)
		st.Judged = log != nil && st.Sessions > 0
		out = append(out, *st)
	}
	slices.SortFunc(out, func(x, y SubscriptionPositions) int { return cmp.Compare(x.Subscription, y.Subscription) })
	return out, fs, joined
}

// deliver judges a delivery in s and moves s's position past it. ok is
// false with the finding when the delivery is one. A delivery with a
// higher attempt back at an offset the session handed out before is a
// Retry's redelivery (the subscriber counts attempts within its own
// ownership of the partition, from 1).
func (s *session) deliver(rc posRec, log brokerLog) (f posFinding, ok bool) {
	o := rc.offset
	defer func() { s.position = o + 1 }()
	switch {
	case !s.started:
		s.started, s.first = true, o
	case o < s.position:
		if rc.attempt > 1 && o >= s.first {
			return f, true
		}
		return posFinding{kind: NonmonotonicPoll, position: s.position, offset: o}, false
	case o > s.position && log != nil:
		if k := log.skipped(rc.partition, s.position, o, rc.sub); k >= 0 {
			return posFinding{kind: PollSkip, position: s.position, offset: o, skipped: k}, false
		}
	}
	return f, true
}

// detail says a finding in words.
func (f posFinding) detail() string {
	if f.kind == PollSkip {
		return fmt.Sprintf("%s was handed offset %d of partition %d at position %d: offset %d, which the broker's log holds, was skipped (assignment from %s)",
			f.process, f.offset, f.partition, f.position, f.skipped, fmtSeconds(f.session))
	}
	return fmt.Sprintf("%s was handed offset %d of partition %d at position %d, going back without a redelivery (assignment from %s)",
		f.process, f.offset, f.partition, f.position, fmtSeconds(f.session))
}

// addPositionAnomalies adds one anomaly per kind and subscription of fs.
func addPositionAnomalies(r *Result, fs []posFinding, opts Options) {
	slices.SortStableFunc(fs, func(x, y posFinding) int {
		return cmp.Or(kindRank[x.kind]-kindRank[y.kind], cmp.Compare(x.sub, y.sub))
	})
	same := func(x, y posFinding) bool { return x.kind == y.kind && x.sub == y.sub }
	runs(fs, same, func(fs []posFinding) {
		an := Anomaly{Kind: fs[0].kind, Subscription: fs[0].sub, Fatal: r.Guarantees.Fatal(fs[0].kind)}
		fillAnomaly(&an, fs, opts, func(f posFinding) string { return f.event },
			func(f posFinding) Example { return Example{Event: f.event, Detail: f.detail(), Ops: []history.Op{}} })
		r.Anomalies = append(r.Anomalies, an)
	})
	slices.SortStableFunc(r.Anomalies, func(x, y Anomaly) int { return kindRank[x.Kind] - kindRank[y.Kind] })
}
