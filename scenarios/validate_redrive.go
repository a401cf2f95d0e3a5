package scenarios

import "github.com/deliverycheck/deliverycheck/nemesis"

// validateRedrive checks the DLQ redrive settings: workload.new_schema_ratio,
// variants.redrive and their steps (issue 25).
func (s Scenario) validateRedrive(fail func(path, format string, args ...any)) {
	if s.Workload.NewSchemaRatio > 0 {
		fail("workload.new_schema_ratio", "not built yet (issue 25)")
	}
	if s.Variants.Redrive != "" && s.Variants.Redrive != "canary" {
		fail("variants.redrive", "not built yet (issue 25)")
	}
}

// checkRedriveStep checks a redrive, deploy-fix or purge-dlq step.
func (s Scenario) checkRedriveStep(f nemesis.Fault) string {
	return string(f.Kind) + " is not built yet (issue 25)"
}

// redriveWorkers lists the redriver of each subscription a redrive step
// names (redrive-<subscription>), a valid failpoint key.
func (s Scenario) redriveWorkers() []string { return nil }
