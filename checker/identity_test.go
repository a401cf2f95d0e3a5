package checker

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/deliverycheck/deliverycheck/history"
)

// The ops of one event under its source, for the identity tests: src is
// the source, id the id.

func sev(src, id, key string, version int64) history.Value {
	return history.Value{Event: id, Source: src, Key: key, Version: version}
}

func (b *builder) commitFrom(src, id, key string, version int64) *builder {
	b.op("producer-0", history.Invoke, history.Commit, sev(src, id, key, version))
	return b.op("producer-0", history.OK, history.Commit, sev(src, id, key, version))
}

// publishAs is a confirmed publish of (src, id) sent on the wire as wire
// ("" for its own id).
func (b *builder) publishAs(src, id, wire string) *builder {
	v := history.Value{Event: id, Source: src, PublishedAs: wire}
	b.op("relay-0", history.Invoke, history.Publish, v)
	return b.op("relay-0", history.OK, history.Publish, v)
}

func subv(src, id, sub string) history.Value {
	return history.Value{Event: id, Source: src, Consumer: sub}
}

// applyFrom delivers (src, id) to sub and applies it; dup makes the inbox
// turn it away as a duplicate instead.
func (b *builder) applyFrom(src, id, sub string, dup bool) *builder {
	p := "consumer-" + sub
	b.op(p, history.OK, history.Deliver, subv(src, id, sub))
	b.op(p, history.Invoke, history.Apply, subv(src, id, sub))
	if dup {
		v := subv(src, id, sub)
		v.Reason = "duplicate: already in the inbox"
		b.op(p, history.Fail, history.Apply, v)
	} else {
		b.op(p, history.OK, history.Apply, subv(src, id, sub))
	}
	return b.op(p, history.OK, history.Ack, subv(src, id, sub))
}

func effectFrom(src, id, sub string) history.Value {
	return history.Value{Table: history.TableEffects, Event: id, Source: src, Consumer: sub}
}

func outboxFrom(src, id string) history.Value {
	return history.Value{Table: history.TableOutbox, Event: id, Source: src, Published: true}
}

func brokerFrom(src, id string, offset int64) history.Value {
	return history.Value{Table: history.TableBroker, Event: id, Source: src, Offset: offset}
}

// count returns how many anomalies of kind r has in subscription sub.
func anomalies(r *Result, kind Kind, sub string) int {
	for _, an := range r.Anomalies {
		if an.Kind == kind && an.Subscription == sub {
			return an.Count
		}
	}
	return 0
}

