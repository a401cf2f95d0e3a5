package checker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"pgregory.net/rapid"

	"github.com/deliverycheck/deliverycheck/history"
)

// strict promises everything, so any anomaly in a generated correct
// history would make it invalid.
var strict = Guarantees{Loss: None, DuplicateEffects: None, Order: PerKey, Gaps: None}

// Commit outcomes of generated events.
const (
	outOK = iota
	outInfoCommitted
	outInfoNotCommitted
	outFail
)

type genEvent struct {
	id        string
	key       string
	version   int64
	outcome   int
	poison    bool
	committed bool
	// early: the producer published it itself before invoking its commit
	// (the publish-then-commit shape); early events have no outbox row,
	// and what follows from that publish proves nothing about the commit.
	early   bool
	publish history.Type // early only: how the producer's publish ended
	reached bool         // early only: the broker got it and delivers it
}

// provable reports whether the checker can know e committed: its commit
// is ok, or indeterminate and observed downstream of the outbox.
func (e *genEvent) provable() bool {
	return e.committed && (e.outcome == outOK || !e.early)
}

// genHistory is a generated correct at-least-once history and what the
// generator knows about it.
type genHistory struct {
	h       history.History
	subs    []string
	events  []*genEvent
	applied map[string][]*genEvent // per subscription, in apply order
	dlq     map[string][]*genEvent
	// broker is how the final read's read of the broker's log ended:
	// ok (a broker row per event the broker got), fail, or 0 (not read,
	// as before the broker read).
	broker history.Type
}

// script is a queue of ops one actor still has to write; gate, if set,
// must be true before the next op can be written.
type worker struct {
	name  string
	sub   string
	queue []*genEvent // published events of this worker's keys, in order
	ops   []func()    // the rest of the current event's script
	seen  map[*genEvent]bool
}

