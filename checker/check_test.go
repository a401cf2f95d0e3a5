package checker

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/deliverycheck/deliverycheck/history"
)

// builder writes histories for tests, one op per call, time advancing.
type builder struct {
	h history.History
	t int64
}

func (b *builder) op(p string, typ history.Type, f history.F, v history.Value) *builder {
	b.t += 1000
	b.h = append(b.h, history.Op{Index: int64(len(b.h)), Time: b.t, Process: p, Type: typ, F: f, Value: v})
	return b
}

func ev(id, key string, version int64) history.Value {
	return history.Value{Event: id, Key: key, Version: version}
}

func (b *builder) commit(id, key string, version int64, typ history.Type) *builder {
	b.op("producer-1", history.Invoke, history.Commit, ev(id, key, version))
	return b.op("producer-1", typ, history.Commit, ev(id, key, version))
}

func (b *builder) publish(id string) *builder {
	return b.op("relay-0", history.OK, history.Publish, history.Value{Event: id})
}

func sv(id, sub string) history.Value { return history.Value{Event: id, Consumer: sub} }

func (b *builder) deliver(id, sub string) *builder {
	return b.op("consumer-"+sub, history.OK, history.Deliver, sv(id, sub))
}

func (b *builder) apply(id, sub string) *builder {
	b.op("consumer-"+sub, history.Invoke, history.Apply, sv(id, sub))
	return b.op("consumer-"+sub, history.OK, history.Apply, sv(id, sub))
}

func (b *builder) ack(id, sub string) *builder {
	return b.op("consumer-"+sub, history.OK, history.Ack, sv(id, sub))
}

// consume delivers, applies and acks.
func (b *builder) consume(id, sub string) *builder {
	return b.deliver(id, sub).apply(id, sub).ack(id, sub)
}

func (b *builder) drain() *builder {
	return b.op("harness", history.OK, history.Drain, history.Value{})
}

func (b *builder) finalRead(rows ...history.Value) *builder {
	b.op("harness", history.Invoke, history.FinalRead, history.Value{})
	for _, r := range rows {
		b.op("harness", history.OK, history.FinalRead, r)
	}
	return b.op("harness", history.OK, history.FinalRead, history.Value{})
}

func effect(id, sub string) history.Value {
	return history.Value{Table: history.TableEffects, Event: id, Consumer: sub}
}

// timed gives an effects row its commit_time.
func timed(v history.Value, commitTime int64) history.Value {
	v.CommitTime = commitTime
	return v
}

// found returns kind → subscription → event ids.
func found(as []Anomaly) map[Kind][]string {
	m := map[Kind][]string{}
	for _, a := range as {
		for _, e := range a.Events {
			m[a.Kind] = append(m[a.Kind], a.Subscription+":"+e)
		}
	}
	return m
}

