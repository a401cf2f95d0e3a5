package scenarios

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/pipeline/intruder"
	"github.com/deliverycheck/deliverycheck/pipeline/producer"
)

// A full security section parses, marshals back, and reaches the
// pipeline's config; the intruder's defaults fill in.
func TestSecuritySection(t *testing.T) {
	src := `name: sec
broker: kafka
workload: {duration: 5s, sources: [/orders, /returns]}
security:
  sign: true
  tenant: acme
  freshness: 10m
  max_version_ahead: 1000
  authority:
    /orders: [OrderConfirmed]
    /returns: [OrderConfirmed, OrderRefunded]
  intruder:
    permissions: none
    kinds: [type, replay]
    per_kind: 3
`
	s, err := Parse("sec.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := Security{Sign: true, Tenant: "acme", Freshness: 10 * time.Minute, MaxVersionAhead: 1000,
		Authority: map[string][]string{"/orders": {"OrderConfirmed"}, "/returns": {"OrderConfirmed", "OrderRefunded"}},
		Intruder:  Intruder{Permissions: intruder.None, Kinds: []intruder.Kind{intruder.Type, intruder.Replay}, PerKind: 3}}
	if !s.Security.Enabled() || s.Security.Freshness != want.Freshness || s.Security.Intruder.PerKind != 3 ||
		!slices.Equal(s.Security.Authority["/returns"], want.Authority["/returns"]) || !slices.Equal(s.Security.Intruder.Kinds, want.Intruder.Kinds) {
		t.Fatalf("got %+v", s.Security)
	}
	out, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse("sec.yaml", out)
	if err != nil || back.Security.Tenant != "acme" || len(back.Security.Authority) != 2 || back.Security.Intruder.Permissions != intruder.None {
		t.Fatalf("round trip: %+v, %v\n%s", back.Security, err, out)
	}
	cfg := s.PipelineConfig()
	if cfg.Security == nil || !cfg.Security.Sign || cfg.Security.Tenant != "acme" || cfg.Security.MaxVersionAhead != 1000 || len(cfg.Security.Authority) != 2 {
		t.Fatalf("pipeline security %+v", cfg.Security)
	}
	cfg.Security.Authority["/orders"][0] = "x"
	if s.Security.Authority["/orders"][0] == "x" {
		t.Fatal("PipelineConfig shares memory with the scenario")
	}

	// None by default; the intruder's defaults.
	plain, _ := Parse("p.yaml", []byte("broker: kafka\n"))
	if plain.Security.Enabled() || plain.PipelineConfig().Security != nil {
		t.Fatal("security without a section")
	}
	d := Intruder{}.WithDefaults()
	if d.Permissions != intruder.Publish || !slices.Equal(d.Kinds, intruder.Kinds()) || d.PerKind != DefaultPerKind {
		t.Fatalf("defaults %+v", d)
	}
	if only, _ := Parse("o.yaml", []byte("broker: kafka\nsecurity: {intruder: {per_kind: 1}}\n")); !only.Security.Enabled() {
		t.Fatal("a section with only an intruder field is none")
	}
}

