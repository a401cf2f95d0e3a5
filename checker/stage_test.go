package checker

import (
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/deliverycheck/deliverycheck/history"
)

// brokerRow is a record of id found in the broker's log by the final read.
func brokerRow(id string, offset int64) history.Value {
	return history.Value{Table: history.TableBroker, Event: id, Offset: offset}
}

// brokerDone is the value of the op closing the final read's read of the
// broker's log: an ok read it all, a fail or info could not.
func brokerDone() history.Value {
	return history.Value{Table: history.TableBroker, Target: "run.events"}
}

// finalReadBroker is a final read whose rows include the broker read
// closed by an op of type broker (0: no broker read at all).
func (b *builder) finalReadBroker(broker history.Type, rows ...history.Value) *builder {
	b.op("harness", history.Invoke, history.FinalRead, history.Value{})
	for _, r := range rows {
		b.op("harness", history.OK, history.FinalRead, r)
	}
	if broker != 0 {
		b.op("harness", broker, history.FinalRead, brokerDone())
	}
	return b.op("harness", history.OK, history.FinalRead, history.Value{})
}

// setup declares the run's subscriptions, those in lineage recording every
// delivery.
func (b *builder) setup(subs, lineage []string) *builder {
	b.op("harness", history.OK, history.Setup, history.Value{Subscriptions: subs})
	for _, sub := range lineage {
		b.op("harness", history.OK, history.Lineage, history.Value{Consumer: sub})
	}
	return b
}

// failover is a failover of postgres's primary that took effect (fail:
// one that was not injected).
func (b *builder) failover(outcome history.Type) *builder {
	v := history.Value{Fault: FaultFailover, Target: "postgres", Detail: "at 3s: failover postgres"}
	b.op("harness", history.Invoke, history.Fault, v)
	if outcome == history.OK {
		b.op("harness", history.Info, history.Crash, history.Value{Target: "postgres", Fault: FaultFailover})
	}
	return b.op("harness", outcome, history.Fault, v)
}

func outboxRow(id string, published bool) history.Value {
	return history.Value{Table: history.TableOutbox, Event: id, Published: published}
}

// lostStages returns the stage of each lost event of subscription sub, by
// event, from the examples, and checks that the anomaly's stage counts
// add up to them.
func lostStages(t *testing.T, r *Result, sub string) map[string]Stage {
	t.Helper()
	got := map[string]Stage{}
	for _, an := range r.Anomalies {
		if an.Kind != Lost || an.Subscription != sub {
			continue
		}
		counts := map[Stage]int{}
		for _, ex := range an.Examples {
			got[ex.Event] = ex.Stage
			counts[ex.Stage]++
		}
		var sum int
		for _, sc := range an.Stages {
			sum += sc.Count
			if counts[sc.Stage] != sc.Count {
				t.Errorf("stages %+v do not match the examples' %v", an.Stages, counts)
			}
		}
		if sum != an.Count {
			t.Errorf("stages %+v count %d of %d lost", an.Stages, sum, an.Count)
		}
	}
	return got
}