// genCorrect draws a correct history: concurrent producers with
// indeterminate and failed commits, some publishing an event themselves
// before committing it, a relay that sometimes republishes,
// per-subscription consumers (keys split across workers, in order per key)
// with redeliveries, crashes between commit and ack, poison events
// dead-lettered, nemesis noise, then drain and final read. Ops of
// different processes sometimes share a timestamp (never in an order
// Merge would change).
func genCorrect(t *rapid.T) *genHistory {
	g := &genHistory{applied: map[string][]*genEvent{}, dlq: map[string][]*genEvent{}}
	nSubs := rapid.IntRange(1, 3).Draw(t, "subs")
	for i := range nSubs {
		g.subs = append(g.subs, "s"+strconv.Itoa(i))
	}
	nKeys := rapid.IntRange(1, 4).Draw(t, "keys")
	nEvents := rapid.IntRange(0, 24).Draw(t, "events")
	nProducers := rapid.IntRange(1, 3).Draw(t, "producers")
	var now int64
	lastP := ""
	emit := func(p string, typ history.Type, f history.F, v history.Value) {
		// A tie only where Merge keeps the order written: a later process
		// name at the same time.
		if !(lastP != "" && p > lastP && rapid.IntRange(0, 3).Draw(t, "tie") == 0) {
			now += 1000
		}
		lastP = p
		g.h = append(g.h, history.Op{Index: int64(len(g.h)), Time: now, Process: p, Type: typ, F: f, Value: v})
	}
	g.h = nil
	emit("harness", history.OK, history.Setup, history.Value{Subscriptions: g.subs})
	for _, s := range g.subs {
		emit("harness", history.OK, history.Lineage, history.Value{Consumer: s})
	}
	g.broker = rapid.SampledFrom([]history.Type{history.OK, history.OK, history.Fail, 0}).Draw(t, "broker-read")
	inBroker := map[*genEvent]bool{}

	// Producers.
	prodQueues := make([][]*genEvent, nProducers)
	for i := range nEvents {
		e := &genEvent{
			id:      "e" + strconv.Itoa(i),
			key:     "k" + strconv.Itoa(rapid.IntRange(0, nKeys-1).Draw(t, "key")),
			outcome: rapid.SampledFrom([]int{outOK, outOK, outOK, outInfoCommitted, outInfoNotCommitted, outFail}).Draw(t, "outcome"),
			poison:  rapid.IntRange(0, 9).Draw(t, "poison") == 0,
			early:   rapid.IntRange(0, 3).Draw(t, "early") == 0,
		}
		if e.early {
			// The producer's own publish: it must reach the broker if the
			// commit is ok (else a real loss) and must not if the commit
			// failed (else a real phantom); either way if indeterminate.
			switch e.outcome {
			case outOK:
				e.publish, e.reached = history.OK, true
			case outFail:
				e.publish = rapid.SampledFrom([]history.Type{history.Fail, history.Info}).Draw(t, "early-publish")
			default:
				e.publish = rapid.SampledFrom([]history.Type{history.OK, history.Info, history.Fail}).Draw(t, "early-publish")
				e.reached = e.publish == history.OK || e.publish == history.Info && rapid.Bool().Draw(t, "reached")
			}
		}
		g.events = append(g.events, e)
		p := rapid.IntRange(0, nProducers-1).Draw(t, "producer")
		prodQueues[p] = append(prodQueues[p], e)
	}
	prodStep := make([]int, nProducers) // 4 ops per event: 2 for an early publish, 2 for the commit
	nextVersion := map[string]int64{}
	var relayQueue []*genEvent

	// Consumers: each subscription has 1-2 workers; key k goes to worker k%n.
	var workers []*worker
	workerOf := map[string][]*worker{}
	for _, s := range g.subs {
		n := rapid.IntRange(1, 2).Draw(t, "workers")
		for w := range n {
			wk := &worker{name: fmt.Sprintf("consumer-%s-%d", s, w), sub: s, seen: map[*genEvent]bool{}}
			workers = append(workers, wk)
			workerOf[s] = append(workerOf[s], wk)
		}
	}
	keyWorker := func(s, key string) *worker {
		ws := workerOf[s]
		k, _ := strconv.Atoi(key[1:])
		return ws[k%len(ws)]
	}
	effects := map[string]map[*genEvent]int{}
	for _, s := range g.subs {
		effects[s] = map[*genEvent]int{}
	}
	faults := rapid.IntRange(0, 3).Draw(t, "faults")

	// startEvent builds the script a worker follows for its next event.
	startEvent := func(wk *worker, e *genEvent) {
		s, p := wk.sub, wk.name
		v := history.Value{Event: e.id, Consumer: s}
		vk := history.Value{Event: e.id, Consumer: s, Key: e.key, Version: e.version}
		deliver := func(attempt int64) func() {
			return func() {
				d := v
				d.Attempt = attempt
				emit(p, history.OK, history.Deliver, d)
			}
		}
		op := func(typ history.Type, f history.F, val history.Value) func() {
			return func() { emit(p, typ, f, val) }
		}
		dup := history.Value{Event: e.id, Consumer: s, Key: e.key, Version: e.version, Reason: "duplicate"}
		if wk.seen[e] {
			// Already handled: the inbox (or DLQ mark) turns it away.
			wk.ops = []func(){deliver(2), op(history.Invoke, history.Apply, vk), op(history.Fail, history.Apply, dup), op(history.OK, history.Ack, v)}
			if e.poison {
				wk.ops = []func(){deliver(2), op(history.OK, history.Ack, v)}
			}
			return
		}
		wk.seen[e] = true
		if e.poison {
			attempts := rapid.IntRange(1, 3).Draw(t, "poison-attempts")
			for a := range attempts {
				wk.ops = append(wk.ops, deliver(int64(a+1)), op(history.Fail, history.Apply, history.Value{Event: e.id, Consumer: s, Error: "poison"}))
			}
			wk.ops = append(wk.ops, op(history.OK, history.DLQ, v), op(history.OK, history.Ack, v))
			g.dlq[s] = append(g.dlq[s], e)
			return
		}
		effects[s][e]++
		g.applied[s] = append(g.applied[s], e)
		switch rapid.IntRange(0, 5).Draw(t, "consume") {
		case 0: // crash after commit, before the op and the ack: redelivered
			wk.ops = []func(){deliver(1), op(history.Invoke, history.Apply, vk),
				func() { emit("nemesis", history.OK, history.Crash, history.Value{Target: p}) },
				func() { emit("nemesis", history.OK, history.Restart, history.Value{Target: p}) },
				deliver(2), op(history.Invoke, history.Apply, vk), op(history.Fail, history.Apply, dup), op(history.OK, history.Ack, v)}
		case 1: // redelivered after the ack
			wk.ops = []func(){deliver(1), op(history.Invoke, history.Apply, vk), op(history.OK, history.Apply, vk), op(history.OK, history.Ack, v),
				deliver(2), op(history.Invoke, history.Apply, vk), op(history.Fail, history.Apply, dup), op(history.OK, history.Ack, v)}
		default:
			wk.ops = []func(){deliver(1), op(history.Invoke, history.Apply, vk), op(history.OK, history.Apply, vk), op(history.OK, history.Ack, v)}
		}
	}

	for {
		type actor struct {
			name string
			step func()
		}
		var ready []actor
		for p := range prodQueues {
			if prodStep[p] < 4*len(prodQueues[p]) {
				ready = append(ready, actor{"producer", func() {
					e := prodQueues[p][prodStep[p]/4]
					name := "producer-" + strconv.Itoa(p)
					step := prodStep[p] % 4
					prodStep[p]++
					if step < 2 && !e.early {
						prodStep[p] += 2 - step
						step = 2
					}
					switch {
					case step == 0:
						emit(name, history.Invoke, history.Publish, history.Value{Event: e.id, Key: e.key, Poison: e.poison})
						return
					case step == 1:
						v := history.Value{Event: e.id, Key: e.key, Poison: e.poison}
						if e.publish != history.OK {
							v.Error = "unconfirmed"
						}
						emit(name, e.publish, history.Publish, v)
						return
					}
					if step == 2 {
						emit(name, history.Invoke, history.Commit, history.Value{Event: e.id, Key: e.key, Poison: e.poison})
					} else {
						v := history.Value{Event: e.id, Key: e.key, Poison: e.poison}
						typ := history.OK
						switch e.outcome {
						case outInfoCommitted, outInfoNotCommitted:
							typ, v.Error = history.Info, "timeout"
						case outFail:
							typ, v.Error = history.Fail, "serialization failure"
						}
						if e.outcome == outOK || e.outcome == outInfoCommitted {
							nextVersion[e.key]++
							e.version = nextVersion[e.key]
							e.committed = true
							if !e.early {
								relayQueue = append(relayQueue, e)
							}
						}
						if e.outcome == outOK {
							v.Version = e.version
						}
						emit(name, typ, history.Commit, v)
						if e.reached {
							// The broker hands on the producer's own publish
							// once the commit is decided, in commit order
							// with the relay's (it may be later).
							relayQueue = append(relayQueue, e)
						}
					}
				}})
			}
		}
		if len(relayQueue) > 0 {
			ready = append(ready, actor{"relay", func() {
				e := relayQueue[0]
				relayQueue = relayQueue[1:]
				if !e.early {
					emit("relay-0", history.OK, history.Publish, history.Value{Event: e.id, Partition: 0, Offset: int64(len(g.h))})
				}
				inBroker[e] = true
				for _, s := range g.subs {
					wk := keyWorker(s, e.key)
					wk.queue = append(wk.queue, e)
				}
				if !e.early && rapid.IntRange(0, 7).Draw(t, "republish") == 0 {
					// The relay crashed after publishing, before marking.
					relayQueue = append([]*genEvent{e}, relayQueue...)
				}
			}})
		}
		for _, wk := range workers {
			if len(wk.ops) > 0 || len(wk.queue) > 0 {
				ready = append(ready, actor{wk.name, func() {
					if len(wk.ops) == 0 {
						e := wk.queue[0]
						wk.queue = wk.queue[1:]
						startEvent(wk, e)
					}
					next := wk.ops[0]
					wk.ops = wk.ops[1:]
					next()
				}})
			}
		}
		if faults > 0 {
			ready = append(ready, actor{"nemesis", func() {
				faults--
				emit("nemesis", history.Invoke, history.Fault, history.Value{Fault: "partition", Target: "broker"})
				emit("nemesis", history.OK, history.Fault, history.Value{Fault: "partition", Target: "broker"})
			}})
		}
		if len(ready) == 0 {
			break
		}
		ready[rapid.IntRange(0, len(ready)-1).Draw(t, "actor")].step()
	}

	emit("harness", history.OK, history.Drain, history.Value{})
	emit("harness", history.Invoke, history.FinalRead, history.Value{})
	for _, e := range g.events {
		if e.committed && !e.early {
			emit("harness", history.OK, history.FinalRead, history.Value{Table: history.TableOutbox, Event: e.id, Key: e.key, Version: e.version, Published: true})
		}
	}
	for _, s := range g.subs {
		for _, e := range g.applied[s] {
			for range effects[s][e] {
				emit("harness", history.OK, history.FinalRead, history.Value{Table: history.TableEffects, Event: e.id, Consumer: s, Key: e.key, Version: e.version})
			}
			emit("harness", history.OK, history.FinalRead, history.Value{Table: history.TableInbox, Event: e.id, Consumer: s})
		}
		for _, e := range g.dlq[s] {
			emit("harness", history.OK, history.FinalRead, history.Value{Table: history.TableDLQ, Event: e.id, Consumer: s})
		}
	}
	if g.broker != 0 {
		for i, e := range g.events {
			if inBroker[e] && g.broker == history.OK {
				emit("harness", history.OK, history.FinalRead, history.Value{Table: history.TableBroker, Event: e.id, Offset: int64(i)})
			}
		}
		emit("harness", g.broker, history.FinalRead, history.Value{Table: history.TableBroker, Target: "events"})
	}
	emit("harness", history.OK, history.FinalRead, history.Value{})
	return g
}

