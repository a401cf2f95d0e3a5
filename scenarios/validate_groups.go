package scenarios

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/deliverycheck/deliverycheck/nemesis"
	"github.com/deliverycheck/deliverycheck/pipeline/consumer"
)

// validateGroups checks the consumer-group settings (issue 25):
// workload.late_subscriptions, broker.offset_reset and the consumer
// variants that are ways of committing Kafka offsets.
func (s Scenario) validateGroups(fail func(path, format string, args ...any)) {
	kafka := s.Broker.Kind == "kafka"
	for i, sub := range s.Workload.LateSubscriptions {
		path := fmt.Sprintf("workload.late_subscriptions[%d]", i)
		switch {
		case !kafka:
			fail(path, "late subscriptions are Kafka's: a consumer group that starts late replays the topic, while a RabbitMQ queue declared late never had what was published before it; use broker: kafka")
			return
		case !slices.Contains(s.Workload.Subscriptions, sub):
			fail(path, "%q is not in workload.subscriptions%s; a late subscription is one of them whose consumers start at its first join", sub, suggest(sub, s.Workload.Subscriptions))
		case !slices.ContainsFunc(s.Nemesis.Timeline, func(st nemesis.Step) bool { return st.Fault.Kind == nemesis.Join && st.Fault.Target == sub }):
			fail(path, "no step starts %s's consumers: add \"at 2s: join %s\" to nemesis.timeline", sub, sub)
		}
	}
	if s.Broker.OffsetReset != "" && !kafka {
		fail("broker.offset_reset", "where a Kafka consumer group without a committed offset starts; RabbitMQ has no offsets (use broker: kafka)")
	}
	if v := s.Variants.Consumer; (v == consumer.AutoCommit || v == consumer.CommitOnRevoke) && !kafka {
		fail("variants.consumer", "%s is a way of committing Kafka offsets; RabbitMQ acks each message (use broker: kafka)", v)
	}
}

// checkGroupStep checks a join or leave step: join names a subscription,
// leave one consumer worker (no pattern). Both are Kafka's for now: on
// RabbitMQ they are competing consumers joining or leaving a queue,
// which no test has shown working yet.
func (s Scenario) checkGroupStep(f nemesis.Fault, workers []string) string {
	if s.Broker.Kind != "kafka" {
		return fmt.Sprintf("%s acts on a Kafka consumer group; on RabbitMQ it is not built yet (use broker: kafka)", f.Kind)
	}
	if f.Kind == nemesis.Join {
		if !slices.Contains(s.Workload.Subscriptions, f.Target) {
			return fmt.Sprintf("join takes a subscription, not %q%s (subscriptions: %s)", f.Target, suggest(f.Target, s.Workload.Subscriptions), strings.Join(s.Workload.Subscriptions, ", "))
		}
		return ""
	}
	consumers := slices.DeleteFunc(slices.Clone(workers), func(w string) bool { return !strings.HasPrefix(w, "consumer-") })
	if !slices.Contains(consumers, f.Target) {
		return fmt.Sprintf("leave takes one consumer, not %q%s (consumers: %s)", f.Target, suggest(f.Target, consumers), strings.Join(consumers, ", "))
	}
	return ""
}

// joinedWorkers lists the consumers join steps start, named as the
// pipeline names them: consumer-<subscription>-<n>, n counting on from
// the consumers the run starts with (none for a late subscription), in
// the order the steps run.
func (s Scenario) joinedWorkers() []string {
	steps := slices.Clone(s.Nemesis.Timeline)
	slices.SortStableFunc(steps, func(a, b nemesis.Step) int { return cmp.Compare(a.At, b.At) })
	next := map[string]int{}
	var out []string
	for _, st := range steps {
		sub := st.Fault.Target
		if st.Fault.Kind != nemesis.Join || !slices.Contains(s.Workload.Subscriptions, sub) {
			continue
		}
		n, ok := next[sub]
		if !ok {
			n = s.consumersAtStart(sub)
		}
		out = append(out, fmt.Sprintf("consumer-%s-%d", sub, n))
		next[sub] = n + 1
	}
	return out
}

// consumersAtStart is how many consumers of sub the run starts with.
func (s Scenario) consumersAtStart(sub string) int {
	if slices.Contains(s.Workload.LateSubscriptions, sub) {
		return 0
	}
	return s.Workload.Consumers
}