// TestIdentity pins what identifies an event (issue 24): source + id, an
// id a relay published a committed event as, and the lost event an inbox
// keyed by id alone turned away.
func TestIdentity(t *testing.T) {
	const o, r = "/orders", "/returns"
	inv := []string{"inv"}
	tests := []struct {
		name   string
		h      history.History
		kinds  map[Kind]int // anomalies of subscription inv
		events int64
		stage  Stage  // the lost event's, if one is lost
		detail string // the lost example's detail
	}{
		{
			name: "two sources share an id, each applied once: two events, valid",
			h: new(builder).setup(inv, inv).commitFrom(o, "42", "k0", 1).commitFrom(r, "42", "k1", 1).
				publishAs(o, "42", "").publishAs(r, "42", "").applyFrom(o, "42", "inv", false).applyFrom(r, "42", "inv", false).
				drain().finalReadBroker(history.OK, outboxFrom(o, "42"), outboxFrom(r, "42"), effectFrom(o, "42", "inv"), effectFrom(r, "42", "inv"),
				brokerFrom(o, "42", 0), brokerFrom(r, "42", 1)).h,
			kinds: map[Kind]int{}, events: 2,
		},
		{
			name: "an inbox keyed by id alone turns the second source's 42 away: lost, deduplicated against another source's event",
			h: new(builder).setup(inv, inv).commitFrom(o, "42", "k0", 1).commitFrom(r, "42", "k1", 1).
				publishAs(o, "42", "").publishAs(r, "42", "").applyFrom(o, "42", "inv", false).applyFrom(r, "42", "inv", true).
				drain().finalReadBroker(history.OK, outboxFrom(o, "42"), outboxFrom(r, "42"), effectFrom(o, "42", "inv"),
				brokerFrom(o, "42", 0), brokerFrom(r, "42", 1)).h,
			kinds: map[Kind]int{Lost: 1}, events: 2,
			stage: DeduplicatedAgainstOtherSource, detail: "deduplicated against another source's event: /orders has the same id",
		},
		{
			name: "a duplicate refused while another subscription, not this one, applied the other source's 42: rolled back, not the other source's doing",
			h: new(builder).setup([]string{"inv", "mail"}, []string{"inv", "mail"}).commitFrom(o, "42", "k0", 1).commitFrom(r, "42", "k1", 1).
				publishAs(o, "42", "").publishAs(r, "42", "").applyFrom(o, "42", "mail", false).applyFrom(r, "42", "mail", false).
				applyFrom(r, "42", "inv", true).applyFrom(o, "42", "inv", false).
				drain().finalReadBroker(history.OK, outboxFrom(o, "42"), outboxFrom(r, "42"), effectFrom(o, "42", "mail"), effectFrom(r, "42", "mail"), effectFrom(o, "42", "inv"),
				brokerFrom(o, "42", 0), brokerFrom(r, "42", 1)).h,
			kinds: map[Kind]int{Lost: 1}, events: 2,
			stage: DeduplicatedAgainstOtherSource, detail: "deduplicated against another source's event: /orders has the same id",
		},
		{
			name: "a redelivery turned away after its own apply: no loss",
			h: new(builder).setup(inv, inv).commitFrom(o, "42", "k0", 1).commitFrom(r, "42", "k1", 1).
				publishAs(o, "42", "").publishAs(r, "42", "").applyFrom(o, "42", "inv", false).applyFrom(r, "42", "inv", false).
				applyFrom(r, "42", "inv", true).
				drain().finalReadBroker(history.OK, outboxFrom(o, "42"), outboxFrom(r, "42"), effectFrom(o, "42", "inv"), effectFrom(r, "42", "inv"),
				brokerFrom(o, "42", 0), brokerFrom(r, "42", 1)).h,
			kinds: map[Kind]int{Redelivered: 1}, events: 2,
		},
		{
			name: "turned away as a duplicate with no other source's event applied: rolled back",
			h: new(builder).setup(inv, inv).commitFrom(o, "42", "k0", 1).publishAs(o, "42", "").applyFrom(o, "42", "inv", true).
				commitFrom(o, "43", "k1", 1).publishAs(o, "43", "").applyFrom(o, "43", "inv", false).
				drain().finalReadBroker(history.OK, outboxFrom(o, "42"), outboxFrom(o, "43"), effectFrom(o, "43", "inv"),
				brokerFrom(o, "42", 0), brokerFrom(o, "43", 1)).h,
			kinds: map[Kind]int{Lost: 1}, events: 2, stage: RolledBack,
		},
		{
			name: "a relay published one event under two minted ids, both applied: one event, a duplicate effect",
			h: new(builder).setup(inv, inv).commitFrom(o, "e1", "k0", 1).publishAs(o, "e1", "w1").publishAs(o, "e1", "w2").
				applyFrom(o, "w1", "inv", false).applyFrom(o, "w2", "inv", false).
				drain().finalReadBroker(history.OK, outboxFrom(o, "e1"), effectFrom(o, "w1", "inv"), effectFrom(o, "w2", "inv"),
				brokerFrom(o, "w1", 0), brokerFrom(o, "w2", 1)).h,
			kinds: map[Kind]int{DuplicateEffect: 1, Redelivered: 1}, events: 1,
		},
		{
			name: "minted ids the relay did not record: effects nobody committed, and the committed event lost (its own id is not in the broker)",
			h: new(builder).setup(inv, inv).commitFrom(o, "e1", "k0", 1).publishAs(o, "e1", "").
				applyFrom(o, "w1", "inv", false).applyFrom(o, "w2", "inv", false).
				drain().finalReadBroker(history.OK, outboxFrom(o, "e1"), effectFrom(o, "w1", "inv"), effectFrom(o, "w2", "inv"),
				brokerFrom(o, "w1", 0), brokerFrom(o, "w2", 1)).h,
			kinds: map[Kind]int{Unexpected: 2, Lost: 1}, events: 3, stage: AbsentFromBroker,
		},
		{
			name: "an alias is scoped by its source: /returns' w1 is its own event",
			h: new(builder).setup(inv, inv).commitFrom(o, "e1", "k0", 1).publishAs(o, "e1", "w1").
				commitFrom(r, "w1", "k1", 1).publishAs(r, "w1", "").
				applyFrom(o, "w1", "inv", false).applyFrom(r, "w1", "inv", false).
				drain().finalReadBroker(history.OK, outboxFrom(o, "e1"), outboxFrom(r, "w1"), effectFrom(o, "w1", "inv"), effectFrom(r, "w1", "inv"),
				brokerFrom(o, "w1", 0), brokerFrom(r, "w1", 1)).h,
			kinds: map[Kind]int{}, events: 2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, shards := range []int{1, 3} {
				r := Check(tc.h, Options{Shards: shards})
				if r.Counts.Events != tc.events {
					t.Errorf("shards %d: %d events, want %d", shards, r.Counts.Events, tc.events)
				}
				got := map[Kind]int{}
				for _, an := range append(r.Anomalies, r.Shown...) {
					if an.Subscription == "inv" {
						got[an.Kind] = an.Count
					}
				}
				if fmt.Sprint(got) != fmt.Sprint(tc.kinds) {
					t.Errorf("shards %d: anomalies %v, want %v (%v)", shards, got, tc.kinds, r.Reasons)
				}
				for _, an := range r.Anomalies {
					if an.Kind != Lost || an.Subscription != "inv" {
						continue
					}
					ex := an.Examples[0]
					if ex.Stage != tc.stage {
						t.Errorf("shards %d: lost at stage %s, want %s", shards, ex.Stage, tc.stage)
					}
					if tc.detail != "" && ex.Detail != tc.detail {
						t.Errorf("shards %d: detail %q, want %q", shards, ex.Detail, tc.detail)
					}
				}
			}
		})
	}
}