func TestPropertyCorrectHistoriesAreValid(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		g := genCorrect(t)
		r := Check(g.h, Options{Guarantees: strict})
		// Nothing exercised is not valid: with no commit the checker can
		// prove, the verdict is unknown.
		want := Unknown
		for _, e := range g.events {
			if e.provable() {
				want = Valid
			}
		}
		if r.Valid != want || len(r.Anomalies) != 0 {
			t.Fatalf("correct history judged %s, want %s: %v\nanomalies %+v\n%s", r.Valid, want, r.Reasons, r.Anomalies, dump(g.h))
		}
		// Recovered and in-doubt are exactly the indeterminate commits,
		// split by whether the outbox path proves them: a publish the
		// producer made before its commit proves nothing.
		var rec, doubt []string
		for _, e := range g.events {
			switch {
			case e.outcome == outInfoCommitted && !e.early:
				rec = append(rec, e.id)
			case e.outcome == outInfoCommitted, e.outcome == outInfoNotCommitted:
				doubt = append(doubt, e.id)
			}
		}
		got := found(r.Shown)
		slices.Sort(rec)
		slices.Sort(doubt)
		if !slices.Equal(stripSub(got[Recovered]), rec) || !slices.Equal(stripSub(got[InDoubt]), doubt) {
			t.Fatalf("recovered %v / in-doubt %v, want %v / %v", got[Recovered], got[InDoubt], rec, doubt)
		}
	})
}

