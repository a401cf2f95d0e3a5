package scenarios

import "github.com/deliverycheck/deliverycheck/nemesis"

// validateGroups checks the consumer-group settings:
// workload.late_subscriptions and broker.offset_reset (issue 25).
func (s Scenario) validateGroups(fail func(path, format string, args ...any)) {
	if len(s.Workload.LateSubscriptions) > 0 {
		fail("workload.late_subscriptions", "not built yet (issue 25)")
	}
	if s.Broker.OffsetReset != "" && s.Broker.OffsetReset != "earliest" {
		fail("broker.offset_reset", "not built yet (issue 25)")
	}
}

// checkGroupStep checks a join or leave step.
func (s Scenario) checkGroupStep(f nemesis.Fault, workers []string) string {
	return string(f.Kind) + " is not built yet (issue 25)"
}

// joinedWorkers lists the consumers join steps start, named as the
// pipeline names them.
func (s Scenario) joinedWorkers() []string { return nil }
