package pipeline

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/pipeline/worker"
)

// A team's processor gets what docs/contract.md ("Processor") promises:
// its role and name, the input topic, the stage's group, the output
// topics, a transactional.id that is the same on every start, and the
// abort ratio; and the page names every one of them.
func TestProcessorEnv(t *testing.T) {
	cfg := Config{Broker: "kafka", Subscriptions: []string{"inventory"}, Stage: &Stage{Outputs: []string{"invoices", "revenue"}, AbortRatio: 0.25}}
	r := &Deployment{cfg: cfg, broker: worker.Broker{Kind: "kafka", URL: "127.0.0.1:9092", Namespace: "run1"}}
	env := r.contractEnv("processor-1", worker.RoleProcessor, StageConsumer)
	doc, err := os.ReadFile(filepath.Join("..", "docs", "contract.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		EnvRole + "=processor",
		history.EnvProcess + "=processor-1",
		EnvKafkaTopic + "=run1.events",
		EnvKafkaGroup + "=run1.processor",
		EnvKafkaOutputTopics + "=run1.invoices,run1.revenue",
		EnvTransactionalID + "=processor-1",
		EnvAbortRatio + "=0.25",
		EnvSubscription + "=processor",
	} {
		if !slices.Contains(env, want) {
			t.Errorf("environment lacks %s: %q", want, env)
		}
		if name, _, _ := strings.Cut(want, "="); !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("docs/contract.md does not name %s", name)
		}
	}
	if again := r.contractEnv("processor-1", worker.RoleProcessor, StageConsumer); !slices.Contains(again, EnvTransactionalID+"=processor-1") {
		t.Errorf("a restart's transactional.id changed: %q", again)
	}
	for _, v := range r.contractEnv("relay-0", worker.RoleRelay, "") {
		if strings.HasPrefix(v, EnvKafkaOutputTopics) || strings.HasPrefix(v, EnvTransactionalID) {
			t.Errorf("a relay gets %s", v)
		}
	}
}