func stripSub(ids []string) []string {
	var out []string
	for _, id := range ids {
		out = append(out, id[1:]) // ":e1" → "e1"
	}
	slices.Sort(out)
	return out
}

func dump(h history.History) string {
	var b []byte
	for _, op := range h {
		b = append(op.AppendJSON(b), '\n')
	}
	return string(b)
}

// plant describes one planted anomaly: the history with it and the
// subscription:event ids it must be found at.
type plant func(t *rapid.T, g *genHistory) (history.History, []string, bool)

func pickSub(t *rapid.T, g *genHistory) string {
	return rapid.SampledFrom(g.subs).Draw(t, "plant-sub")
}

// provable keeps the events whose commit the checker can know of.
func provable(es []*genEvent) []*genEvent {
	var out []*genEvent
	for _, e := range es {
		if e.provable() {
			out = append(out, e)
		}
	}
	return out
}

// without returns h without the ops matching drop.
func without(h history.History, drop func(op *history.Op) bool) history.History {
	var out history.History
	for i := range h {
		if !drop(&h[i]) {
			out = append(out, h[i])
		}
	}
	return out
}

// pickSome draws a non-empty subset of candidates, in order.
func pickSome(t *rapid.T, cands []*genEvent) []*genEvent {
	var out []*genEvent
	for _, e := range cands {
		if rapid.Bool().Draw(t, "pick") {
			out = append(out, e)
		}
	}
	if len(out) == 0 {
		out = append(out, cands[rapid.IntRange(0, len(cands)-1).Draw(t, "pick-one")])
	}
	return out
}

