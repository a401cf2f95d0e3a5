package checker

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/history"
)

// The backlog of stallRun: e3..e5 committed at 3s..5s wait until 10s, so
// the oldest waits 7s; with max-backlog-age 5s that is one stretch over
// it, fatal; without, or with 8s, only measured.
func TestBacklog(t *testing.T) {
	h := stallRun()
	r := Check(h, Options{})
	if r.Valid != Valid {
		t.Fatalf("without max-backlog-age: %s %v", r.Valid, r.Reasons)
	}
	if len(r.Backlog) != 1 {
		t.Fatalf("backlog %+v", r.Backlog)
	}
	b := r.Backlog[0]
	// Commits are ok at 1s+1 .. 5s+1; e1 and e2 settle 99ns later.
	want := SubscriptionBacklog{Subscription: "inventory", Measured: true, MaxPending: 3, MaxPendingNS: 5*sec + 1,
		MaxAgeNS: 7*sec - 1, MaxAgeAtNS: 10 * sec, Waits: 5, WaitP50NS: 5*sec - 1, WaitP99NS: 7*sec - 1, WaitMaxNS: 7*sec - 1}
	if b != want {
		t.Errorf("backlog\n %+v, want\n %+v", b, want)
	}
	// Buckets of a second: none pending at the ends of the first three
	// (e3 commits at 3s+1), then e3 is 1s-1ns old at 4s, ... 6s-1ns at
	// 9s, and settled at 10s.
	age := r.Series.OldestAge
	if len(age) != 1 || age[0].Subscription != "inventory" {
		t.Fatalf("oldest age %+v", age)
	}
	if got := age[0].Values[:11]; !slices.Equal(got, []int64{0, 0, 0, sec - 1, 2*sec - 1, 3*sec - 1, 4*sec - 1, 5*sec - 1, 6*sec - 1, 0, 0}) {
		t.Errorf("oldest age curve %v", got)
	}

	g, err := ParseGuarantees("effectively-once,max-backlog-age=5s")
	if err != nil {
		t.Fatal(err)
	}
	r = Check(h, Options{Guarantees: g})
	if r.Valid != Invalid {
		t.Fatalf("max-backlog-age 5s: %s %v", r.Valid, r.Reasons)
	}
	i := slices.IndexFunc(r.Anomalies, func(a Anomaly) bool { return a.Kind == BacklogAge })
	if i < 0 {
		t.Fatalf("no backlog-age anomaly: %+v", r.Anomalies)
	}
	a := r.Anomalies[i]
	if !a.Fatal || a.Count != 1 || a.Subscription != "inventory" || !slices.Equal(a.Events, []string{"e3"}) || len(a.Examples) != 1 || r.Backlog[0].Over != 1 {
		t.Fatalf("anomaly %+v", a)
	}
	for _, want := range []string{"oldest unapplied event waited 7s (at 10.000s)", "over max-backlog-age 5s", "from 8.000s to 10.000s"} {
		if !strings.Contains(a.Examples[0].Detail, want) {
			t.Errorf("detail %q lacks %q", a.Examples[0].Detail, want)
		}
	}
	if !slices.Contains(r.Reasons, "1 backlog-age in inventory") {
		t.Errorf("reasons %q", r.Reasons)
	}
	g.MaxBacklogAge = 8 * time.Second
	if r := Check(h, Options{Guarantees: g}); r.Valid != Valid {
		t.Errorf("max-backlog-age 8s: %s %v", r.Valid, r.Reasons)
	}
}

// Effect rows only: the backlog is not measured, and with
// max-backlog-age the run is unknown.
func TestBacklogUnmeasured(t *testing.T) {
	b := new(builder).setup([]string{"inventory"}, nil)
	b.at(1*sec, "producer-1", history.OK, history.Commit, ev("e1", "k", 1))
	b.at(2*sec, "harness", history.OK, history.Drain, history.Value{})
	h := b.finalRead(effect("e1", "inventory")).h
	r := Check(h, Options{Guarantees: Guarantees{MaxBacklogAge: time.Second}})
	if r.Backlog[0].Measured || r.Valid != Unknown || !slices.ContainsFunc(r.Reasons, func(s string) bool { return strings.HasPrefix(s, "backlog age in inventory not judged") }) {
		t.Errorf("backlog %+v: %s %q", r.Backlog, r.Valid, r.Reasons)
	}
	if r := Check(h, Options{}); r.Valid != Valid {
		t.Errorf("without max-backlog-age: %s %q", r.Valid, r.Reasons)
	}
}

// The consumer's deliveries in flight come out per process in the
// result and the series.
func TestBacklogInFlight(t *testing.T) {
	b := new(builder).setup([]string{"inventory"}, []string{"inventory"})
	for i, id := range []string{"e1", "e2", "e3"} {
		b.at(int64(i+1)*sec/10, "producer-1", history.OK, history.Commit, ev(id, "k"+id, 1))
	}
	for _, id := range []string{"e1", "e2", "e3"} {
		b.at(sec, "consumer-inventory-0", history.OK, history.Deliver, sv(id, "inventory"))
	}
	for i, id := range []string{"e1", "e2", "e3"} {
		b.at(2*sec+int64(i), "consumer-inventory-0", history.OK, history.Apply, kv(id, "inventory", "k"+id, 1))
	}
	b.at(3*sec, "harness", history.OK, history.Drain, history.Value{})
	h := b.finalRead(effect("e1", "inventory"), effect("e2", "inventory"), effect("e3", "inventory")).h
	r := Check(h, Options{Shards: 3})
	if want := []ConsumerBacklog{{Process: "consumer-inventory-0", Subscription: "inventory", MaxInFlight: 3}}; !slices.Equal(r.BacklogConsumers, want) {
		t.Errorf("consumers %+v", r.BacklogConsumers)
	}
	if f := r.Series.InFlight; len(f) != 1 || f[0].Process != "consumer-inventory-0" || !slices.Equal(f[0].Values[:3], []int64{0, 3, 3}) {
		t.Errorf("in flight %+v", f)
	}
}

func TestBacklogSummary(t *testing.T) {
	r := Check(stallRun(), Options{})
	if got, want := BacklogSummary(r.Backlog), "inventory oldest 7s (at 10.000s), 3 pending at most, waits p50 5s p99 7s"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
}
