package scenarios

import (
	"fmt"
	"slices"
	"strings"

	"github.com/deliverycheck/deliverycheck/nemesis"
	"github.com/deliverycheck/deliverycheck/pipeline"
	"github.com/deliverycheck/deliverycheck/pipeline/redrive"
)

// validateRedrive checks the DLQ redrive settings: workload.new_schema_ratio,
// variants.redrive and their steps (issue 25).
func (s Scenario) validateRedrive(fail func(path, format string, args ...any)) {
	w := s.Workload
	if v := s.Variants.Redrive; v != "" && !slices.Contains(redrive.Variants(), v) {
		fail("variants.redrive", "%s", unknownName("redrive variant", string(v), strs(redrive.Variants())))
	}
	if w.NewSchemaRatio > 0 {
		if s.Stage != nil {
			fail("workload.new_schema_ratio", "the stage's processors apply every input and dead-letter none: leave new_schema_ratio out")
		}
		if w.NewSchemaRatio+w.PoisonRatio >= 1 {
			fail("workload.new_schema_ratio", "new_schema_ratio %g and poison_ratio %g leave no share for ordinary events: their sum must be below 1", w.NewSchemaRatio, w.PoisonRatio)
		}
		if s.Broker.QueueType == "classic" {
			fail("workload.new_schema_ratio", "a classic queue has no delivery limit: a new-schema event would be redelivered for ever (use queue_type quorum)")
		}
		if len(s.System.Consumers) > 0 && strings.TrimSpace(s.System.DeadLettersQuery) == "" {
			fail("system.dead_letters_query", "missing: with new-schema events (workload.new_schema_ratio) external consumers need a query returning what they dead-lettered (event_id, consumer)")
		}
	}
	if v := s.Variants.Redrive; v != "" && v != redrive.Canary && len(s.RedriveSubscriptions()) == 0 {
		fail("variants.redrive", "the %s redriver runs only in a redrive step; add one to nemesis.timeline (\"at 5s: redrive email at 50/s\")", v)
	}
}

// checkRedriveStep checks a redrive, deploy-fix or purge-dlq step: it
// names a workload subscription; a redrive or a purge acts on RabbitMQ's
// dead-letter queues (Kafka's redriver is not yet written), a redrive on
// quorum queues, which have the delivery limit that dead-letters.
func (s Scenario) checkRedriveStep(f nemesis.Fault) string {
	subs := s.Workload.Subscriptions
	if !slices.Contains(subs, f.Target) {
		return fmt.Sprintf("%s acts on a subscription: no subscription %q%s (subscriptions: %s)", f.Kind, f.Target, suggest(f.Target, subs), strings.Join(subs, ", "))
	}
	if f.Kind == nemesis.DeployFix {
		return ""
	}
	if s.Broker.Kind != "rabbitmq" {
		return fmt.Sprintf("%s is not yet supported on %s (RabbitMQ only)", f.Kind, s.Broker.Kind)
	}
	if f.Kind == nemesis.Redrive {
		if f.Rate < 1 {
			return fmt.Sprintf("redrive needs a rate of at least 1 per second, e.g. \"redrive %s at 50/s\"", f.Target)
		}
		if s.Broker.QueueType == "classic" {
			return "redrive needs quorum queues: a classic queue has no delivery limit, so nothing is dead-lettered to redrive (leave broker.queue_type out)"
		}
	}
	return ""
}

// badRedrive reports whether the scenario operates its dead letters
// wrongly: a known-bad redriver, or a purge of a dead-letter queue.
func (s Scenario) badRedrive() bool {
	if v := s.Variants.Redrive; v != "" && v != redrive.Canary {
		return true
	}
	return slices.ContainsFunc(s.Nemesis.Timeline, func(st nemesis.Step) bool { return st.Fault.Kind == nemesis.PurgeDLQ })
}

// RedriveSubscriptions lists the subscriptions a redrive step names, in
// timeline order, each once.
func (s Scenario) RedriveSubscriptions() []string {
	var out []string
	for _, st := range s.Nemesis.Timeline {
		if st.Fault.Kind == nemesis.Redrive && !slices.Contains(out, st.Fault.Target) {
			out = append(out, st.Fault.Target)
		}
	}
	return out
}

// redriveWorkers lists the redriver of each subscription a redrive step
// names (redrive-<subscription>), a valid failpoint key.
func (s Scenario) redriveWorkers() []string {
	subs := s.RedriveSubscriptions()
	out := make([]string, len(subs))
	for i, sub := range subs {
		out[i] = pipeline.RedriveWorker(sub)
	}
	return out
}
