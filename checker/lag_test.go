package checker

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/deliverycheck/deliverycheck/history"
)

// kafkaRound is one sampling round of a subscription on three
// partitions, a millisecond apart from t.
func kafkaRound(sub string, t int64, lags ...int64) []lagPoint {
	var out []lagPoint
	for i, l := range lags {
		out = append(out, lagPoint{sub: sub, target: "run." + sub, topic: "run.events", partition: int64(i), t: t + int64(i)*int64(time.Millisecond), lag: l})
	}
	return out
}

func samplesOf(s LagSeries) [][2]int64 { return s.Samples }

// A total sums each round's partitions, at the round's last sample; a
// partition a round missed keeps its last figure; dead-letter samples
// stay out of it.
func TestLagTotals(t *testing.T) {
	ms := int64(time.Millisecond)
	var pts []lagPoint
	pts = append(pts, kafkaRound("inventory", 0, 1, 2, 3)...)
	pts = append(pts, kafkaRound("email", 0, 5)...)
	pts = append(pts, kafkaRound("inventory", 500*ms, 10, 20, 30)...)
	pts = append(pts, kafkaRound("inventory", 1000*ms, 7)...) // partitions 1 and 2 not answered
	pts = append(pts, lagPoint{sub: "inventory", target: "run.inventory.dlq", dlq: true, t: 1001 * ms, lag: 99})
	pts = append(pts, kafkaRound("inventory", 1500*ms, 0, 0, 0)...)
	got := lagTotals(pts)
	if len(got) != 2 || got[0].Subscription != "email" || got[1].Subscription != "inventory" {
		t.Fatalf("totals %+v", got)
	}
	want := [][2]int64{{2 * ms, 6}, {502 * ms, 60}, {1000 * ms, 57}, {1502 * ms, 0}}
	if !reflect.DeepEqual(samplesOf(got[1]), want) {
		t.Errorf("inventory's total %v, want %v", got[1].Samples, want)
	}
	if got[1].Max != 60 || got[1].MaxNS != 502*ms || got[1].Partition != nil || got[1].Target != "run.inventory" {
		t.Errorf("inventory's total %+v", got[1])
	}
	series, dlq := lagSeries(pts)
	if len(series) != 4 || len(dlq) != 1 || dlq[0].Max != 99 {
		t.Fatalf("series %+v, dlq %+v", series, dlq)
	}
	if series[0].Subscription != "email" || *series[1].Partition != 0 || *series[3].Partition != 2 || len(series[1].Samples) != 4 {
		t.Errorf("series %+v", series)
	}
}

// The alert fires once every sample has been over the threshold for its
// duration, resolves at the first sample at or under it, fires again
// after, and is still firing when the samples end over it.
func TestLagFirings(t *testing.T) {
	ms := int64(time.Millisecond)
	s := LagSeries{Subscription: "inventory", Target: "run.inventory"}
	for i, v := range []int64{0, 150, 180, 120, 300, 90, 200, 100, 150, 160, 170, 110} {
		s.add(int64(i)*500*ms, v)
	}
	got := lagFirings(s, 100, int64(time.Second))
	want := []LagFiring{
		{Subscription: "inventory", Target: "run.inventory", PendingNS: 500 * ms, FiredNS: 1500 * ms, ResolvedNS: 2500 * ms, Peak: 300},
		{Subscription: "inventory", Target: "run.inventory", PendingNS: 4000 * ms, FiredNS: 5000 * ms, Peak: 170},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("firings %+v\nwant %+v", got, want)
	}
	// For 0: firing at the first sample over; the 200 at 3s alone fires.
	if got := lagFirings(s, 100, 0); len(got) != 3 || got[1].FiredNS != 3000*ms || got[1].ResolvedNS != 3500*ms {
		t.Errorf("for 0: %+v", got)
	}
	if got := lagFirings(s, 1000, 0); len(got) != 0 {
		t.Errorf("never over: %+v", got)
	}
	if d := want[0].Describe(); d != "would have fired at 1.500s and resolved at 2.500s on inventory (peak 300)" {
		t.Errorf("describe: %s", d)
	}
}

// Capping keeps the highest sample of each run, so a spike survives.
func TestCapSamples(t *testing.T) {
	var s [][2]int64
	for i := range 10 {
		s = append(s, [2]int64{int64(i), 0})
	}
	s[7][1] = 5
	got := CapSamples(s, 4)
	want := [][2]int64{{0, 0}, {3, 0}, {7, 5}, {9, 0}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("capped %v, want %v", got, want)
	}
	if got := CapSamples(s, 10); len(got) != 10 {
		t.Errorf("no cap needed: %v", got)
	}
}

