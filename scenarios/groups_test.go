package scenarios

import (
	"slices"
	"strings"
	"testing"
)

// Join and leave steps, late subscriptions and the Kafka-only settings
// of issue 25: what is accepted, what is refused and where, and the
// names the joined consumers get (targets and failpoint keys).
func TestGroupSteps(t *testing.T) {
	const late = "broker: kafka\nworkload:\n  subscriptions: [inventory, reporting]\n  late_subscriptions: [reporting]\n  consumers: 2\n"
	for _, tc := range []struct {
		name, yaml, err string
	}{
		{"join and leave", late + "nemesis:\n  timeline: [\"at 1s: join reporting\", \"at 2s: join inventory\", \"at 3s: leave consumer-inventory-2\", \"at 3s: leave consumer-reporting-0\"]\n", ""},
		{"failpoint in a joined consumer", late + "nemesis:\n  timeline: [\"at 1s: join reporting\"]\n  failpoints:\n    consumer-reporting-0: [consumer.after-commit-before-ack=kill(1)]\n", ""},
		{"late without a join", late, "my.yaml:4: workload.late_subscriptions[0]: no step starts reporting's consumers"},
		{"late not a subscription", "broker: kafka\nworkload:\n  subscriptions: [inventory]\n  late_subscriptions: [reporting]\nnemesis:\n  timeline: [\"at 1s: join reporting\"]\n", "is not in workload.subscriptions"},
		{"late on rabbitmq", strings.Replace(late, "kafka", "rabbitmq", 1) + "nemesis:\n  timeline: [\"at 1s: join reporting\"]\n", "late subscriptions are Kafka's"},
		{"only joined consumers are there", late + "nemesis:\n  timeline: [\"at 1s: join reporting\", \"at 2s: kill consumer-reporting-1\"]\n", "unknown target \"consumer-reporting-1\""},
		{"join an unknown subscription", late + "nemesis:\n  timeline: [\"at 1s: join reporting\", \"at 1s: join inventroy\"]\n", "join takes a subscription, not \"inventroy\"; did you mean inventory?"},
		{"leave a relay", late + "nemesis:\n  timeline: [\"at 1s: join reporting\", \"at 2s: leave relay-0\"]\n", "leave takes one consumer, not \"relay-0\""},
		{"offset reset on rabbitmq", "broker: {kind: rabbitmq, offset_reset: latest}\n", "broker.offset_reset: where a Kafka consumer group"},
		{"auto-commit on rabbitmq", "broker: rabbitmq\nvariants: {consumer: auto-commit}\n", "variants.consumer: auto-commit is a way of committing Kafka offsets"},
		{"join on rabbitmq", "broker: rabbitmq\nnemesis:\n  timeline: [\"at 1s: join inventory\"]\n", "join acts on a Kafka consumer group"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse("my.yaml", []byte(tc.yaml))
			if err == nil {
				err = s.Validate()
			}
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want one containing %q", err, tc.err)
			}
		})
	}
	s, err := Parse("my.yaml", []byte(late+"nemesis:\n  timeline: [\"at 2s: join inventory\", \"at 1s: join reporting\", \"at 3s: join reporting\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.joinedWorkers(), []string{"consumer-reporting-0", "consumer-inventory-2", "consumer-reporting-1"}; !slices.Equal(got, want) {
		t.Errorf("joined workers %v, want %v", got, want)
	}
	if cfg := s.PipelineConfig(); !slices.Equal(cfg.LateSubscriptions, []string{"reporting"}) {
		t.Errorf("pipeline late subscriptions %v", cfg.LateSubscriptions)
	}
}