// Each mistake in the security section names file, line and field.
func TestSecurityErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       string
	}{
		{"freshness shorter than the run", "broker: kafka\nworkload: {duration: 30s}\nsecurity:\n  freshness: 45s\n",
			"my.yaml:4: security.freshness: 45s does not outlast the run (workload.duration 30s + drain.timeout 1m0s = 1m30s)"},
		{"freshness lets the replay through", "broker: kafka\nsecurity:\n  freshness: 2h\n",
			"my.yaml:3: security.freshness: 2h0m0s lets the intruder's replay (an event from 1h0m0s before the run) through"},
		{"long freshness without replay", "broker: kafka\nsecurity:\n  freshness: 2h\n  intruder: {kinds: [type]}\n", ""},
		{"negative freshness", "broker: kafka\nsecurity:\n  freshness: -1s\n", "my.yaml:3: security.freshness: must be ≥ 0, got -1s"},
		{"authority of a source not in the workload", "broker: kafka\nsecurity:\n  authority:\n    /returns: [OrderConfirmed]\n",
			`my.yaml:4: security.authority./returns: "/returns" is not a workload source (have /orders)`},
		{"authority's source is checked", "broker: kafka\nsecurity:\n  authority:\n    \"/ord ers\": [OrderConfirmed]\n",
			`my.yaml:4: security.authority./ord ers: want a CloudEvents source`},
		{"authority's event type", "broker: kafka\nsecurity:\n  authority:\n    /orders: [\"Order Confirmed\"]\n",
			`my.yaml:4: security.authority./orders[0]: want an event type such as OrderConfirmed`},
		{"unknown intruder kind", "broker: kafka\nsecurity:\n  intruder:\n    kinds: [type, replya]\n",
			`my.yaml:4: security.intruder.kinds[1]: unknown intruder kind "replya"; did you mean replay?`},
		{"unknown permissions", "broker: kafka\nsecurity:\n  intruder:\n    permissions: write\n",
			`my.yaml:4: security.intruder.permissions: unknown intruder permissions "write" (valid: publish, none)`},
		{"per_kind below 1", "broker: kafka\nsecurity:\n  intruder:\n    per_kind: 0\n",
			"my.yaml:4: security.intruder.per_kind: must be ≥ 1, got 0"},
		{"kind listed twice", "broker: kafka\nsecurity:\n  intruder:\n    kinds: [type, type]\n",
			`security.intruder.kinds[1]: "type" is listed twice`},
		{"max_version_ahead lets the intruder through", "broker: kafka\nsecurity:\n  max_version_ahead: 2000000\n",
			"my.yaml:3: security.max_version_ahead: 2000000 lets the intruder's version-ahead event (version 1000000) through"},
		{"tenant is a name", "broker: kafka\nsecurity:\n  tenant: Acme Corp\n", "my.yaml:3: security.tenant: want lowercase letters"},
		{"debezium relay", "broker: kafka\nvariants: {relay: debezium}\nsecurity:\n  sign: true\n",
			"my.yaml:4: security: the debezium relay (Kafka Connect's outbox event router) sends no tenant, time or signature header"},
		{"direct-publishing producer", "broker: kafka\nvariants: {producer: dual-write}\nworkload: {relays: 0}\nsecurity:\n  sign: true\n",
			"my.yaml:5: security: the dual-write producer publishes its events itself, unstamped and unsigned"},
		{"stage", "broker: kafka\nstage: {processors: 1}\nsecurity:\n  sign: true\n",
			"my.yaml:4: security: the transactional stage's processors read the events topic without checking events' authority"},
		{"team consumer without dead letters", "broker: kafka\nsystem:\n  consumer: {command: [./c]}\n  effects_query: SELECT 1\nsecurity:\n  sign: true\n",
			"system.dead_letters_query: missing: with a security section external consumers need a query returning what they turned away"},
		{"valid", "broker: rabbitmq\nsecurity:\n  sign: true\n  tenant: acme\n  freshness: 10m\n  max_version_ahead: 1000\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("my.yaml", []byte(tc.yaml))
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error\n%v\nwant it to contain\n%s", err, tc.want)
			}
		})
	}
}

// A scenario changed in Go is checked too: kinds through
// intruder.ParseKind, permissions, the authority's sources.
func TestSecurityValidateAfterHandEdits(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Security)
		want string
	}{
		{"kind", func(s *Security) { s.Intruder.Kinds = []intruder.Kind{"forge"} }, `security.intruder.kinds[0]: unknown kind "forge"`},
		{"permissions", func(s *Security) { s.Intruder.Permissions = "all" }, `security.intruder.permissions: unknown intruder permissions "all"`},
		{"per_kind", func(s *Security) { s.Intruder.PerKind = -1 }, "security.intruder.per_kind: must be ≥ 1, got -1"},
		{"empty authority", func(s *Security) { s.Authority = map[string][]string{"/orders": nil} }, "security.authority./orders: name at least one event type"},
		{"fine", func(s *Security) { s.Authority = map[string][]string{"/orders": {producer.EventType}} }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := Lookup("kafka-random")
			s.Security.Sign = true
			tc.edit(&s.Security)
			err := s.Validate()
			if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate: %v, want %q", err, tc.want)
			}
		})
	}
}
