package runner

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/pipeline/redrive"
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
	checkRedrive(t, s, o)
	checkBacklog(t, s, o.Result)
}

// checkRedrive: a scenario with a redrive step redrove something in one
// of its subscriptions, within its rate; the correct redriver's every
// redriven event ended applied (recovered, or turned away by the inbox
// as applied before, or skipped as superseded), nothing re-failed, nothing
// left unrecovered or purged, and what it kept in the dead-letter queue
// is what it classified as incompatible (poison here).
func checkRedrive(t *testing.T, s scenarios.Scenario, o *Outcome) {
	t.Helper()
	subs := s.RedriveSubscriptions()
	if len(subs) == 0 {
		return
	}
	r := o.Result
	var redriven int64
	for _, rd := range r.Redrive {
		t.Logf("redrive of %s: %d redriven in %d redrives (max %d/s of %d/s), %d recovered, %d already applied, %d superseded, %d re-failed, %d unrecovered, %d purged, %d kept; canary %s",
			rd.Subscription, rd.Redriven, rd.Redrives, rd.MaxRate, rd.Rate, rd.Recovered, rd.AlreadyApplied, rd.Superseded, rd.ReFailed, rd.Unrecovered, rd.Purged, rd.Kept, rd.CanaryOutcome)
		redriven += rd.Redriven
		if rd.MaxRate > rd.Rate+1 {
			t.Errorf("redrive of %s: %d redrives in one second, over its %d/s", rd.Subscription, rd.MaxRate, rd.Rate)
		}
		if s.Variants.Redrive != "" && s.Variants.Redrive != redrive.Canary || s.Expect.Verdict != checker.Valid {
			continue
		}
		if rd.Recovered+rd.AlreadyApplied+rd.Superseded != rd.Redriven || rd.ReFailed+rd.Unrecovered+rd.Purged != 0 {
			t.Errorf("redrive of %s: not every redriven event ended applied: %+v", rd.Subscription, rd)
		}
		if s.Workload.PoisonRatio > 0 && rd.Kept == 0 {
			t.Errorf("redrive of %s: poison in the workload, yet the canary redriver kept nothing in the dead-letter queue", rd.Subscription)
		}
	}
	if redriven == 0 {
		t.Errorf("redrive steps on %v, yet nothing was redriven", subs)
	}
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
