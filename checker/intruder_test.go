package checker

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/deliverycheck/deliverycheck/history"
)

// The intruder's ops, for the intruder tests: src is the source it
// forges (a workload source), id the event id it sends.

func intrudeValue(src, id, kind string) history.Value {
	return history.Value{Event: id, Source: src, Key: "order-1", Version: 1, Detail: kind}
}

// intrude is one message of the intruder: its invoke and, unless typ is
// 0 (never completed), its completion; a fail carries refusal.
func (b *builder) intrude(src, id, kind string, typ history.Type, refusal string) *builder {
	b.op("intruder", history.Invoke, history.Intrude, intrudeValue(src, id, kind))
	if typ == 0 {
		return b
	}
	v := intrudeValue(src, id, kind)
	if typ == history.Fail {
		v.Error = refusal
	}
	return b.op("intruder", typ, history.Intrude, v)
}

// intrudeFault opens (invoke) or closes (ok, fail) the intrude fault.
func (b *builder) intrudeFault(typ history.Type, evidence string) *builder {
	v := history.Value{Fault: FaultIntrude, Target: "rabbitmq", Detail: "at 2s: intrude"}
	if typ == history.OK {
		v.Evidence = evidence
	} else if typ != history.Invoke {
		v.Error = evidence
	}
	return b.op("nemesis", typ, history.Fault, v)
}

// rejectFrom delivers (src, id) to sub, which dead-letters it at once
// with reason, as the correct consumer rejects an unauthorized event.
func (b *builder) rejectFrom(src, id, sub, reason string) *builder {
	p := "consumer-" + sub
	b.op(p, history.OK, history.Deliver, subv(src, id, sub))
	v := subv(src, id, sub)
	v.Reason = reason
	b.op(p, history.OK, history.DLQ, v)
	return b.op(p, history.OK, history.Ack, subv(src, id, sub))
}

// skipFrom delivers (src, id) to sub, whose version guard skips it as
// stale.
func (b *builder) skipFrom(src, id, sub string) *builder {
	p := "consumer-" + sub
	b.op(p, history.OK, history.Deliver, subv(src, id, sub))
	b.op(p, history.OK, history.SkipStale, subv(src, id, sub))
	return b.op(p, history.OK, history.Ack, subv(src, id, sub))
}

func dlqFrom(src, id, sub, reason string) history.Value {
	return history.Value{Table: history.TableDLQ, Event: id, Source: src, Consumer: sub, Reason: reason}
}

func inboxFrom(src, id, sub string) history.Value {
	return history.Value{Table: history.TableInbox, Event: id, Source: src, Consumer: sub}
}

// intruderRun is a run of one committed event e1, consumed by every
// subscription in subs, with the intrude fault's window around what
// during writes; rows are the final read's rows beyond e1's.
func intruderRun(subs []string, during func(b *builder), rows ...history.Value) history.History {
	const o = "/orders"
	b := new(builder).setup(subs, subs).commitFrom(o, "e1", "k0", 1).publishAs(o, "e1", "")
	for _, s := range subs {
		b.applyFrom(o, "e1", s, false)
	}
	b.intrudeFault(history.Invoke, "")
	during(b)
	b.drain()
	fr := []history.Value{outboxFrom(o, "e1"), brokerFrom(o, "e1", 0)}
	for _, s := range subs {
		fr = append(fr, effectFrom(o, "e1", s), inboxFrom(o, "e1", s))
	}
	return b.finalReadBroker(history.OK, append(fr, rows...)...).h
}

// intruderKind returns the section's entry for kind k, nil if none.
func intruderKind(r *Result, k string) *IntruderKind {
	if r.Intruder == nil {
		return nil
	}
	for i := range r.Intruder.Kinds {
		if r.Intruder.Kinds[i].Kind == k {
			return &r.Intruder.Kinds[i]
		}
	}
	return nil
}