func ids(sub string, es []*genEvent) []string {
	var out []string
	for _, e := range es {
		out = append(out, sub+":"+e.id)
	}
	return out
}

func set(es []*genEvent) map[string]bool {
	m := map[string]bool{}
	for _, e := range es {
		m[e.id] = true
	}
	return m
}

// pickApplied draws a subscription and a non-empty subset of the provable
// events of from[subscription] (g.applied or g.dlq); ok is false when it
// has none.
func pickApplied(t *rapid.T, g *genHistory, from map[string][]*genEvent) (sub string, es []*genEvent, ok bool) {
	sub = pickSub(t, g)
	cands := provable(from[sub])
	if len(cands) == 0 {
		return sub, nil, false
	}
	return sub, pickSome(t, cands), true
}

// withRows returns h with the final-read rows of each of es added before
// its last op (the final read's closing ok), a nanosecond apart.
func withRows(h history.History, es []*genEvent, rows func(e *genEvent) []history.Value) history.History {
	h = slices.Clone(h)
	last := h[len(h)-1]
	h = h[:len(h)-1]
	for _, e := range es {
		for _, v := range rows(e) {
			last.Time++
			h = append(h, history.Op{Time: last.Time, Process: "harness", Type: history.OK, F: history.FinalRead, Value: v})
		}
	}
	return append(h, last)
}

// nextVersions pairs each applied event with the next applied event of
// its key.
func nextVersions(applied []*genEvent) [][2]*genEvent {
	var out [][2]*genEvent
	for i, e := range applied {
		for _, f := range applied[i+1:] {
			if f.key == e.key {
				out = append(out, [2]*genEvent{e, f})
				break
			}
		}
	}
	return out
}