// TestLostStage pins where a lost event was last seen, stage by stage,
// with the smallest history that shows each; e0 is consumed and applied
// in every case, so the run exercised something.
func TestLostStage(t *testing.T) {
	inv := []string{"inv"}
	const broker = history.OK
	// base commits and publishes e0, consumed by inv, and commits e1.
	base := func(lineage []string) *builder {
		return new(builder).setup(inv, lineage).commit("e0", "k0", 1, history.OK).publish("e0").consume("e0", "inv").
			commit("e1", "k1", 1, history.OK)
	}
	applied := effect("e0", "inv")
	tests := []struct {
		name   string
		h      history.History
		sub    string
		want   Stage
		broker string // Facts.BrokerRead
	}{
		{
			name: "delivered, never applied: its effect rolled back",
			h:    base(inv).publish("e1").deliver("e1", "inv").drain().finalReadBroker(broker, applied, brokerRow("e0", 0), brokerRow("e1", 1)).h,
			want: RolledBack, broker: "complete",
		},
		{
			name: "acked before its effect (ack-first): rolled back",
			h:    base(inv).publish("e1").deliver("e1", "inv").ack("e1", "inv").drain().finalReadBroker(broker, applied, brokerRow("e0", 0), brokerRow("e1", 1)).h,
			want: RolledBack, broker: "complete",
		},
		{
			name: "apply ok without its effect row: rolled back, also without the broker read",
			h:    base(inv).publish("e1").deliver("e1", "inv").apply("e1", "inv").drain().finalRead(applied).h,
			want: RolledBack, broker: "missing",
		},
		{
			name: "in the broker, never delivered to a subscription that records deliveries",
			h:    base(inv).publish("e1").drain().finalReadBroker(broker, applied, brokerRow("e0", 0), brokerRow("e1", 1)).h,
			want: NeverDelivered, broker: "complete",
		},
		{
			name: "in the broker, and the subscription records no deliveries: not observed past the broker",
			h: new(builder).setup(inv, nil).commit("e0", "k0", 1, history.OK).publish("e0").
				commit("e1", "k1", 1, history.OK).publish("e1").drain().finalReadBroker(broker, applied, brokerRow("e0", 0), brokerRow("e1", 1)).h,
			want: "unknown-between-in-broker-and-applied", broker: "complete",
		},
		{
			name: "a deliver op shows the subscription's lineage without the setup saying so",
			h:    base(nil).publish("e1").drain().finalReadBroker(broker, applied, brokerRow("e0", 0), brokerRow("e1", 1)).h,
			want: NeverDelivered, broker: "complete",
		},
		{
			name: "confirmed, absent from the broker's log: the broker's loss",
			h:    base(inv).publish("e1").drain().finalReadBroker(broker, applied, brokerRow("e0", 0)).h,
			want: AbsentFromBroker, broker: "complete",
		},
		{
			name: "an outbox row marked published is a confirm",
			h: base(inv).drain().finalReadBroker(broker, applied, brokerRow("e0", 0),
				history.Value{Table: history.TableOutbox, Event: "e1", Published: true}).h,
			want: AbsentFromBroker, broker: "complete",
		},
		{
			name: "published, never confirmed, not in the broker",
			h: base(inv).op("relay-0", history.Invoke, history.Publish, history.Value{Event: "e1"}).
				op("relay-0", history.Info, history.Publish, history.Value{Event: "e1", Error: "timeout"}).
				drain().finalReadBroker(broker, applied, brokerRow("e0", 0)).h,
			want: Unconfirmed, broker: "complete",
		},
		{
			name: "a publish killed before its outcome, not in the broker: unconfirmed",
			h: base(inv).op("relay-0", history.Invoke, history.Publish, history.Value{Event: "e1"}).
				drain().finalReadBroker(broker, applied, brokerRow("e0", 0)).h,
			want: Unconfirmed, broker: "complete",
		},
		{
			name: "never confirmed, yet in the broker: never delivered",
			h: base(inv).op("relay-0", history.Info, history.Publish, history.Value{Event: "e1", Error: "timeout"}).
				drain().finalReadBroker(broker, applied, brokerRow("e0", 0), brokerRow("e1", 1)).h,
			want: NeverDelivered, broker: "complete",
		},
		{
			name: "no publish while the relay records its publishes, not in the broker: never published",
			h:    base(inv).drain().finalReadBroker(broker, applied, brokerRow("e0", 0)).h,
			want: NeverPublished, broker: "complete",
		},
		{
			name: "no publish op in the run (a relay without lineage), not in the broker: between committed and the broker",
			h: new(builder).setup(inv, inv).commit("e0", "k0", 1, history.OK).consume("e0", "inv").
				commit("e1", "k1", 1, history.OK).drain().finalReadBroker(broker, applied, brokerRow("e0", 0)).h,
			want: "unknown-between-committed-and-in-broker", broker: "complete",
		},
		{
			name: "no publish op in the run, in the broker: never delivered",
			h: new(builder).setup(inv, inv).commit("e0", "k0", 1, history.OK).consume("e0", "inv").
				commit("e1", "k1", 1, history.OK).drain().finalReadBroker(broker, applied, brokerRow("e0", 0), brokerRow("e1", 1)).h,
			want: NeverDelivered, broker: "complete",
		},
		{
			name: "the broker read failed: confirmed, then unknown up to the delivery",
			h:    base(inv).publish("e1").drain().finalReadBroker(history.Fail, applied, brokerRow("e0", 0)).h,
			want: "unknown-between-confirmed-and-delivered", broker: "failed",
		},
		{
			name: "no broker read (an older history): confirmed, then unknown up to the delivery",
			h:    base(inv).publish("e1").drain().finalRead(applied).h,
			want: "unknown-between-confirmed-and-delivered", broker: "missing",
		},
		{
			name: "no broker read, no deliveries recorded: unknown up to the effect",
			h: new(builder).setup(inv, nil).commit("e0", "k0", 1, history.OK).publish("e0").
				commit("e1", "k1", 1, history.OK).publish("e1").drain().finalRead(applied).h,
			want: "unknown-between-confirmed-and-applied", broker: "missing",
		},
		{
			name: "no broker read, no publish: never published is not guessed",
			h:    base(inv).drain().finalRead(applied).h,
			want: "unknown-between-committed-and-delivered", broker: "missing",
		},
		{
			name: "no broker read, publish unconfirmed",
			h:    base(inv).op("relay-0", history.Info, history.Publish, history.Value{Event: "e1"}).drain().finalRead(applied).h,
			want: "unknown-between-published-and-delivered", broker: "missing",
		},
		{
			name: "a retried final read: only the last attempt's broker read counts (it failed)",
			h: base(inv).publish("e1").drain().finalReadBroker(broker, brokerRow("e1", 1)).
				finalReadBroker(history.Info, applied, brokerRow("e0", 0)).h,
			want: "unknown-between-confirmed-and-delivered", broker: "failed",
		},
		{
			name: "a retried final read: only the last attempt's broker rows count",
			h: base(inv).publish("e1").drain().finalReadBroker(history.Fail).
				finalReadBroker(broker, applied, brokerRow("e0", 0), brokerRow("e1", 1)).h,
			want: NeverDelivered, broker: "complete",
		},
		{
			name: "committed before a failover, its outbox row gone from the new primary: the database's loss",
			h: base(inv).failover(history.OK).drain().
				finalReadBroker(broker, applied, outboxRow("e0", true), brokerRow("e0", 0)).h,
			want: LostInFailover, broker: "complete",
		},
		{
			name: "applied before a failover, effect and inbox mark gone: the database's loss, not the consumer's",
			h: base(inv).publish("e1").consume("e1", "inv").failover(history.OK).drain().
				finalReadBroker(broker, applied, history.Value{Table: history.TableInbox, Event: "e0", Consumer: "inv"},
					outboxRow("e0", true), outboxRow("e1", true), brokerRow("e0", 0), brokerRow("e1", 1)).h,
			want: LostInFailover, broker: "complete",
		},
		{
			name: "applied before a failover, its inbox mark kept: the effect's loss is not the failover's",
			h: base(inv).publish("e1").consume("e1", "inv").failover(history.OK).drain().
				finalReadBroker(broker, applied, history.Value{Table: history.TableInbox, Event: "e1", Consumer: "inv"},
					outboxRow("e0", true), outboxRow("e1", true), brokerRow("e0", 0), brokerRow("e1", 1)).h,
			want: RolledBack, broker: "complete",
		},
		{
			name: "applied after the failover, effect gone: rolled back, the new primary is not to blame",
			h: base(inv).failover(history.OK).publish("e1").consume("e1", "inv").drain().
				finalReadBroker(broker, applied, outboxRow("e0", true), outboxRow("e1", true), brokerRow("e0", 0), brokerRow("e1", 1)).h,
			want: RolledBack, broker: "complete",
		},
		{
			name: "committed after the failover, no outbox row: never published",
			h: new(builder).setup(inv, inv).commit("e0", "k0", 1, history.OK).publish("e0").consume("e0", "inv").
				failover(history.OK).commit("e1", "k1", 1, history.OK).drain().
				finalReadBroker(broker, applied, outboxRow("e0", true), brokerRow("e0", 0)).h,
			want: NeverPublished, broker: "complete",
		},
		{
			name: "a failover that did not take effect loses nothing",
			h: base(inv).failover(history.Fail).drain().
				finalReadBroker(broker, applied, outboxRow("e0", true), brokerRow("e0", 0)).h,
			want: NeverPublished, broker: "complete",
		},
		{
			name: "committed before a failover, its outbox row kept: never published, the relay's",
			h: base(inv).failover(history.OK).drain().
				finalReadBroker(broker, applied, outboxRow("e0", true), outboxRow("e1", false), brokerRow("e0", 0)).h,
			want: NeverPublished, broker: "complete",
		},
		{
			name: "no outbox rows at all (a producer without an outbox): not put on the failover",
			h:    base(inv).failover(history.OK).drain().finalReadBroker(broker, applied, brokerRow("e0", 0)).h,
			want: NeverPublished, broker: "complete",
		},
		{
			name: "confirmed before a failover, outbox row gone, absent from the broker: the broker's loss",
			h: base(inv).publish("e1").failover(history.OK).drain().
				finalReadBroker(broker, applied, outboxRow("e0", true), brokerRow("e0", 0)).h,
			want: AbsentFromBroker, broker: "complete",
		},
		{
			name: "outbox row gone after a failover, but the broker's log was not read: not guessed",
			h: base(inv).failover(history.OK).drain().
				finalReadBroker(history.Fail, applied, outboxRow("e0", true), brokerRow("e0", 0)).h,
			want: "unknown-between-committed-and-delivered", broker: "failed",
		},
		{
			// bad-unroutable: inv's queue is unbound, so it gets nothing,
			// while billing and the witness get every event.
			name: "an unbound subscription: in the broker, never delivered to it",
			h: new(builder).setup([]string{"billing", "inv"}, []string{"billing", "inv"}).
				commit("e0", "k0", 1, history.OK).publish("e0").consume("e0", "billing").
				drain().finalReadBroker(broker, effect("e0", "billing"), brokerRow("e0", 0)).h,
			sub: "inv", want: NeverDelivered, broker: "complete",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub, id := "inv", "e1"
			if tt.sub != "" {
				sub, id = tt.sub, "e0"
			}
			for _, shards := range []int{1, 3} {
				r := Check(tt.h, Options{Guarantees: Guarantees{Subscriptions: inv}, Shards: shards})
				got := lostStages(t, r, sub)
				if r.Valid != Invalid || len(got) != 1 || got[id] != tt.want {
					t.Fatalf("%d shards: %s %v, lost stages %v, want %s lost at %s\n%s", shards, r.Valid, r.Reasons, got, id, tt.want, dump(tt.h))
				}
				if r.Facts.BrokerRead != tt.broker {
					t.Errorf("broker_read = %q, want %q", r.Facts.BrokerRead, tt.broker)
				}
			}
		})
	}
}

