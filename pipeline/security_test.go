package pipeline

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/pipeline/producer"
	"github.com/deliverycheck/deliverycheck/pipeline/worker"
)

// A team's relay gets the signing key and the tenant, its consumers every
// check, each only when configured; the built-in ones get the same in
// their configs; docs/contract.md names every variable.
func TestSecurityEnv(t *testing.T) {
	cfg := Config{Broker: "kafka", Subscriptions: []string{"inventory"}, Sources: []string{"/orders", "/returns"},
		Security: &Security{Sign: true, Tenant: "acme", Freshness: 10 * time.Minute, MaxVersionAhead: 1000}}
	r := &Deployment{cfg: cfg, broker: worker.Broker{Kind: "kafka", URL: "127.0.0.1:9092", Namespace: "run1"}}
	if err := r.mintKey(); err != nil || len(r.SigningKey()) != 32 {
		t.Fatalf("key %x, %v", r.SigningKey(), err)
	}
	key := hex.EncodeToString(r.key)
	relayEnv := r.contractEnv("relay-0", worker.RoleRelay, "")
	consumerEnv := r.contractEnv("consumer-inventory-0", worker.RoleConsumer, "inventory")
	for _, want := range []string{EnvSigningKey + "=" + key, EnvTenant + "=acme"} {
		if !slices.Contains(relayEnv, want) {
			t.Errorf("relay env lacks %s", want)
		}
	}
	for _, want := range []string{EnvSigningKey + "=" + key, EnvTenant + "=acme", EnvFreshness + "=10m0s",
		EnvMaxVersionAhead + "=1000", EnvAuthority + "=/orders=OrderConfirmed;/returns=OrderConfirmed"} {
		if !slices.Contains(consumerEnv, want) {
			t.Errorf("consumer env lacks %s", want)
		}
	}
	if slices.ContainsFunc(relayEnv, func(s string) bool { return strings.HasPrefix(s, EnvFreshness) }) {
		t.Error("the relay gets the consumers' checks")
	}
	cs := r.consumerSecurity()
	if string(cs.Key) != string(r.key) || cs.Tenant != "acme" || cs.Freshness != 10*time.Minute || cs.MaxVersionAhead != 1000 || len(cs.Authority) != 2 {
		t.Errorf("consumer security %+v", cs)
	}
	if a := r.relayAuthority(); a == nil || a.Tenant != "acme" || string(a.Key) != string(r.key) {
		t.Errorf("relay authority %+v", a)
	}

	// Without a security section: no variable, no stamp, and consumers
	// check the default authority only.
	r = &Deployment{cfg: Config{Broker: "kafka", Subscriptions: []string{"inventory"}}, broker: worker.Broker{Kind: "kafka"}}
	if err := r.mintKey(); err != nil || r.key != nil {
		t.Fatal("a key without security")
	}
	for _, v := range r.contractEnv("consumer-inventory-0", worker.RoleConsumer, "inventory") {
		if strings.HasPrefix(v, EnvSigningKey) || strings.HasPrefix(v, EnvAuthority) || strings.HasPrefix(v, EnvTenant) {
			t.Errorf("%s without security", v)
		}
	}
	if r.relayAuthority() != nil || !slices.Equal(r.consumerSecurity().Authority[producer.DefaultSource], []string{producer.EventType}) {
		t.Error("defaults without security")
	}

	doc, err := os.ReadFile(filepath.Join("..", "docs", "contract.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{EnvSigningKey, EnvTenant, EnvFreshness, EnvMaxVersionAhead, EnvAuthority} {
		if !strings.Contains(string(doc), "`"+v+"`") {
			t.Errorf("docs/contract.md does not name %s", v)
		}
	}
}