// TestAliasExampleOps checks that a duplicate effect under minted ids is
// shown with the ops that name those ids: the example replays them as the
// committed event's.
func TestAliasExampleOps(t *testing.T) {
	const o = "/orders"
	h := new(builder).setup([]string{"inv"}, []string{"inv"}).commitFrom(o, "e1", "k0", 1).publishAs(o, "e1", "w1").publishAs(o, "e1", "w2").
		applyFrom(o, "w1", "inv", false).applyFrom(o, "w2", "inv", false).
		drain().finalRead(outboxFrom(o, "e1"), effectFrom(o, "w1", "inv"), effectFrom(o, "w2", "inv")).h
	r := Check(h, Options{})
	for _, an := range r.Anomalies {
		if an.Kind != DuplicateEffect {
			continue
		}
		seen := map[string]bool{}
		for _, op := range an.Examples[0].Ops {
			seen[op.Value.Event] = true
		}
		if an.Examples[0].Event != "e1" || !seen["w1"] || !seen["w2"] {
			t.Fatalf("example %s shows ops of %v, want e1's with w1's and w2's", an.Examples[0].Event, seen)
		}
		return
	}
	t.Fatalf("no duplicate effect: %+v", r.Anomalies)
}

// TestIdentityProperty: ids shared by two sources, a consumer whose inbox
// keys by id alone (it applies the first of each id and turns the other
// source's away) and a relay that publishes some events under a minted
// id: exactly the turned-away events are lost, each deduplicated against
// another source's event, nothing else is found, and the result does not
// depend on the number of shards.
func TestIdentityProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 20).Draw(t, "ids")
		sources := []string{"/orders", "/returns"}
		b := new(builder).setup([]string{"inv"}, []string{"inv"})
		var rows []history.Value
		applied := map[string]bool{} // by id: the keyed inbox's marks
		lost := 0
		for i := range n {
			id := fmt.Sprintf("id-%d", i)
			for si, src := range sources {
				if !rapid.Bool().Draw(t, fmt.Sprintf("commit-%d-%d", i, si)) {
					continue
				}
				b.commitFrom(src, id, fmt.Sprintf("k%d-%d", i, si), 1)
				rows = append(rows, outboxFrom(src, id))
				wire := ""
				if rapid.Bool().Draw(t, fmt.Sprintf("minted-%d-%d", i, si)) {
					wire = "w-" + src + id
				}
				b.publishAs(src, id, wire)
				onWire := id
				if wire != "" {
					onWire = wire
				}
				dup := applied[id] && wire == ""
				b.applyFrom(src, onWire, "inv", dup)
				if dup {
					lost++
					continue
				}
				if wire == "" {
					applied[id] = true
				}
				rows = append(rows, effectFrom(src, onWire, "inv"))
			}
		}
		h := b.drain().finalRead(rows...).h
		r1 := Check(h, Options{Shards: 1})
		r4 := Check(h, Options{Shards: 4})
		if fmt.Sprint(r1.Anomalies) != fmt.Sprint(r4.Anomalies) || r1.Counts != r4.Counts {
			t.Fatalf("1 shard: %+v\n4 shards: %+v", r1.Anomalies, r4.Anomalies)
		}
		if got := anomalies(r1, Lost, "inv"); got != lost {
			t.Fatalf("%d lost, want %d: %+v", got, lost, r1.Anomalies)
		}
		for _, an := range r1.Anomalies {
			if an.Kind != Lost {
				t.Fatalf("unexpected anomaly %s: %+v", an.Kind, an)
			}
			for _, sc := range an.Stages {
				if sc.Stage != DeduplicatedAgainstOtherSource {
					t.Fatalf("lost at %s, want %s", sc.Stage, DeduplicatedAgainstOtherSource)
				}
			}
		}
	})
}