// TestStageNames: every stage the checker can name is one the schema and
// Meaning know, and Between reads back the points of an unknown one.
func TestStageNames(t *testing.T) {
	var definite []Stage
	for seen := pointCommitted; seen < pointApplied; seen++ {
		for notReached := seen + 1; notReached <= pointApplied; notReached++ {
			s := stageOf(seen, notReached).Stage()
			x, y, unknown := s.Between()
			if _, ok := definiteStages[stageOf(seen, notReached)]; ok {
				if unknown {
					t.Errorf("%s reads as unknown", s)
				}
				definite = append(definite, s)
				continue
			}
			if notReached < pointInBroker {
				continue // lostStage spans nothing before the broker
			}
			if !unknown || x != pointNames[seen] || y != pointNames[notReached] {
				t.Errorf("%s: Between = %q, %q, %v", s, x, y, unknown)
			}
			if m := s.Meaning("inv"); m == string(s) {
				t.Errorf("%s has no meaning", s)
			}
		}
	}
	want := []Stage{NeverPublished, Unconfirmed, AbsentFromBroker, NeverDelivered, RolledBack}
	if !slices.Equal(definite, want) {
		t.Errorf("definite stages in pipeline order = %v, want %v", definite, want)
	}
	// The database's loss is no span of the pipeline, and sorts first.
	if s := stageFailover.Stage(); s != LostInFailover || stageFailover >= stageOf(pointCommitted, pointPublished) {
		t.Errorf("stageFailover = %s (%#x)", s, uint8(stageFailover))
	}
	if _, _, unknown := LostInFailover.Between(); unknown || LostInFailover.Meaning("inv") == string(LostInFailover) {
		t.Errorf("%s reads as unknown or has no meaning", LostInFailover)
	}
}