// TestIntruder pins the checker's handling of the intruder's events
// (issue 24): unauthorized effects, rejections, the Intruder section and
// the facts the verdict needs of it.
func TestIntruder(t *testing.T) {
	const o = "/orders"
	inv := []string{"inv"}
	two := []string{"inv", "mail"}
	const authority = `source "/orders" may not emit "AdminGranted"`
	const refused = "Exception (403) Reason: \"ACCESS_REFUSED - write access to exchange 'run.events' in vhost '/' refused for user 'run-intruder'\""
	tests := []struct {
		name    string
		h       history.History
		valid   Validity
		kinds   map[Kind]int // anomalies and shown kinds of subscription inv (mail: sub "mail:kind")
		reasons []string     // substrings of some reason
		detail  string       // substring of an unauthorized-effect or unexpected example's detail
		// sent, refused, accepted, unanswered of kind "type"; per
		// subscription inv: rejected, applied, skipped, unaccounted.
		section  [4]int64
		inv      [4]int64
		reasons0 []string // inv's rejection reasons of kind "type"
		refusals []string // the broker's refusals of kind "type"
	}{
		{
			name: "a trusting consumer applies the intruder's events: unauthorized-effect, nothing lost or unexpected",
			h: intruderRun(inv, func(b *builder) {
				b.intrude(o, "intruder-type-1", "type", history.OK, "").intrude(o, "intruder-type-2", "type", history.OK, "").intrudeFault(history.OK, "broker accepted 2 of 2 intruder messages")
				b.applyFrom(o, "intruder-type-1", "inv", false).applyFrom(o, "intruder-type-2", "inv", false)
			}, effectFrom(o, "intruder-type-1", "inv"), inboxFrom(o, "intruder-type-1", "inv"), effectFrom(o, "intruder-type-2", "inv"), inboxFrom(o, "intruder-type-2", "inv")),
			valid: Invalid, kinds: map[Kind]int{UnauthorizedEffect: 2},
			reasons: []string{"2 unauthorized-effect in inv"}, detail: "forged by the intruder",
			section: [4]int64{2, 0, 2, 0}, inv: [4]int64{0, 2, 0, 0},
		},
		{
			name: "a correct consumer rejects them: a dead letter of an intruder's event is a rejection, valid",
			h: intruderRun(inv, func(b *builder) {
				b.intrude(o, "intruder-type-1", "type", history.OK, "").intrude(o, "intruder-type-2", "type", history.OK, "").intrudeFault(history.OK, "broker accepted 2 of 2 intruder messages")
				b.rejectFrom(o, "intruder-type-1", "inv", authority).rejectFrom(o, "intruder-type-2", "inv", authority)
			}, dlqFrom(o, "intruder-type-1", "inv", authority), dlqFrom(o, "intruder-type-2", "inv", authority)),
			valid: Valid, kinds: map[Kind]int{},
			section: [4]int64{2, 0, 2, 0}, inv: [4]int64{2, 0, 0, 0}, reasons0: []string{authority},
		},
		{
			name: "the rejection is the dead-letter row's when the consumer writes no dlq op (a team's consumer)",
			h: intruderRun(inv, func(b *builder) {
				b.intrude(o, "intruder-type-1", "type", history.OK, "").intrudeFault(history.OK, "broker accepted 1 of 1 intruder messages")
			}, dlqFrom(o, "intruder-type-1", "inv", "signature does not verify")),
			valid: Valid, kinds: map[Kind]int{},
			section: [4]int64{1, 0, 1, 0}, inv: [4]int64{1, 0, 0, 0}, reasons0: []string{"signature does not verify"},
		},
		{
			name: "least privilege: the broker refused every message, valid",
			h: intruderRun(inv, func(b *builder) {
				b.intrude(o, "intruder-type-1", "type", history.Fail, refused).intrude(o, "intruder-type-2", "type", history.Fail, refused).
					intrudeFault(history.OK, "broker refused 2 of 2 intruder messages: "+refused)
			}),
			valid: Valid, kinds: map[Kind]int{},
			section: [4]int64{2, 2, 0, 0}, inv: [4]int64{0, 0, 0, 0}, refusals: []string{refused},
		},
		{
			name: "the fault established nothing: every answer lost and no subscription got a message: unknown",
			h: intruderRun(inv, func(b *builder) {
				b.intrude(o, "intruder-type-1", "type", history.Info, "").intrude(o, "intruder-type-2", "type", 0, "").intrudeFault(history.OK, "")
			}),
			valid: Unknown, kinds: map[Kind]int{}, reasons: []string{"intruder: the fault did not bite"},
			section: [4]int64{2, 0, 0, 2}, inv: [4]int64{0, 0, 0, 0},
		},
		{
			name:  "an intrude fault that sent nothing did not bite: unknown",
			h:     intruderRun(inv, func(b *builder) { b.intrudeFault(history.OK, "") }),
			valid: Unknown, kinds: map[Kind]int{}, reasons: []string{"no intruder message was sent"},
		},
		{
			name: "accepted, and one subscription never did anything with it: unaccounted, unknown",
			h: intruderRun(two, func(b *builder) {
				b.intrude(o, "intruder-type-1", "type", history.OK, "").intrude(o, "intruder-type-2", "type", history.OK, "").intrudeFault(history.OK, "broker accepted 2 of 2 intruder messages")
				b.rejectFrom(o, "intruder-type-1", "inv", authority).rejectFrom(o, "intruder-type-2", "inv", authority).rejectFrom(o, "intruder-type-1", "mail", authority)
			}, dlqFrom(o, "intruder-type-1", "inv", authority), dlqFrom(o, "intruder-type-2", "inv", authority), dlqFrom(o, "intruder-type-1", "mail", authority)),
			valid: Unknown, kinds: map[Kind]int{},
			reasons: []string{"intruder: 1 accepted intruder messages neither rejected, skipped nor applied by mail (e.g. intruder-type-2)"},
			section: [4]int64{2, 0, 2, 0}, inv: [4]int64{2, 0, 0, 0}, reasons0: []string{authority},
		},
		{
			name: "unaccounted messages do not hide an unauthorized effect: invalid",
			h: intruderRun(inv, func(b *builder) {
				b.intrude(o, "intruder-type-1", "type", history.OK, "").intrude(o, "intruder-type-2", "type", history.OK, "").intrudeFault(history.OK, "broker accepted 2 of 2 intruder messages")
				b.applyFrom(o, "intruder-type-1", "inv", false)
			}, effectFrom(o, "intruder-type-1", "inv"), inboxFrom(o, "intruder-type-1", "inv")),
			valid: Invalid, kinds: map[Kind]int{UnauthorizedEffect: 1},
			section: [4]int64{2, 0, 2, 0}, inv: [4]int64{0, 1, 0, 1},
		},
		{
			name: "an answer lost, yet applied: the broker had it, an unauthorized effect",
			h: intruderRun(inv, func(b *builder) {
				b.intrude(o, "intruder-type-1", "type", history.Info, "").intrudeFault(history.OK, "")
				b.applyFrom(o, "intruder-type-1", "inv", false)
			}, effectFrom(o, "intruder-type-1", "inv")),
			valid: Invalid, kinds: map[Kind]int{UnauthorizedEffect: 1},
			section: [4]int64{1, 0, 1, 0}, inv: [4]int64{0, 1, 0, 0},
		},
		{
			name: "a version guard that skips it as stale accounts for it: valid",
			h: intruderRun(inv, func(b *builder) {
				b.intrude(o, "intruder-type-1", "type", history.OK, "").intrudeFault(history.OK, "broker accepted 1 of 1 intruder messages")
				b.skipFrom(o, "intruder-type-1", "inv")
			}, inboxFrom(o, "intruder-type-1", "inv")),
			valid: Valid, kinds: map[Kind]int{StaleSkipped: 1},
			section: [4]int64{1, 0, 1, 0}, inv: [4]int64{0, 0, 1, 0},
		},
		{
			name: "an effect for an event named by neither a commit nor an intrude op stays unexpected",
			h: intruderRun(inv, func(b *builder) {
				b.intrude(o, "intruder-type-1", "type", history.OK, "").intrudeFault(history.OK, "broker accepted 1 of 1 intruder messages")
				b.rejectFrom(o, "intruder-type-1", "inv", authority)
				b.applyFrom(o, "phantom", "inv", false)
			}, dlqFrom(o, "intruder-type-1", "inv", authority), effectFrom(o, "phantom", "inv"), inboxFrom(o, "phantom", "inv")),
			valid: Invalid, kinds: map[Kind]int{Unexpected: 1},
			section: [4]int64{1, 0, 1, 0}, inv: [4]int64{1, 0, 0, 0}, reasons0: []string{authority},
		},
		{
			name: "an effect of a message the broker refused stays unexpected, and says so",
			h: intruderRun(inv, func(b *builder) {
				b.intrude(o, "intruder-type-1", "type", history.Fail, refused).intrudeFault(history.OK, "")
				b.applyFrom(o, "intruder-type-1", "inv", false)
			}, effectFrom(o, "intruder-type-1", "inv")),
			valid: Invalid, kinds: map[Kind]int{Unexpected: 1}, detail: "the broker refused the intruder's message, yet it was applied",
			section: [4]int64{1, 0, 1, 0}, inv: [4]int64{0, 1, 0, 0},
		},
		{
			name: "a commit names the event: judged as the committed event, not the intruder's",
			h: intruderRun(inv, func(b *builder) {
				b.intrude(o, "e1", "replay", history.OK, "").intrudeFault(history.OK, "broker accepted 1 of 1 intruder messages")
				b.applyFrom(o, "e1", "inv", true)
			}),
			valid: Unknown, kinds: map[Kind]int{Redelivered: 1}, reasons: []string{"no intruder message was sent"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Check(tc.h, Options{Guarantees: Guarantees{Subscriptions: []string{"inv"}}})
			got := map[Kind]int{}
			for _, an := range slices.Concat(r.Anomalies, r.Shown) {
				if an.Subscription == "inv" {
					got[an.Kind] = an.Count
				} else if an.Subscription != "" {
					t.Errorf("%s in %s: %v", an.Kind, an.Subscription, an.Events)
				}
			}
			if r.Valid != tc.valid || !mapsEqual(got, tc.kinds) {
				t.Fatalf("valid %s with %v, want %s with %v (reasons %q)\n%s", r.Valid, got, tc.valid, tc.kinds, r.Reasons, dump(tc.h))
			}
			for _, s := range tc.reasons {
				if !slices.ContainsFunc(r.Reasons, func(x string) bool { return strings.Contains(x, s) }) {
					t.Errorf("reasons %q do not say %q", r.Reasons, s)
				}
			}
			if tc.detail != "" && !slices.ContainsFunc(r.Anomalies, func(an Anomaly) bool {
				return slices.ContainsFunc(an.Examples, func(ex Example) bool { return strings.Contains(ex.Detail, tc.detail) })
			}) {
				t.Errorf("no example says %q: %+v", tc.detail, r.Anomalies)
			}
			for _, an := range r.Anomalies {
				if an.Kind == UnauthorizedEffect {
					if !an.Fatal {
						t.Error("unauthorized-effect is not fatal")
					}
					if ops := an.Examples[0].Ops; !slices.ContainsFunc(ops, func(op history.Op) bool { return op.F == history.Intrude }) {
						t.Errorf("the example's ops do not show the intrude op: %v", ops)
					}
				}
			}
			if r.Subscriptions[0].UnauthorizedEffect != int64(tc.kinds[UnauthorizedEffect]) {
				t.Errorf("inv's unauthorized_effect = %d", r.Subscriptions[0].UnauthorizedEffect)
			}
			k := intruderKind(r, "type")
			if tc.section == [4]int64{} {
				if k != nil {
					t.Errorf("kind type in the section: %+v", k)
				}
				return
			}
			if k == nil {
				t.Fatalf("no kind type in the section: %+v", r.Intruder)
			}
			if s := [4]int64{k.Sent, k.Refused, k.Accepted, k.Unanswered}; s != tc.section {
				t.Errorf("sent, refused, accepted, unanswered = %v, want %v", s, tc.section)
			}
			si := k.Subscriptions[0]
			if s := [4]int64{si.Rejected, si.Applied, si.Skipped, si.Unaccounted}; si.Subscription != "inv" || s != tc.inv {
				t.Errorf("%s: rejected, applied, skipped, unaccounted = %v, want %v", si.Subscription, s, tc.inv)
			}
			if !slices.Equal(si.Reasons, tc.reasons0) || !slices.Equal(k.Refusals, tc.refusals) {
				t.Errorf("reasons %q, refusals %q; want %q, %q", si.Reasons, k.Refusals, tc.reasons0, tc.refusals)
			}
			if r.Intruder.Sent != k.Sent || r.Counts.Committed != 1 {
				t.Errorf("section sent %d, committed %d: the intruder's events are no commits", r.Intruder.Sent, r.Counts.Committed)
			}
		})
	}
}