// Lag ops in a history come out as the lag section, with the alert the
// options ask for; a history without any has none.
func TestCheckLag(t *testing.T) {
	ms := int64(time.Millisecond)
	h := history.History{}
	add := func(op history.Op) {
		op.Index = int64(len(h))
		op.Process = "harness"
		h = append(h, op)
	}
	add(history.Op{Type: history.OK, F: history.Setup, Time: 0, Value: history.Value{Subscriptions: []string{"inventory"}}})
	for i, v := range []int64{50, 250, 400, 80} {
		add(history.Op{Type: history.OK, F: history.Lag, Time: int64(i) * 500 * ms, Value: history.Value{Consumer: "inventory", Target: "run.inventory", Lag: v}})
		add(history.Op{Type: history.OK, F: history.Lag, Time: int64(i)*500*ms + 1, Value: history.Value{Consumer: "inventory", Target: "run.inventory.dlq", Detail: history.DetailDLQ, Lag: int64(i)}})
	}
	add(history.Op{Type: history.Fail, F: history.Lag, Time: 2100 * ms, Value: history.Value{Consumer: "inventory", Error: "connection refused"}})
	alert := &LagAlert{Threshold: 100, For: 500 * time.Millisecond}
	r := Check(h, Options{LagAlert: alert})
	l := r.Lag
	if l == nil || len(l.Series) != 1 || len(l.Totals) != 1 || len(l.DLQ) != 1 || l.Failures != 1 {
		t.Fatalf("lag %+v", l)
	}
	if l.Series[0].Max != 400 || l.Series[0].Partition != nil || l.DLQ[0].Max != 3 {
		t.Errorf("series %+v, dlq %+v", l.Series[0], l.DLQ[0])
	}
	want := []LagFiring{{Subscription: "inventory", Target: "run.inventory", PendingNS: 500 * ms, FiredNS: 1000 * ms, ResolvedNS: 1500 * ms, Peak: 400}}
	if !reflect.DeepEqual(l.Alerts, want) {
		t.Errorf("alerts %+v, want %+v", l.Alerts, want)
	}
	if _, err := json.Marshal(r); err != nil {
		t.Fatal(err)
	}
	if r := Check(h[:1], Options{}); r.Lag != nil {
		t.Errorf("no lag op, lag %+v", r.Lag)
	}
}

// check --lag-alert's form: threshold/for.
func TestParseLagAlert(t *testing.T) {
	a, err := ParseLagAlert("100/1.5s")
	if err != nil || *a != (LagAlert{Threshold: 100, For: 1500 * time.Millisecond}) {
		t.Errorf("100/1.5s: %+v, %v", a, err)
	}
	if a.String() != "lag > 100 for 1.5s" {
		t.Errorf("rule %q", a.String())
	}
	for _, bad := range []string{"100", "x/1s", "-1/1s", "100/fast", "100/-1s"} {
		if _, err := ParseLagAlert(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// lagFirings agrees with the definition, sample by sample: a sample is
// in a firing interval exactly when it and every sample back to some
// earlier one at least `for` before it are over the threshold.
func TestLagFiringsProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 40).Draw(t, "samples")
		threshold := rapid.Int64Range(0, 10).Draw(t, "threshold")
		forNS := rapid.Int64Range(0, 5).Draw(t, "for")
		var s LagSeries
		tm := int64(0)
		for i := range n {
			tm += rapid.Int64Range(1, 3).Draw(t, fmt.Sprintf("dt%d", i))
			s.add(tm, rapid.Int64Range(0, 20).Draw(t, fmt.Sprintf("lag%d", i)))
		}
		fired := lagFirings(s, threshold, forNS)
		for i, smp := range s.Samples {
			want := false
			for j := i; j >= 0 && s.Samples[j][1] > threshold; j-- {
				if smp[0]-s.Samples[j][0] >= forNS {
					want = true
					break
				}
			}
			got := slices.ContainsFunc(fired, func(f LagFiring) bool {
				return f.FiredNS <= smp[0] && (f.ResolvedNS == 0 || smp[0] < f.ResolvedNS)
			})
			if got != want {
				t.Fatalf("sample %d %v: firing %v, want %v (alerts %+v)", i, smp, got, want, fired)
			}
		}
		for _, f := range fired {
			if f.PendingNS > f.FiredNS || (f.ResolvedNS != 0 && f.ResolvedNS <= f.FiredNS) || f.Peak <= threshold {
				t.Fatalf("interval %+v", f)
			}
		}
	})
}