// edit returns a copy of h with each op changed by fn, without those fn
// drops.
func edit(h history.History, fn func(op *history.Op) (keep bool)) history.History {
	var out history.History
	for _, op := range h {
		if fn(&op) {
			out = append(out, op)
		}
	}
	return out
}

// stagePlant plants a loss at one stage in a generated correct history:
// the history, and the subscription:event ids lost there.
type stagePlant func(t *rapid.T, g *genHistory) (h history.History, lost []string, ok bool)

// losable draws a subscription and some events it applied whose commit
// is ok and which the relay published: losing them is a plain loss.
func losable(t *rapid.T, g *genHistory) (string, map[string]bool, []*genEvent, bool) {
	s := pickSub(t, g)
	var cands []*genEvent
	for _, e := range g.applied[s] {
		if e.outcome == outOK && !e.early && !e.poison {
			cands = append(cands, e)
		}
	}
	if len(cands) == 0 {
		return "", nil, nil, false
	}
	es := pickSome(t, cands)
	return s, set(es), es, true
}

// inAll are the ids of es in every subscription of g.
func inAll(g *genHistory, es []*genEvent) []string {
	var out []string
	for _, s := range g.subs {
		out = append(out, ids(s, es)...)
	}
	return out
}

// unpublish plants events the relay never got confirmed: every op and
// row of theirs past the commit goes, and their publishes become what
// publish makes of them (false: dropped).
func unpublish(t *rapid.T, g *genHistory, publish func(op *history.Op) bool) (history.History, []string, bool) {
	_, m, es, ok := losable(t, g)
	if !ok {
		return nil, nil, false
	}
	h := edit(g.h, func(op *history.Op) bool {
		switch v := &op.Value; {
		case !m[v.Event]:
			return true
		case op.F == history.Publish:
			return publish(op)
		case v.Table == history.TableOutbox:
			v.Published = false
			return true
		}
		return op.F == history.Commit
	})
	return h, inAll(g, es), true
}

