package runner

import (
	"testing"

	"github.com/deliverycheck/deliverycheck/pipeline/relay"
	"github.com/deliverycheck/deliverycheck/scenarios"
)

// checkOperations asserts, of one built-in's run in the detection
// matrix, what issue 25's figures must show beyond its verdict: each
// part's check is its own function.
func checkOperations(t *testing.T, s scenarios.Scenario, o *Outcome) {
	t.Helper()
	checkTraces(t, s, o)
	checkBacklog(t, s, o.Result)
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