var plants = map[Kind]plant{
	Lost: func(t *rapid.T, g *genHistory) (history.History, []string, bool) {
		s, es, ok := pickApplied(t, g, g.applied)
		if !ok {
			return nil, nil, false
		}
		m := set(es)
		return without(g.h, func(op *history.Op) bool { return m[op.Value.Event] && op.Value.Consumer == s }), ids(s, es), true
	},
	DuplicateEffect: func(t *rapid.T, g *genHistory) (history.History, []string, bool) {
		s, es, ok := pickApplied(t, g, g.applied)
		if !ok {
			return nil, nil, false
		}
		return withRows(g.h, es, func(e *genEvent) []history.Value {
			return []history.Value{{Table: history.TableEffects, Event: e.id, Consumer: s, Key: e.key, Version: e.version}}
		}), ids(s, es), true
	},
	Unexpected: func(t *rapid.T, g *genHistory) (history.History, []string, bool) {
		s := pickSub(t, g)
		var failed []*genEvent
		for _, e := range g.events {
			if e.outcome == outFail {
				failed = append(failed, e)
			}
		}
		var es []*genEvent
		if len(failed) > 0 && rapid.Bool().Draw(t, "phantom-of-failed") {
			es = pickSome(t, failed)
		} else {
			es = []*genEvent{{id: "phantom"}}
		}
		return withRows(g.h, es, func(e *genEvent) []history.Value {
			return []history.Value{{Table: history.TableEffects, Event: e.id, Consumer: s}}
		}), ids(s, es), true
	},
	OrderRegression: func(t *rapid.T, g *genHistory) (history.History, []string, bool) {
		// Move the apply of e to just after the apply of the next version of
		// its key, by another worker.
		s := pickSub(t, g)
		cands := nextVersions(provable(g.applied[s]))
		if len(cands) == 0 {
			return nil, nil, false
		}
		c := rapid.SampledFrom(cands).Draw(t, "regression")
		e, f := c[0], c[1]
		var applyF *history.Op
		for i := range g.h {
			op := &g.h[i]
			if op.F == history.Apply && op.Type == history.OK && op.Value.Event == f.id && op.Value.Consumer == s {
				applyF = op
			}
		}
		if applyF == nil {
			return nil, nil, false // f's apply op was lost in a crash
		}
		h := without(g.h, func(op *history.Op) bool {
			return op.F == history.Apply && op.Value.Event == e.id && op.Value.Consumer == s
		})
		v := history.Value{Event: e.id, Consumer: s, Key: e.key, Version: e.version}
		h = append(h,
			history.Op{Time: applyF.Time + 1, Process: "consumer-late", Type: history.Invoke, F: history.Apply, Value: v},
			history.Op{Time: applyF.Time + 2, Process: "consumer-late", Type: history.OK, F: history.Apply, Value: v})
		return history.Merge(h), []string{s + ":" + e.id}, true
	},
	Gap: func(t *rapid.T, g *genHistory) (history.History, []string, bool) {
		// e is never applied: skipped as stale after a later version was.
		s := pickSub(t, g)
		cands := nextVersions(provable(g.applied[s]))
		if len(cands) == 0 {
			return nil, nil, false
		}
		c := rapid.SampledFrom(cands).Draw(t, "gap")
		e := c[0]
		h := without(g.h, func(op *history.Op) bool {
			return op.Value.Event == e.id && op.Value.Consumer == s && (op.F == history.Apply || op.Value.Table == history.TableEffects)
		})
		last := h[len(h)-1]
		h = append(h[:len(h)-1:len(h)-1], history.Op{Time: last.Time, Process: "consumer-late", Type: history.OK, F: history.SkipStale,
			Value: history.Value{Event: e.id, Consumer: s, Key: e.key, Version: e.version}}, last)
		return history.Merge(h), []string{s + ":" + e.id}, true
	},
	DLQUnaccounted: func(t *rapid.T, g *genHistory) (history.History, []string, bool) {
		s, es, ok := pickApplied(t, g, g.dlq)
		if !ok {
			return nil, nil, false
		}
		m := set(es)
		return without(g.h, func(op *history.Op) bool {
			return m[op.Value.Event] && op.Value.Consumer == s && (op.F == history.DLQ || op.Value.Table == history.TableDLQ)
		}), ids(s, es), true
	},
	PoisonApplied: func(t *rapid.T, g *genHistory) (history.History, []string, bool) {
		// A dead-lettered poison event that was also applied (with its
		// inbox mark, so inbox and effects agree).
		s, es, ok := pickApplied(t, g, g.dlq)
		if !ok {
			return nil, nil, false
		}
		return withRows(g.h, es, func(e *genEvent) []history.Value {
			v := history.Value{Event: e.id, Consumer: s, Key: e.key, Version: e.version}
			effect, inbox := v, v
			effect.Table, inbox.Table = history.TableEffects, history.TableInbox
			return []history.Value{effect, inbox}
		}), ids(s, es), true
	},
	InboxMismatch: func(t *rapid.T, g *genHistory) (history.History, []string, bool) {
		// Effects without their inbox marks, in a subscription that keeps
		// an inbox (some event keeps its mark).
		s, es, ok := pickApplied(t, g, g.applied)
		if !ok || len(g.applied[s]) < 2 {
			return nil, nil, false
		}
		if len(es) == len(g.applied[s]) {
			es = es[:len(es)-1]
		}
		m := set(es)
		return without(g.h, func(op *history.Op) bool {
			return m[op.Value.Event] && op.Value.Consumer == s && op.Value.Table == history.TableInbox
		}), ids(s, es), true
	},
	WronglyDeadLettered: func(t *rapid.T, g *genHistory) (history.History, []string, bool) {
		s, es, ok := pickApplied(t, g, g.applied)
		if !ok {
			return nil, nil, false
		}
		return withRows(g.h, es, func(e *genEvent) []history.Value {
			return []history.Value{{Table: history.TableDLQ, Event: e.id, Consumer: s}}
		}), ids(s, es), true
	},
}