// withFailover returns h with a failover that took effect inserted
// before its op at index i, at that op's time.
func withFailover(h history.History, i int) history.History {
	t := h[i].Time
	v := history.Value{Fault: FaultFailover, Target: "postgres"}
	fo := history.History{
		{Time: t, Process: "harness", Type: history.Invoke, F: history.Fault, Value: v},
		{Time: t, Process: "harness", Type: history.Info, F: history.Crash, Value: history.Value{Target: "postgres", Fault: FaultFailover}},
		{Time: t, Process: "harness", Type: history.OK, F: history.Fault, Value: v},
	}
	out := slices.Concat(h[:i:i], fo, h[i:])
	for j := range out {
		out[j].Index = int64(j)
	}
	return out
}

var stagePlants = map[Stage]stagePlant{
	// A failover just before the drain, which lost the effects and inbox
	// marks of events the subscription's consumer had applied (apply ok).
	LostInFailover: func(t *rapid.T, g *genHistory) (history.History, []string, bool) {
		s, m, _, ok := losable(t, g)
		if !ok {
			return nil, nil, false
		}
		var es []string
		for _, op := range g.h {
			if op.F == history.Apply && op.Type == history.OK && op.Value.Consumer == s && m[op.Value.Event] {
				es = append(es, op.Value.Event)
				delete(m, op.Value.Event)
			}
		}
		if len(es) == 0 {
			return nil, nil, false // only crashes after the commit: no apply ok
		}
		lost := map[string]bool{}
		for _, e := range es {
			lost[e] = true
		}
		h := edit(g.h, func(op *history.Op) bool {
			v := &op.Value
			return !(lost[v.Event] && v.Consumer == s && (v.Table == history.TableEffects || v.Table == history.TableInbox))
		})
		drain := slices.IndexFunc(h, func(op history.Op) bool { return op.F == history.Drain })
		out := make([]string, len(es))
		for i, e := range es {
			out[i] = s + ":" + e
		}
		return withFailover(h, drain), out, true
	},
	RolledBack: func(t *rapid.T, g *genHistory) (history.History, []string, bool) {
		s, m, es, ok := losable(t, g)
		if !ok {
			return nil, nil, false
		}
		return edit(g.h, func(op *history.Op) bool {
			v := &op.Value
			return !(m[v.Event] && v.Consumer == s && (op.F == history.Apply || v.Table == history.TableEffects || v.Table == history.TableInbox))
		}), ids(s, es), true
	},
	NeverDelivered: func(t *rapid.T, g *genHistory) (history.History, []string, bool) {
		s, m, es, ok := losable(t, g)
		if !ok {
			return nil, nil, false
		}
		return edit(g.h, func(op *history.Op) bool { return !(m[op.Value.Event] && op.Value.Consumer == s) }), ids(s, es), true
	},
	AbsentFromBroker: func(t *rapid.T, g *genHistory) (history.History, []string, bool) {
		s, m, es, ok := losable(t, g)
		if !ok {
			return nil, nil, false
		}
		return edit(g.h, func(op *history.Op) bool {
			v := &op.Value
			return !(m[v.Event] && (v.Consumer == s || v.Table == history.TableBroker))
		}), ids(s, es), true
	},
	Unconfirmed: func(t *rapid.T, g *genHistory) (history.History, []string, bool) {
		return unpublish(t, g, func(op *history.Op) bool {
			op.Type, op.Value.Error = history.Info, "timeout"
			return true
		})
	},
	NeverPublished: func(t *rapid.T, g *genHistory) (history.History, []string, bool) {
		return unpublish(t, g, func(*history.Op) bool { return false })
	},
}