func mapsEqual(a, b map[Kind]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Without an intrude op or fault there is no Intruder section.
func TestIntruderSectionOmitted(t *testing.T) {
	h := new(builder).setup([]string{"inv"}, []string{"inv"}).commit("e1", "k", 1, history.OK).publish("e1").consume("e1", "inv").
		drain().finalRead(effect("e1", "inv")).h
	if r := Check(h, Options{}); r.Intruder != nil {
		t.Errorf("intruder section %+v", r.Intruder)
	}
}

// The distinct reasons are capped, cut and sorted.
func TestIntruderReasonsCapped(t *testing.T) {
	const o = "/orders"
	long := strings.Repeat("x", 2*maxIntruderReasonLen)
	h := intruderRun([]string{"inv"}, func(b *builder) {
		for i := range 8 {
			id := "intruder-tenant-" + strconv.Itoa(i)
			b.intrude(o, id, "tenant", history.OK, "")
			why := `tenant "globex` + strconv.Itoa(i%7) + `" is not this consumer's`
			if i == 7 {
				why = long
			}
			b.rejectFrom(o, id, "inv", why)
		}
		b.intrudeFault(history.OK, "")
	})
	r := Check(h, Options{})
	k := intruderKind(r, "tenant")
	if k == nil || r.Valid != Valid {
		t.Fatalf("%s %q: %+v", r.Valid, r.Reasons, r.Intruder)
	}
	rs := k.Subscriptions[0].Reasons
	if len(rs) != maxIntruderReasons || !slices.IsSorted(rs) || k.Subscriptions[0].Rejected != 8 {
		t.Errorf("reasons %q (rejected %d)", rs, k.Subscriptions[0].Rejected)
	}
	r2 := Check(h, Options{Shards: 3})
	if !slices.Equal(intruderKind(r2, "tenant").Subscriptions[0].Reasons, rs) {
		t.Error("reasons depend on the number of shards")
	}
	if got := distinct([]string{long}); len(got) != 1 || len(got[0]) > maxIntruderReasonLen+len("…") {
		t.Errorf("a long reason is not cut: %d bytes", len(got[0]))
	}
}

// plantUnauthorized plants effects, in one subscription, of events the
// intruder sent (its intrude ops at the start of the history), none of
// which any commit names.
func plantUnauthorized(t *rapid.T, g *genHistory) (history.History, []string, bool) {
	s := pickSub(t, g)
	n := rapid.IntRange(1, 3).Draw(t, "intruders")
	var es []*genEvent
	for i := range n {
		es = append(es, &genEvent{id: "intruder-" + strconv.Itoa(i), key: "k0", version: 1})
	}
	h := withRows(g.h, es, func(e *genEvent) []history.Value {
		return []history.Value{{Table: history.TableEffects, Event: e.id, Consumer: s, Key: e.key, Version: e.version}}
	})
	var ops []history.Op
	for _, e := range es {
		typ := rapid.SampledFrom([]history.Type{history.OK, history.Info}).Draw(t, "intrude")
		v := history.Value{Event: e.id, Key: e.key, Version: 1, Detail: "signature-missing"}
		ops = append(ops, history.Op{Time: h[0].Time, Process: "intruder", Type: history.Invoke, F: history.Intrude, Value: v},
			history.Op{Time: h[0].Time, Process: "intruder", Type: typ, F: history.Intrude, Value: v})
	}
	return slices.Insert(h, 1, ops...), ids(s, es), true
}

func init() { plants[UnauthorizedEffect] = plantUnauthorized }

// intruderTreatment is what one subscription does with one intruder
// message in the generated histories.
const (
	treatIgnore = iota
	treatApply
	treatReject
	treatReapply // applied twice (a trusting consumer without an inbox)
)

// TestPropertyUnauthorizedEffect: in a correct history mixed with
// intruder messages the broker accepted, refused or never answered, each
// treated at random by each subscription (ignored, applied, applied
// twice, rejected), unauthorized-effect is found exactly at the
// accepted-or-unanswered messages some subscription applied, in that
// subscription, and never at a committed event; no intruder message is
// ever lost, unexpected, wrongly dead-lettered or dlq-unaccounted; and
// the section's counts are what was done.
func TestPropertyUnauthorizedEffect(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		g := genCorrect(t)
		h := slices.Clone(g.h)
		last := h[len(h)-1] // the final read's closing ok
		h = h[:len(h)-1]
		body, rows := h[:0:0], []history.Op(nil)
		for _, op := range h {
			if op.F == history.FinalRead && op.Value.Table != "" {
				rows = append(rows, op)
			} else {
				body = append(body, op)
			}
		}
		// body ends with drain, final-read invoke: intruder ops go before.
		cut := len(body)
		for cut > 0 && (body[cut-1].F == history.Drain || body[cut-1].F == history.FinalRead) {
			cut--
		}
		tail := slices.Clone(body[cut:])
		body = body[:cut]
		tm := int64(0)
		if len(body) > 0 {
			tm = body[len(body)-1].Time
		}
		add := func(p string, typ history.Type, f history.F, v history.Value) {
			tm++
			body = append(body, history.Op{Time: tm, Process: p, Type: typ, F: f, Value: v})
		}
		row := func(v history.Value) {
			rows = append(rows, history.Op{Process: "harness", Type: history.OK, F: history.FinalRead, Value: v})
		}
		n := rapid.IntRange(0, 6).Draw(t, "intruders")
		want := map[string]bool{} // sub:id of unauthorized effects
		var sent, refused, accepted, unanswered int64
		for i := range n {
			id := "intruder-" + strconv.Itoa(i)
			kind := rapid.SampledFrom([]string{"type", "tenant", "replay"}).Draw(t, "kind")
			v := history.Value{Event: id, Key: "k0", Version: 1000000, Detail: kind}
			typ := rapid.SampledFrom([]history.Type{history.OK, history.Fail, history.Info, 0}).Draw(t, "answer")
			add("intruder", history.Invoke, history.Intrude, v)
			if typ != 0 {
				c := v
				if typ == history.Fail {
					c.Error = "ACCESS_REFUSED"
				}
				add("intruder", typ, history.Intrude, c)
			}
			sent++
			seen := false
			for _, s := range g.subs {
				tr := treatIgnore
				if typ != history.Fail {
					tr = rapid.IntRange(treatIgnore, treatReapply).Draw(t, "treat")
				}
				p := "consumer-" + s + "-x"
				sv := history.Value{Event: id, Consumer: s, Key: "k0", Version: 1000000}
				switch tr {
				case treatApply, treatReapply:
					seen = true
					want[s+":"+id] = true
					for range tr - treatApply + 1 {
						add(p, history.OK, history.Deliver, sv)
						add(p, history.Invoke, history.Apply, sv)
						add(p, history.OK, history.Apply, sv)
						add(p, history.OK, history.Ack, sv)
						e := sv
						e.Table = history.TableEffects
						row(e)
					}
				case treatReject:
					seen = true
					add(p, history.OK, history.Deliver, sv)
					d := sv
					d.Reason = "missing signature"
					add(p, history.OK, history.DLQ, d)
					add(p, history.OK, history.Ack, sv)
					d.Table = history.TableDLQ
					row(d)
				}
			}
			switch {
			case typ == history.OK || seen:
				accepted++
			case typ == history.Fail:
				refused++
			default:
				unanswered++
			}
		}
		for _, op := range tail {
			tm++
			op.Time = tm
			body = append(body, op)
		}
		for _, op := range rows {
			tm++
			op.Time = tm
			body = append(body, op)
		}
		last.Time = tm + 1
		h = append(body, last)
		for i := range h {
			h[i].Index = int64(i)
		}
		r := Check(h, Options{Guarantees: strict, MaxEvents: 1000})
		got := found(r.Anomalies)
		var unauthorized []string
		for _, x := range got[UnauthorizedEffect] {
			unauthorized = append(unauthorized, x)
		}
		wantIDs := slices.Sorted(func(yield func(string) bool) {
			for k := range want {
				if !yield(k) {
					return
				}
			}
		})
		slices.Sort(unauthorized)
		if !slices.Equal(unauthorized, wantIDs) {
			t.Fatalf("unauthorized-effect at %v, want %v\n%s", unauthorized, wantIDs, dump(h))
		}
		// A duplicate effect of an intruder message is its unauthorized
		// effect, not a duplicate-effect; and nothing else is found.
		delete(got, UnauthorizedEffect)
		if len(got) != 0 {
			t.Fatalf("found %v besides the unauthorized effects\n%s", got, dump(h))
		}
		if n == 0 {
			if r.Intruder != nil {
				t.Fatalf("a section without an intruder: %+v", r.Intruder)
			}
			return
		}
		in := r.Intruder
		if in == nil || in.Sent != sent || in.Refused != refused || in.Accepted != accepted || in.Unanswered != unanswered {
			t.Fatalf("section %+v, want sent %d refused %d accepted %d unanswered %d", in, sent, refused, accepted, unanswered)
		}
		if len(want) > 0 && r.Valid != Invalid {
			t.Fatalf("unauthorized effects judged %s", r.Valid)
		}
	})
}

