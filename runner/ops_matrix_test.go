package runner

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/deliverycheck/deliverycheck/pipeline/relay"
	"github.com/deliverycheck/deliverycheck/reports"
	"github.com/deliverycheck/deliverycheck/scenarios"
)

// checkOperations asserts, of one built-in's run in the detection
// matrix, what issue 25's figures must show beyond its verdict: each
// part's check is its own function.
func checkOperations(t *testing.T, s scenarios.Scenario, o *Outcome) {
	t.Helper()
	checkTraces(t, s, o)
	checkLag(t, s, o)
}

// checkTraces: a run of the built-in relay and consumers keeps one trace
// per committed event from the producer to every delivery, unless the
// scenario asks for a new trace per publish attempt, when a republished
// event must show up in more than one.
func checkTraces(t *testing.T, s scenarios.Scenario, o *Outcome) {
	t.Helper()
	r := o.Result
	builtin := s.Variants.Relay != relay.Debezium && len(s.System.Transaction) == 0 && s.System.Relay == nil && s.System.Consumer == nil && len(s.System.Consumers) == 0 && s.Stage == nil
	if !builtin || r.Counts.Committed == 0 {
		return
	}
	tr := r.Traces
	if tr == nil {
		t.Error("traces: no op carried a trace")
		return
	}
	t.Logf("traces: %d events, %d propagated, %d broken, %d dropped, %d untraced", tr.Events, tr.Propagated, tr.Broken, tr.Dropped, tr.Untraced)
	if s.Observability.Traces == relay.TracesPerAttempt {
		if tr.Broken == 0 {
			t.Error("traces: per-attempt traces, yet no event was in more than one trace")
		}
		return
	}
	if tr.Propagated != tr.Events {
		t.Errorf("traces: %d of %d committed events kept one trace end to end (examples %v)", tr.Propagated, tr.Events, tr.Examples)
	}
}

// lagAlerted are the built-ins whose lag must make their alert fire: the
// backpressure ones, whose producers outrun the consumers for a while.
var lagAlerted = []string{"rabbitmq-backpressure", "kafka-backpressure", "kafka-kill-workers"}

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
	if slices.Contains(lagAlerted, s.Name) && s.Observability.LagAlert == nil {
		t.Error("declares no lag alert (observability.lag_alert): its burst is there to make one fire")
	}
	if s.Observability.LagAlert != nil && len(r.Lag.Alerts) == 0 {
		var peaks []string
		for _, tot := range r.Lag.Totals {
			peaks = append(peaks, tot.Subscription+" "+strconv.FormatInt(tot.Max, 10))
		}
		t.Errorf("the scenario's lag alert (%s) never fired: peak totals %s", r.Lag.Alert, strings.Join(peaks, ", "))
	}
}