// TestPropertyPlantedLossStage: a loss planted at a stage of a generated
// correct history is found lost there, and nowhere else: or, where the
// broker's log was not read, between the last point the history shows
// and the delivery, never at a guessed stage. A failover before the
// first write changes no stage; effects a failover lost are the
// database's loss whether or not the broker was read.
func TestPropertyPlantedLossStage(t *testing.T) {
	// What the stage reads as without a complete broker read.
	unread := map[Stage]Stage{
		LostInFailover:   LostInFailover,
		RolledBack:       RolledBack,
		NeverDelivered:   "unknown-between-confirmed-and-delivered",
		AbsentFromBroker: "unknown-between-confirmed-and-delivered",
		Unconfirmed:      "unknown-between-published-and-delivered",
		NeverPublished:   "unknown-between-committed-and-delivered",
	}
	for st, plant := range stagePlants {
		t.Run(string(st), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				g := genCorrect(t)
				h, lost, ok := plant(t, g)
				if !ok {
					t.Skip("nothing to lose")
				}
				if st != LostInFailover && rapid.Bool().Draw(t, "failover-first") {
					// A failover before anything was written loses
					// nothing and takes no loss's blame.
					h = withFailover(h, slices.IndexFunc(h, func(op history.Op) bool { return op.F != history.Setup && op.F != history.Lineage }))
				}
				want := st
				switch {
				case g.broker != history.OK:
					want = unread[st]
				case st == NeverPublished && !slices.ContainsFunc(h, func(op history.Op) bool { return op.F == history.Publish }):
					// No publish is left: the relay records none.
					want = "unknown-between-committed-and-in-broker"
				}
				r := Check(h, Options{Guarantees: strict, MaxEvents: 1000, MaxExamples: 1000})
				got := found(r.Anomalies)
				slices.Sort(lost)
				slices.Sort(got[Lost])
				if r.Valid != Invalid || len(got) != 1 || !slices.Equal(got[Lost], lost) {
					t.Fatalf("planted a loss at %s of %v; got %s with %v\n%s", st, lost, r.Valid, got, dump(h))
				}
				for _, an := range r.Anomalies {
					for _, ex := range an.Examples {
						if ex.Stage != want {
							t.Fatalf("%s:%s lost at %s, want %s\n%s", an.Subscription, ex.Event, ex.Stage, want, dump(h))
						}
					}
				}
			})
		})
	}
}