// The golden intruder histories' sections: the broker refused every
// message of the least-privilege run, with its refusal; the correct
// consumers rejected every message, each kind with the reason of the
// check that caught it (docs/security.md's order).
func TestIntruderGoldenSections(t *testing.T) {
	reasons := map[string]string{
		"type":              `source "/orders" may not emit "AdminGranted"`,
		"tenant":            `tenant "globex" is not this consumer's`,
		"version-ahead":     "version 1000000 is more than 1000 ahead of the applied 2",
		"replay":            "stale: event time 2026-12-02T09:26:14.123456789Z is older than the 10m0s freshness window",
		"signature-missing": "missing signature",
		"signature-wrong":   "signature does not verify",
	}
	for _, name := range []string{"intruder-least-privilege", "intruder-correct"} {
		r, err := CheckFiles([]string{"testdata/" + name + ".jsonl"}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		in := r.Intruder
		if in == nil || in.Sent != 12 || len(in.Kinds) != 6 {
			t.Fatalf("%s: section %+v", name, in)
		}
		for _, k := range in.Kinds {
			switch name {
			case "intruder-least-privilege":
				if k.Refused != 2 || k.Accepted != 0 || len(k.Refusals) != 1 || !strings.Contains(k.Refusals[0], "ACCESS_REFUSED") {
					t.Errorf("%s: %+v", name, k)
				}
			default:
				for _, s := range k.Subscriptions {
					if k.Accepted != 2 || s.Rejected != 2 || !slices.Equal(s.Reasons, []string{reasons[k.Kind]}) {
						t.Errorf("%s: %s in %s: %+v", name, k.Kind, s.Subscription, s)
					}
				}
			}
		}
	}
}

func TestIntruderSummary(t *testing.T) {
	r, err := CheckFiles([]string{"testdata/intruder-trusting.jsonl"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const want = "12 sent: 0 refused by the broker, 12 accepted, 0 unanswered; email rejected 0, applied 2, skipped 10, unaccounted 0; inventory rejected 0, applied 2, skipped 10, unaccounted 0"
	if got := r.Intruder.Summary(); got != want {
		t.Errorf("Summary() = %q, want %q", got, want)
	}
}
