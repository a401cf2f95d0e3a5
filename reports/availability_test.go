package reports

import (
	"bytes"
	"strings"
	"testing"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/history"
)

// availResult is a clean fixture result with three fault windows, one
// per recovery outcome, the first aimed at a hostile target.
func availResult(t *testing.T) *checker.Result {
	t.Helper()
	res := fixture{drain: history.OK, clean: true}.result()
	f := func(v float64) *float64 { return &v }
	n := func(v int64) *int64 { return &v }
	res.Faults = []checker.Fault{
		{Kind: "kill", Target: xssAttr, StartNS: 4e9, EndNS: 7e9, Outcome: checker.FaultTookEffect, TookEffect: true},
		{Kind: "pause", Target: "kafka-1", StartNS: 8e9, EndNS: 9e9, Outcome: checker.FaultNoEffect},
		{Kind: "isolate", Target: "kafka-1", StartNS: 10e9, EndNS: 12e9, Outcome: checker.FaultTookEffect, TookEffect: true},
		{Kind: "failover", Target: "postgres", StartNS: 5e8, EndNS: 6e8, Outcome: checker.FaultTookEffect, TookEffect: true},
	}
	res.Availability = checker.Availability{TickNS: 1e8, WindowNS: 1e9, BaselineNS: 60e9, SustainNS: 1e9, RecoveryLimitNS: 600e9, RecoveredFraction: 0.8,
		Windows: []checker.FaultAvailability{
			{Fault: 0,
				Commits: checker.RateChange{NormalPerS: f(50), During: 0, DuringPerS: f(0), Recovery: checker.RecoveryRecovered, RecoveryNS: n(8e8)},
				Applies: checker.RateChange{NormalPerS: f(50), During: 3, DuringPerS: f(1), Recovery: checker.RecoveryRecovered, RecoveryNS: n(2e9)}},
			{Fault: 2,
				Commits: checker.RateChange{NormalPerS: f(50), During: 100, DuringPerS: f(50), Recovery: checker.RecoveryRecovered, RecoveryNS: n(0)},
				Applies: checker.RateChange{NormalPerS: f(50), During: 0, DuringPerS: f(0), Recovery: checker.RecoveryNotRecovered, SearchedToNS: n(17.5e9)}},
			{Fault: 3,
				Commits: checker.RateChange{During: 5, DuringPerS: f(50), Recovery: checker.RecoveryNoBaseline},
				Applies: checker.RateChange{During: 5, DuringPerS: f(50), Recovery: checker.RecoveryNoBaseline}},
		}}
	return res
}

// The availability table says each window's rates and recovery in words,
// never a number for a rate that did not recover or had no baseline; the
// throughput plot has a band from each heal to its recovery, none for a
// window without a baseline; hostile targets are escaped.
func TestAvailabilityView(t *testing.T) {
	res := availResult(t)
	v := newView(fixture{drain: history.OK, clean: true}.run(), res)
	want := []availRow{
		{Fault: "kill " + xssAttr, Window: "4.000s → 7.000s", Commits: "50.0/s → 0.0/s", CommitsBack: "back to normal in 0.8s", CommitsOK: true,
			Applies: "50.0/s → 1.0/s", AppliesBack: "back to normal in 2.0s", AppliesOK: true},
		{Fault: "isolate kafka-1", Window: "10.000s → 12.000s", Commits: "50.0/s → 50.0/s", CommitsBack: "back to normal in 0.0s", CommitsOK: true,
			Applies: "50.0/s → 0.0/s", AppliesBack: "did not get back to normal (measured to 17.500s, where its ops end)"},
		{Fault: "failover postgres", Window: "0.500s → 0.600s", Commits: "– → 50.0/s", CommitsBack: "no baseline (no fault-free second before the fault)", CommitsOK: true,
			Applies: "– → 50.0/s", AppliesBack: "no baseline (no fault-free second before the fault)", AppliesOK: true},
	}
	if len(v.Availability) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(v.Availability), len(want), v.Availability)
	}
	for i := range want {
		if v.Availability[i] != want[i] {
			t.Errorf("row %d:\n got %+v\nwant %+v", i, v.Availability[i], want[i])
		}
	}
	var through *plotView
	for i := range v.Plots {
		if v.Plots[i].ID == "throughput" {
			through = &v.Plots[i]
		} else if len(v.Plots[i].Recoveries) > 0 {
			t.Errorf("plot %s has recovery bands", v.Plots[i].ID)
		}
	}
	if through == nil || len(through.Recoveries) != 2 {
		t.Fatalf("throughput plot recoveries: %+v", through)
	}
	if l := through.Recoveries[0].Label; l != "back in 2.0s" {
		t.Errorf("first band %q, want the later of the two recoveries", l)
	}
	if l := through.Recoveries[1].Label; l != "not back" {
		t.Errorf("second band %q, want not back", l)
	}
	var b bytes.Buffer
	if err := HTML(&b, fixture{drain: history.OK, clean: true}.run(), res); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if m := rawImgOrSVG.FindString(page); m != "" {
		t.Errorf("planted element in the page: %q", m)
	}
	if !strings.Contains(page, "kill &#34;&gt;&lt;img src=x onerror=alert(1)&gt;") || !strings.Contains(page, "Availability per fault window") {
		t.Errorf("availability table missing or not escaped:\n%s", grepLines(page, "kill"))
	}
}