func TestCheckEdges(t *testing.T) {
	g := Guarantees{Subscriptions: []string{"inv"}}
	tests := []struct {
		name      string
		h         history.History
		g         Guarantees
		valid     Validity
		anomalies map[Kind][]string
		shown     map[Kind][]string
	}{
		{name: "empty history", h: nil, valid: Unknown},
		{
			name:  "one event end to end",
			h:     new(builder).commit("e1", "k", 1, history.OK).publish("e1").consume("e1", "inv").drain().finalRead(effect("e1", "inv")).h,
			valid: Valid,
		},
		{
			name:  "info commit later observed",
			h:     new(builder).commit("e1", "k", 1, history.Info).publish("e1").consume("e1", "inv").drain().finalRead(effect("e1", "inv")).h,
			valid: Valid, shown: map[Kind][]string{Recovered: {":e1"}},
		},
		{
			name:  "invoked commit never completed, never observed",
			h:     new(builder).op("producer-1", history.Invoke, history.Commit, ev("e1", "k", 1)).drain().finalRead().h,
			valid: Unknown, shown: map[Kind][]string{InDoubt: {":e1"}}, // nothing was exercised
		},
		{
			name:  "info commit observed only by its outbox row",
			h:     new(builder).commit("e1", "k", 1, history.Info).drain().finalRead(history.Value{Table: history.TableOutbox, Event: "e1"}).h,
			valid: Invalid, anomalies: map[Kind][]string{Lost: {"inv:e1"}}, shown: map[Kind][]string{Recovered: {":e1"}},
		},
		{
			name:  "fail commit later observed (phantom)",
			h:     new(builder).commit("e1", "k", 1, history.Fail).publish("e1").consume("e1", "inv").drain().finalRead(effect("e1", "inv")).h,
			valid: Invalid, anomalies: map[Kind][]string{Unexpected: {"inv:e1"}},
		},
		{
			// An external consumer that writes no history: the final
			// read's effect rows, in applied order, are all there is.
			name: "ledger only, in order",
			h: new(builder).commit("e1", "k", 1, history.OK).commit("e2", "k", 2, history.OK).drain().
				finalRead(effect("e1", "inv"), effect("e2", "inv")).h,
			valid: Valid,
		},
		{
			// Ordered by commit_time, not row order: e2 committed first.
			name: "ledger only, version 1 committed after version 2",
			g:    Guarantees{Order: PerKey, Subscriptions: []string{"inv"}},
			h: new(builder).commit("e1", "k", 1, history.OK).commit("e2", "k", 2, history.OK).drain().
				finalRead(timed(effect("e1", "inv"), 9000), timed(effect("e2", "inv"), 8000)).h,
			valid: Invalid, anomalies: map[Kind][]string{OrderRegression: {"inv:e1"}, Gap: {"inv:e1"}},
		},
		{
			name: "ledger only, duplicate effect",
			h: new(builder).commit("e1", "k", 1, history.OK).drain().
				finalRead(effect("e1", "inv"), effect("e1", "inv")).h,
			valid: Invalid, anomalies: map[Kind][]string{DuplicateEffect: {"inv:e1"}},
		},
		{
			// With apply ops, their timing orders the subscription and
			// the ledger's row order is not used.
			name: "apply ops win over ledger order",
			g:    Guarantees{Order: PerKey, Subscriptions: []string{"inv"}},
			h: new(builder).commit("e1", "k", 1, history.OK).commit("e2", "k", 2, history.OK).
				consume("e1", "inv").consume("e2", "inv").drain().
				finalRead(effect("e2", "inv"), effect("e1", "inv")).h,
			valid: Valid,
		},
		{
			name:  "effect for an event never attempted",
			h:     new(builder).drain().finalRead(effect("ghost", "inv")).h,
			valid: Invalid, anomalies: map[Kind][]string{Unexpected: {"inv:ghost"}},
		},
		{
			name:  "duplicate delivery but single effect",
			h:     new(builder).commit("e1", "k", 1, history.OK).publish("e1").deliver("e1", "inv").deliver("e1", "inv").apply("e1", "inv").ack("e1", "inv").drain().finalRead(effect("e1", "inv")).h,
			valid: Valid, shown: map[Kind][]string{Redelivered: {"inv:e1"}},
		},
		{
			name:  "effect with no delivery recorded",
			h:     new(builder).commit("e1", "k", 1, history.OK).drain().finalRead(effect("e1", "inv")).h,
			valid: Valid,
		},
		{
			name:  "declared subscription applied nothing",
			h:     new(builder).commit("e1", "k", 1, history.OK).commit("e2", "k", 2, history.OK).publish("e1").drain().finalRead().h,
			valid: Invalid, anomalies: map[Kind][]string{Lost: {"inv:e1", "inv:e2"}},
		},
		{
			name:  "double effect",
			h:     new(builder).commit("e1", "k", 1, history.OK).publish("e1").consume("e1", "inv").deliver("e1", "inv").apply("e1", "inv").drain().finalRead(effect("e1", "inv"), effect("e1", "inv")).h,
			valid: Invalid, anomalies: map[Kind][]string{DuplicateEffect: {"inv:e1"}}, shown: map[Kind][]string{Redelivered: {"inv:e1"}},
		},
		{
			name:  "double effect allowed at-least-once",
			g:     Guarantees{Loss: None, DuplicateEffects: Allowed, Subscriptions: []string{"inv"}},
			h:     new(builder).commit("e1", "k", 1, history.OK).consume("e1", "inv").apply("e1", "inv").drain().finalRead(effect("e1", "inv"), effect("e1", "inv")).h,
			valid: Valid, anomalies: map[Kind][]string{DuplicateEffect: {"inv:e1"}},
		},
		{
			name:  "drain timed out",
			h:     new(builder).commit("e1", "k", 1, history.OK).op("harness", history.Info, history.Drain, history.Value{}).finalRead().h,
			valid: Unknown, shown: map[Kind][]string{Unseen: {"inv:e1"}},
		},
		{
			name:  "final read never finished",
			h:     new(builder).commit("e1", "k", 1, history.OK).consume("e1", "inv").drain().op("harness", history.Invoke, history.FinalRead, history.Value{}).h,
			valid: Unknown,
		},
		{
			name: "order regression",
			g:    Guarantees{Order: PerKey, Subscriptions: []string{"inv"}},
			h: new(builder).commit("e1", "k", 1, history.OK).commit("e2", "k", 2, history.OK).
				consume("e2", "inv").consume("e1", "inv").drain().finalRead(effect("e2", "inv"), effect("e1", "inv")).h,
			valid: Invalid, anomalies: map[Kind][]string{OrderRegression: {"inv:e1"}, Gap: {"inv:e1"}},
		},
		{
			name: "concurrent applies are no regression",
			g:    Guarantees{Order: PerKey, Subscriptions: []string{"inv"}},
			h: new(builder).commit("e1", "k", 1, history.OK).commit("e2", "k", 2, history.OK).
				op("c1", history.Invoke, history.Apply, sv("e1", "inv")).op("c2", history.Invoke, history.Apply, sv("e2", "inv")).
				op("c2", history.OK, history.Apply, sv("e2", "inv")).op("c1", history.OK, history.Apply, sv("e1", "inv")).drain().finalRead(effect("e2", "inv"), effect("e1", "inv")).h,
			valid: Valid,
		},
		{
			name: "stale skip is a gap",
			g:    Guarantees{Gaps: None, Subscriptions: []string{"inv"}},
			h: new(builder).commit("e1", "k", 1, history.OK).commit("e2", "k", 2, history.OK).
				consume("e2", "inv").deliver("e1", "inv").op("consumer-inv", history.OK, history.SkipStale, sv("e1", "inv")).drain().finalRead(effect("e2", "inv")).h,
			valid: Invalid, anomalies: map[Kind][]string{Gap: {"inv:e1"}}, shown: map[Kind][]string{StaleSkipped: {"inv:e1"}},
		},
		{
			name: "poison handling",
			h: new(builder).op("producer-1", history.OK, history.Commit, history.Value{Event: "p1", Poison: true}).
				op("producer-1", history.OK, history.Commit, history.Value{Event: "p2", Poison: true}).
				op("producer-1", history.OK, history.Commit, history.Value{Event: "e3"}).
				op("consumer-inv", history.OK, history.DLQ, sv("p1", "inv")).
				op("consumer-inv", history.OK, history.DLQ, sv("e3", "inv")).drain().finalRead().h,
			valid: Invalid, anomalies: map[Kind][]string{DLQUnaccounted: {"inv:p2"}, WronglyDeadLettered: {"inv:e3"}},
		},
		{
			name:  "subscriptions from a setup op",
			g:     Guarantees{},
			h:     new(builder).op("harness", history.OK, history.Setup, history.Value{Subscriptions: []string{"a", "b"}}).commit("e1", "k", 1, history.OK).consume("e1", "a").drain().finalRead(effect("e1", "a")).h,
			valid: Invalid, anomalies: map[Kind][]string{Lost: {"b:e1"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gg := g
			if tt.g.Subscriptions != nil || tt.g.Loss != "" {
				gg = tt.g
			}
			if tt.name == "subscriptions from a setup op" {
				gg = tt.g
			}
			r := Check(tt.h, Options{Guarantees: gg})
			wantOutcome(t, r, tt.valid, tt.anomalies, tt.shown)
		})
	}
}

// wantOutcome checks r's verdict, and the anomalies and shown kinds found
// (as found returns them).
func wantOutcome(t *testing.T, r *Result, valid Validity, anomalies, shown map[Kind][]string) {
	t.Helper()
	if r.Valid != valid {
		t.Errorf("valid = %s, want %s (reasons %v)", r.Valid, valid, r.Reasons)
	}
	if got := found(r.Anomalies); !equalFound(got, anomalies) {
		t.Errorf("anomalies = %v, want %v", got, anomalies)
	}
	if got := found(r.Shown); !equalFound(got, shown) {
		t.Errorf("shown = %v, want %v", got, shown)
	}
}

func equalFound(a, b map[Kind][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

func TestBoundaryAttribution(t *testing.T) {
	b := new(builder).
		commit("stuck", "k1", 1, history.OK).
		commit("confirmed", "k2", 1, history.OK).publish("confirmed").
		commit("delivered", "k3", 1, history.OK).publish("delivered").deliver("delivered", "inv").
		commit("ackfirst", "k4", 1, history.OK).publish("ackfirst").deliver("ackfirst", "inv").ack("ackfirst", "inv").
		drain().finalRead()
	r := Check(b.h, Options{Guarantees: Guarantees{Subscriptions: []string{"inv"}}})
	if len(r.Anomalies) != 1 {
		t.Fatalf("anomalies = %+v", r.Anomalies)
	}
	got := map[string]Boundary{}
	for _, ex := range r.Anomalies[0].Examples {
		got[ex.Event] = ex.Boundary
		if len(ex.Ops) == 0 {
			t.Errorf("example %s has no ops", ex.Event)
		}
	}
	want := map[string]Boundary{"stuck": Committed, "confirmed": Published, "delivered": Delivered, "ackfirst": Acked}
	for e, w := range want {
		if got[e] != w {
			t.Errorf("%s: boundary %q, want %q", e, got[e], w)
		}
	}
	if len(r.Anomalies[0].Boundaries) != 4 {
		t.Errorf("boundaries = %v", r.Anomalies[0].Boundaries)
	}
}

func TestCheckFilesCutMidLine(t *testing.T) {
	b := new(builder).commit("e1", "k", 1, history.OK).consume("e1", "inv").drain().finalRead(effect("e1", "inv"))
	var buf []byte
	for _, op := range b.h {
		buf = append(op.AppendJSON(buf), '\n')
	}
	p := filepath.Join(t.TempDir(), "h.jsonl")
	// Cut the closing op of the final read in half.
	cut := bytes.LastIndexByte(buf[:len(buf)-1], '\n') + 30
	os.WriteFile(p, buf[:cut], 0o644)
	r, err := CheckFiles([]string{p}, Options{Guarantees: Guarantees{Subscriptions: []string{"inv"}}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Valid != Unknown || r.Facts.FinalRead != "incomplete" || len(r.Facts.Cuts) != 1 {
		t.Errorf("valid %s, final read %s, cuts %v", r.Valid, r.Facts.FinalRead, r.Facts.Cuts)
	}
	// The whole file is valid, and CheckFiles agrees with Check byte for byte.
	os.WriteFile(p, buf, 0o644)
	r, err = CheckFiles([]string{p}, Options{Guarantees: Guarantees{Subscriptions: []string{"inv"}}})
	if err != nil || r.Valid != Valid {
		t.Fatalf("CheckFiles = %v, %v", r, err)
	}
	want, _ := json.Marshal(Check(b.h, Options{Guarantees: Guarantees{Subscriptions: []string{"inv"}}}))
	got, _ := json.Marshal(r)
	if !bytes.Equal(got, want) {
		t.Errorf("CheckFiles and Check differ:\n%s\n%s", got, want)
	}
}

func TestParseGuarantees(t *testing.T) {
	g, err := ParseGuarantees("at-least-once,order=per-key,subscriptions=b+a")
	if err != nil {
		t.Fatal(err)
	}
	if g.DuplicateEffects != Allowed || g.Order != PerKey || strings.Join(g.Subscriptions, ",") != "a,b" {
		t.Errorf("got %+v", g)
	}
	for _, bad := range []string{"exactly-twice", "loss=maybe", "colour=red"} {
		if _, err := ParseGuarantees(bad); err == nil {
			t.Errorf("ParseGuarantees(%q) succeeded", bad)
		}
	}
}

func TestPresets(t *testing.T) {
	names := PresetNames()
	if len(names) == 0 || !slices.IsSorted(names) {
		t.Fatalf("PresetNames() = %v, want a sorted, non-empty list", names)
	}
	for _, name := range names {
		g, ok := Preset(name)
		if !ok {
			t.Errorf("Preset(%q) not found, though PresetNames lists it", name)
			continue
		}
		if err := g.Validate(); err != nil {
			t.Errorf("Preset(%q): %v", name, err)
		}
	}
	if eo, _ := Preset("effectively-once"); eo.Loss != None || eo.DuplicateEffects != None {
		t.Errorf("effectively-once = %+v, want no loss and no duplicate effects", eo)
	}
	if _, ok := Preset("exactly-twice"); ok {
		t.Error("Preset found an unknown name")
	}
}

func TestCheckFilesUnorderedFallsBack(t *testing.T) {
	// A file whose times go backwards is read whole and sorted.
	b := new(builder).commit("e1", "k", 1, history.OK).consume("e1", "inv").drain().finalRead(effect("e1", "inv"))
	h := slices.Clone(b.h)
	h[0], h[1] = h[1], h[0]
	var buf []byte
	for _, op := range h {
		buf = append(op.AppendJSON(buf), '\n')
	}
	p := filepath.Join(t.TempDir(), "h.jsonl")
	os.WriteFile(p, buf, 0o644)
	opts := Options{Guarantees: Guarantees{Subscriptions: []string{"inv"}}}
	r, err := CheckFiles([]string{p}, opts)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(r)
	want, _ := json.Marshal(Check(history.Merge(h), opts))
	if !bytes.Equal(got, want) || r.Valid != Valid {
		t.Errorf("got %s\nwant %s", got, want)
	}
}

func TestRunLevelOpsNamingAnEventCountOnce(t *testing.T) {
	b := new(builder)
	for i := range 20 {
		id := "e" + strconv.Itoa(i)
		b.commit(id, "k"+id, 1, history.OK).consume(id, "inv").
			op("nemesis", history.OK, history.Crash, history.Value{Event: id, Target: "consumer-inv"}).
			op("nemesis", history.OK, history.Restart, history.Value{Event: id, Target: "consumer-inv"})
	}
	var rows []history.Value
	for i := range 20 {
		rows = append(rows, effect("e"+strconv.Itoa(i), "inv"))
	}
	b.drain().finalRead(rows...)
	for _, n := range []int{1, 2, 3} {
		r := Check(b.h, Options{Guarantees: Guarantees{Subscriptions: []string{"inv"}}, Shards: n})
		if r.Counts.Crashes != 20 || r.Counts.Restarts != 20 || r.Valid != Valid {
			t.Errorf("%d shards: crashes %d, restarts %d, %s", n, r.Counts.Crashes, r.Counts.Restarts, r.Valid)
		}
	}
}
