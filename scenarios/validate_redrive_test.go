package scenarios

import (
	"strings"
	"testing"

	"github.com/deliverycheck/deliverycheck/nemesis"
)

// The redrive steps and settings are refused where they cannot work,
// each error naming its file:line and field.
func TestValidateRedrive(t *testing.T) {
	base := `name: r
broker: rabbitmq
workload:
  duration: 10s
  new_schema_ratio: 0.05
`
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"valid", base + `nemesis:
  timeline:
    - "at 4s: deploy-fix email"
    - "at 5s: redrive email at 50/s"
`, ""},
		{"unknown subscription", base + `nemesis:
  timeline:
    - "at 5s: redrive emial at 50/s"
`, `r.yaml:8: nemesis.timeline[0]: redrive acts on a subscription: no subscription "emial"; did you mean email? (subscriptions: inventory, email)`},
		{"kafka", strings.Replace(base, "rabbitmq", "kafka", 1) + `nemesis:
  timeline:
    - "at 5s: purge-dlq email"
`, "purge-dlq is not yet supported on kafka (RabbitMQ only)"},
		{"classic queues", strings.Replace(base, "broker: rabbitmq", "broker:\n  kind: rabbitmq\n  queue_type: classic", 1) + `nemesis:
  timeline:
    - "at 5s: redrive email at 50/s"
`, "redrive needs quorum queues"},
		{"known-bad redriver without a redrive", base + `variants:
  redrive: blind
`, "variants.redrive: the blind redriver runs only in a redrive step"},
		{"no ordinary events", strings.Replace(base, "0.05", "0.5\n  poison_ratio: 0.5", 1), "their sum must be below 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("r.yaml", []byte(tc.yaml))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// A redrive step's redriver takes failpoints: redrive-<subscription>.
func TestRedriveWorkerFailpoints(t *testing.T) {
	s, ok := Lookup("rabbitmq-redrive")
	if !ok {
		t.Fatal("no built-in rabbitmq-redrive")
	}
	if got := s.redriveWorkers(); len(got) != 1 || got[0] != "redrive-email" {
		t.Errorf("redrive workers %v", got)
	}
	s.Nemesis.Timeline = s.Nemesis.Timeline[:1] // no redrive step: no redriver
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "redrive-email") {
		t.Errorf("failpoints of a redriver no step starts: %v", err)
	}
	if s.Nemesis.Timeline[0].Fault.Kind != nemesis.DeployFix {
		t.Fatalf("first step %v", s.Nemesis.Timeline[0])
	}
}
