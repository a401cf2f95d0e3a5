package runner

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/deliverycheck/deliverycheck/reports"
	"github.com/deliverycheck/deliverycheck/scenarios"
)

// checkOperations holds the matrix's assertions about operating the
// pipeline (issue 25), one function per section, for every built-in.
func checkOperations(t *testing.T, s scenarios.Scenario, o *Outcome) {
	t.Helper()
	checkLag(t, s, o)
}

// checkLag: every run sampled the lag of each subscription it started
// consumers for, and wrote it to lag.om.txt; a built-in that declares a
// lag alert (the backpressure ones) is there to show it firing.
func checkLag(t *testing.T, s scenarios.Scenario, o *Outcome) {
	t.Helper()
	r := o.Result
	if r == nil {
		return
	}
	if r.Lag == nil {
		t.Error("no lag section: the lag was not sampled")
		return
	}
	sampled := map[string]int{}
	for _, tot := range r.Lag.Totals {
		sampled[tot.Subscription] = len(tot.Samples)
	}
	for _, sub := range s.Workload.Subscriptions {
		if sampled[sub] == 0 && !slices.Contains(s.Workload.LateSubscriptions, sub) {
			t.Errorf("no lag sample of %s (%d stretches without an answer)", sub, r.Lag.Failures)
		}
	}
	om, err := os.ReadFile(filepath.Join(o.Dir, reports.LagFile))
	if err != nil {
		t.Error(err)
	} else if !strings.Contains(string(om), reports.MetricConsumerLag+"{") {
		t.Errorf("%s has no %s sample", reports.LagFile, reports.MetricConsumerLag)
	}
	if s.Observability.LagAlert != nil && len(r.Lag.Alerts) == 0 {
		var peaks []string
		for _, tot := range r.Lag.Totals {
			peaks = append(peaks, tot.Subscription+" "+strconv.FormatInt(tot.Max, 10))
		}
		t.Errorf("the scenario's lag alert (%s) never fired: peak totals %s", r.Lag.Alert, strings.Join(peaks, ", "))
	}
}