func TestPropertyPlantedAnomalyIsFoundAlone(t *testing.T) {
	for _, kind := range AnomalyKinds() {
		t.Run(string(kind), func(t *testing.T) {
			if plants[kind] == nil {
				// Issue 25's kinds get their plants with their rules.
				t.Skipf("no plant for %s yet", kind)
			}
			rapid.Check(t, func(t *rapid.T) {
				g := genCorrect(t)
				h, want, ok := plants[kind](t, g)
				if !ok {
					t.Skip("no place to plant")
				}
				r := Check(h, Options{Guarantees: strict, MaxEvents: 1000})
				got := found(r.Anomalies)
				slices.Sort(want)
				slices.Sort(got[kind])
				if kind == OrderRegression {
					// A version applied after the next one is a gap too.
					for _, id := range got[Gap] {
						if !slices.Contains(want, id) {
							t.Fatalf("planted %s at %v; got a gap at %s too\n%s", kind, want, id, dump(h))
						}
					}
					delete(got, Gap)
				}
				if r.Valid != Invalid || len(got) != 1 || !slices.Equal(got[kind], want) {
					t.Fatalf("planted %s at %v; got %s with %v\n%s", kind, want, r.Valid, got, dump(h))
				}
			})
		})
	}
}

// TestPropertyDeterministic: the same history gives byte-identical
// results whatever the number of shards, in memory or from a file.
func TestPropertyDeterministic(t *testing.T) {
	dir := t.TempDir()
	rapid.Check(t, func(t *rapid.T) {
		g := genCorrect(t)
		h := g.h
		kind := rapid.SampledFrom(append([]Kind{""}, AnomalyKinds()...)).Draw(t, "plant")
		if kind != "" && plants[kind] != nil {
			if ph, _, ok := plants[kind](t, g); ok {
				h = ph
			}
		}
		checkDeterministic(t, h, dir, 3)
	})
}

// checkDeterministic fails t unless h gives byte-identical results with
// 1, 2 and 3 shards in memory and from a file in dir read with
// fileShards shards (whose examples are read again from it).
func checkDeterministic(t *rapid.T, h []history.Op, dir string, fileShards int) {
	var want []byte
	for _, n := range []int{1, 2, 3} {
		got, err := json.Marshal(Check(h, Options{Guarantees: strict, Shards: n}))
		if err != nil {
			t.Fatal(err)
		}
		if want == nil {
			want = got
		} else if !bytes.Equal(got, want) {
			t.Fatalf("%d shards:\n%s\nwant\n%s", n, got, want)
		}
	}
	p := filepath.Join(dir, "h.jsonl")
	if err := os.WriteFile(p, []byte(dump(h)), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := CheckFiles([]string{p}, Options{Guarantees: strict, Shards: fileShards})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := json.Marshal(r); !bytes.Equal(got, want) {
		t.Fatalf("CheckFiles:\n%s\nwant\n%s", got, want)
	}
}
