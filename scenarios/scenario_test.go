package scenarios

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/nemesis"
	"github.com/deliverycheck/deliverycheck/pipeline"
	"github.com/deliverycheck/deliverycheck/pipeline/consumer"
	"github.com/deliverycheck/deliverycheck/pipeline/intruder"
	"github.com/deliverycheck/deliverycheck/pipeline/processor"
	"github.com/deliverycheck/deliverycheck/pipeline/producer"
	"github.com/deliverycheck/deliverycheck/pipeline/relay"
)

// errLines splits a joined error into its lines.
func errLines(err error) []string {
	if err == nil {
		return nil
	}
	return strings.Split(err.Error(), "\n")
}

func TestParseDefaults(t *testing.T) {
	s, err := Parse("x.yaml", []byte("name: x\nbroker: kafka\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Name, want.Broker.Kind, want.Source = "x", "kafka", "x.yaml"
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("got %+v\nwant %+v", s, want)
	}
	cfg := s.PipelineConfig()
	wantCfg := pipeline.Config{
		Broker: "kafka", Producers: 2, ProducerVariant: producer.Outbox, Rate: 50, Keys: 10,
		RelayVariant: relay.Polling, Subscriptions: []string{"inventory", "email"}, Consumers: 1,
		ConsumerVariant: consumer.Inbox, MaxAttempts: 5, Partitions: 3,
		DrainTimeout: 60 * time.Second, Quiet: 2 * time.Second,
	}
	if !reflect.DeepEqual(cfg, wantCfg) {
		t.Fatalf("PipelineConfig:\ngot  %+v\nwant %+v", cfg, wantCfg)
	}
	g := s.CheckGuarantees()
	wantG := checker.Guarantees{Loss: checker.None, DuplicateEffects: checker.None, Order: checker.Unordered, Gaps: checker.Allowed, Subscriptions: []string{"email", "inventory"}}
	if !reflect.DeepEqual(g, wantG) {
		t.Fatalf("CheckGuarantees: got %+v, want %+v", g, wantG)
	}
	if s.Workload.Duration != 30*time.Second || s.Nemesis.Random != nil || len(s.Nemesis.Timeline) != 0 {
		t.Fatalf("defaults: %+v", s)
	}
}

func TestParseNameFromFile(t *testing.T) {
	s, err := Parse("dir/My Scenario.yml", []byte("broker: rabbitmq\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "my-scenario" {
		t.Fatalf("name %q, want my-scenario", s.Name)
	}
}

func TestParseEveryField(t *testing.T) {
	src := `name: full
description: every field set
broker:
  kind: rabbitmq
  partitions: 6
  max_attempts: 3
  prefetch: 64
  unbound: [email]
postgres:
  standby: sync
variants:
  producer: outbox
  relay: unroutable
  consumer: inbox
workload:
  duration: 12s
  producers: 3
  producer_processes: 1
  rate: 0
  keys: 7
  poison_ratio: 0.05
  subscriptions: [inventory, email]
  consumers: 2
  consumer_workers: 4
  consumer_work: 5ms
  relays: 2
  relay_batch: 10
nemesis:
  timeline:
    - "at 1s: kill relay-0"
    - at 2s: latency postgres 100ms ±20ms for 3s
    - "at 3s: failpoint consumer-inventory-* consumer.after-commit-before-ack"
  random:
    families: [network]
    interval: 2s
    seed_offset: 7
    targets: [broker, postgres]
  failpoints:
    relay-1: relay.before-publish=kill(2)
    consumer-email-1: ["consumer.after-effect-before-commit=kill(0.5)", "consumer.after-commit-before-ack=kill(always)"]
  restart_delay: 1s
guarantees:
  order: per-key
  max-stall: 5s
  max-rss: 256MiB
  preset: at-least-once
  subscriptions: [inventory]
drain:
  timeout: 90s
  quiet: 3s
expect:
  verdict: invalid
  anomaly: lost
images:
  postgres: postgres:16
  rabbitmq: localhost/deliverycheck/rabbitmq:3.10
seed: 42
`
	s, err := Parse("full.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := Scenario{
		Name: "full", Description: "every field set", Source: "full.yaml",
		Broker:   Broker{Kind: "rabbitmq", Partitions: 6, MaxAttempts: 3, Unbound: []string{"email"}, Prefetch: 64},
		Postgres: Postgres{Standby: "sync"},
		Variants: Variants{Producer: producer.Outbox, Relay: relay.Unroutable, Consumer: consumer.Inbox},
		Workload: Workload{Duration: 12 * time.Second, Producers: 3, ProducerProcesses: 1, Rate: 0, Keys: 7, PoisonRatio: 0.05,
			Subscriptions: []string{"inventory", "email"}, Consumers: 2, ConsumerWorkers: 4, ConsumerWork: 5 * time.Millisecond, Relays: 2, RelayBatch: 10},
		Nemesis: Nemesis{
			Timeline: []nemesis.Step{
				{At: time.Second, Fault: nemesis.Fault{Kind: nemesis.Kill, Target: "relay-0"}},
				{At: 2 * time.Second, Fault: nemesis.Fault{Kind: nemesis.Latency, Target: "postgres", Latency: 100 * time.Millisecond, Jitter: 20 * time.Millisecond}, For: 3 * time.Second},
				{At: 3 * time.Second, Fault: nemesis.Fault{Kind: nemesis.Failpoint, Target: "consumer-inventory-*", Term: "consumer.after-commit-before-ack=kill(once)"}},
			},
			Random: &Random{Families: []string{"network"}, Interval: 2 * time.Second, SeedOffset: 7, Targets: []string{"broker", "postgres"}},
			Failpoints: map[string][]string{
				"relay-1":          {"relay.before-publish=kill(2)"},
				"consumer-email-1": {"consumer.after-effect-before-commit=kill(0.5)", "consumer.after-commit-before-ack=kill(always)"},
			},
			RestartDelay: time.Second,
		},
		// The preset applies first whatever the order in the file.
		Guarantees: checker.Guarantees{Loss: checker.None, DuplicateEffects: checker.Allowed, Order: checker.PerKey, Gaps: checker.Allowed, Subscriptions: []string{"inventory"}, MaxStall: 5 * time.Second, MaxRSS: 256 << 20},
		Drain:      Drain{Timeout: 90 * time.Second, Quiet: 3 * time.Second},
		Expect:     Expect{Verdict: checker.Invalid, Anomaly: checker.Lost},
		Images:     Images{Postgres: "postgres:16", RabbitMQ: "localhost/deliverycheck/rabbitmq:3.10"},
		Seed:       42,
	}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("got  %+v\nwant %+v", s, want)
	}
	if m := s.Images.Map(); len(m) != 2 || m["postgres"] != "postgres:16" || m["kafka"] != "" {
		t.Fatalf("Images.Map() = %v", m)
	}
	out, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse("full.yaml", out)
	if err == nil && back.Broker.Prefetch != 64 {
		t.Fatalf("prefetch lost in a marshal round trip: %d\n%s", back.Broker.Prefetch, out)
	}
	if err == nil && back.Postgres != s.Postgres {
		t.Fatalf("postgres lost in a marshal round trip: %+v\n%s", back.Postgres, out)
	}
	if err != nil || back.Images != s.Images {
		t.Fatalf("images lost in a marshal round trip: %+v, %v\n%s", back.Images, err, out)
	}
	if got := s.RandomSeed(); got != 49 {
		t.Fatalf("RandomSeed %d, want 49", got)
	}
	if got := s.CheckGuarantees().Subscriptions; !slices.Equal(got, []string{"inventory"}) {
		t.Fatalf("CheckGuarantees subscriptions %v", got)
	}
	cfg := s.PipelineConfig()
	if cfg.Failpoints["relay-1"][0] != "relay.before-publish=kill(2)" || cfg.RestartDelay != time.Second || cfg.Seed != 42 || cfg.Unbound[0] != "email" || cfg.Prefetch != 64 {
		t.Fatalf("PipelineConfig %+v", cfg)
	}
	// The config is a copy: changing it leaves the scenario alone.
	cfg.Failpoints["relay-1"][0] = "x"
	cfg.Subscriptions[0] = "x"
	if s.Nemesis.Failpoints["relay-1"][0] == "x" || s.Workload.Subscriptions[0] == "x" {
		t.Fatal("PipelineConfig shares memory with the scenario")
	}
}

func TestParseShorthands(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		check     func(Scenario) bool
	}{
		{"guarantees preset as a string", "broker: kafka\nguarantees: at-least-once\n",
			func(s Scenario) bool { return s.Guarantees.DuplicateEffects == checker.Allowed }},
		{"guarantees as the check command's form", "broker: kafka\nguarantees: effectively-once,order=per-key\n",
			func(s Scenario) bool { return s.Guarantees.Order == checker.PerKey }},
		{"max-stall and max-rss in the check command's form", "broker: kafka\nguarantees: max-rss=1GiB,effectively-once,max-stall=2s\n",
			func(s Scenario) bool { return s.Guarantees.MaxStall == 2*time.Second && s.Guarantees.MaxRSS == 1<<30 }},
		{"max-rss in plain bytes", "broker: kafka\nguarantees:\n  max-rss: 268435456\n",
			func(s Scenario) bool { return s.Guarantees.MaxRSS == 256<<20 }},
		{"random with no fields", "broker: kafka\nnemesis:\n  random:\n",
			func(s Scenario) bool { return reflect.DeepEqual(s.Nemesis.Random, defaultRandom()) }},
		{"random on", "broker: kafka\nnemesis:\n  random: on\n",
			func(s Scenario) bool { return s.Nemesis.Random != nil }},
		{"a single subscription", "broker: kafka\nworkload:\n  subscriptions: billing\n",
			func(s Scenario) bool { return slices.Equal(s.Workload.Subscriptions, []string{"billing"}) }},
		{"empty sections", "broker: kafka\nworkload:\nnemesis:\n",
			func(s Scenario) bool { return s.Workload.Producers == DefaultProducers }},
		{"anchors and aliases", "broker: kafka\nworkload:\n  subscriptions: &subs [a, b]\nguarantees:\n  subscriptions: *subs\n",
			func(s Scenario) bool { return slices.Equal(s.Guarantees.Subscriptions, []string{"a", "b"}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse("s.yaml", []byte(tc.src))
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(s) {
				t.Fatalf("unexpected result %+v", s)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string
	}{
		{"range", "broker: kafka\nworkload:\n  rate: -5\n",
			[]string{"my.yaml:3: workload.rate: must be ≥ 0, got -5"}},
		{"prefetch range", "broker:\n  kind: rabbitmq\n  prefetch: 0\n",
			[]string{"my.yaml:3: broker.prefetch: must be ≥ 1, got 0"}},
		{"unknown key with suggestion", "broker: kafka\nworkload:\n  rat: 5\n",
			[]string{"my.yaml:3: workload.rat: unknown field; did you mean rate? (valid: duration, producers, producer_processes, rate, rate_timeline, keys, poison_ratio, new_schema_ratio, abort_ratio, sources, subscriptions, consumers, consumer_workers, consumer_work, consumer_batch, late_subscriptions, relays, relay_batch)"}},
		{"unknown top-level key", "broker: kafka\nworkloads: {}\n",
			[]string{"my.yaml:2: workloads: unknown field; did you mean workload? (valid: name, description, broker, postgres, variants, workload, system, stage, security, observability, nemesis, guarantees, drain, expect, images, seed)"}},
		{"wrong standby", "broker: kafka\npostgres:\n  standby: hot\n",
			[]string{`my.yaml:3: postgres.standby: unknown standby "hot" (valid: none, async, sync)`}},
		{"wrong variant lists valid ones", "broker: kafka\nvariants:\n  consumer: inbx\n",
			[]string{`my.yaml:3: variants.consumer: unknown consumer variant "inbx"; did you mean inbox? (valid: inbox, ack-first, no-inbox, check-then-act, no-version-guard, inbox-by-id, inbox-by-trace, trusting, unbounded, fixed-retry, retry-forever, auto-commit, commit-on-revoke)`}},
		{"wrong relay", "broker: kafka\nvariants: {relay: outbox}\n",
			[]string{`my.yaml:2: variants.relay: unknown relay variant "outbox" (valid: polling, high-water-mark, unconfirmed, unroutable, leader-ack, transient, new-id-per-attempt, debezium)`}},
		{"image with a space", "broker: kafka\nimages:\n  postgres: \"postgres 17\"\n",
			[]string{`my.yaml:3: images.postgres: want an image reference such as postgres:17, got "postgres 17"`}},
		{"image of an unknown server", "broker: kafka\nimages:\n  mysql: mysql:8\n",
			[]string{"my.yaml:3: images.mysql: unknown field (valid: postgres, kafka, rabbitmq)"}},
		{"wrong broker", "broker: kafak\n",
			[]string{`my.yaml:1: broker: unknown broker "kafak"; did you mean kafka? (valid: kafka, rabbitmq)`}},
		{"wrong broker kind", "broker:\n  kind: redis\n",
			[]string{`my.yaml:2: broker.kind: unknown broker "redis" (valid: kafka, rabbitmq)`}},
		{"missing broker", "name: x\n",
			[]string{"my.yaml: broker: missing: name one (valid: kafka, rabbitmq)"}},
		{"max-rss not a size", "broker: kafka\nguarantees:\n  max-rss: lots\n",
			[]string{`my.yaml:3: guarantees.max-rss: want a size such as 256MiB, 1GiB or plain bytes, got "lots"`}},
		{"max-stall below 0", "broker: kafka\nguarantees:\n  max-stall: -1s\n",
			[]string{"my.yaml:3: guarantees.max-stall: must be ≥ 0, got -1s"}},
		{"wrong preset", "broker: kafka\nguarantees:\n  preset: exactly-once\n",
			[]string{`my.yaml:3: guarantees.preset: unknown guarantee preset "exactly-once" (valid: at-least-once, at-most-once, effectively-once, ordered-effectively-once)`}},
		{"wrong preset string", "broker: kafka\nguarantees: exactly-once\n",
			[]string{`my.yaml:2: guarantees: unknown guarantee preset "exactly-once" (have at-least-once, at-most-once, effectively-once, ordered-effectively-once)`}},
		{"wrong fault", "broker: kafka\nnemesis:\n  timeline:\n    - \"at 1s: explode relay-0\"\n",
			[]string{`my.yaml:4: nemesis.timeline[0]: step "at 1s: explode relay-0": unknown fault "explode" (valid: kill, pause, restart, failpoint, partition, refuse, latency, bandwidth, reset-peer, limit-data, slow-close, isolate, split, failover, cut-replication, roll, wipe, zombie, intrude, redrive, deploy-fix, purge-dlq, join, leave)`}},
		{"wrong family", "broker: kafka\nnemesis:\n  random:\n    families: [network, disk]\n",
			[]string{`my.yaml:4: nemesis.random.families[1]: unknown fault family "disk" (valid: failpoint, network, nodes, process)`}},
		{"wrong failpoint", "broker: kafka\nnemesis:\n  failpoints:\n    relay-0: relay.after-publish\n",
			[]string{`my.yaml:4: nemesis.failpoints.relay-0: unknown failpoint "relay.after-publish" (valid: consumer.after-ack-before-commit, consumer.after-commit-before-ack, consumer.after-effect-before-commit, processor.after-commit-before-poll, processor.after-produce-before-commit, producer.after-commit, redrive.after-publish-before-ack, relay.after-publish-before-mark, relay.before-publish)`}},
		{"not a number", "broker: kafka\nworkload:\n  producers: two\n",
			[]string{`my.yaml:3: workload.producers: want an integer, got "two"`}},
		{"not a duration", "broker: kafka\nworkload:\n  duration: 10\n",
			[]string{`my.yaml:3: workload.duration: want a duration such as 10s or 1m30s, got "10"`}},
		{"ratio out of range", "broker: kafka\nworkload:\n  poison_ratio: 1.5\n",
			[]string{"my.yaml:3: workload.poison_ratio: must be < 1, got 1.5"}},
		{"section given a list", "broker: kafka\nworkload: [1]\n",
			[]string{"my.yaml:2: workload: want a mapping, got a list"}},
		{"given twice", "broker: kafka\nseed: 1\nseed: 2\n",
			[]string{"my.yaml:3: seed: given twice (first on line 2)"}},
		{"malformed yaml keeps yaml's line", "name: x\n broker: kafka\n",
			[]string{"my.yaml:2: mapping values are not allowed in this context"}},
		{"not a mapping", "- a\n",
			[]string{"my.yaml:1: scenario: want a mapping, got a list"}},
		{"bad name", "name: My_Scenario\nbroker: kafka\n",
			[]string{`my.yaml:1: name: want lowercase letters, digits and '-' (at most 63, not starting with '-'), got "My_Scenario"`}},
		{"every mistake, in line order", "broker: kafka\nworkload:\n  rate: -1\n  keys: 0\nvariants:\n  producer: x\n",
			[]string{
				"my.yaml:3: workload.rate: must be ≥ 0, got -1",
				"my.yaml:4: workload.keys: must be ≥ 1, got 0",
				`my.yaml:6: variants.producer: unknown producer variant "x" (valid: outbox, dual-write, publish-then-commit)`,
			}},

		// Cross-field rules.
		{"stage on rabbitmq", "broker: rabbitmq\nstage:\n  processors: 1\n",
			[]string{"my.yaml:3: stage: the transactional stage is Kafka's (transactions over its topics); use broker: kafka"}},
		{"stage reader", "broker: kafka\nstage:\n  reader: read_dirty\n",
			[]string{`my.yaml:3: stage.reader: unknown isolation level "read_dirty" (valid: read_committed, read_uncommitted)`}},
		{"idempotent processor's abort ratio", "broker: kafka\nstage:\n  processor: idempotent\n  abort_ratio: 0.5\n",
			[]string{"my.yaml:4: stage.abort_ratio: the idempotent processor has no transaction to abort; leave abort_ratio out"}},
		{"stage abort ratio", "broker: kafka\nstage:\n  abort_ratio: 0\n",
			[]string{"my.yaml:3: stage.abort_ratio: must be > 0, got 0"}},
		{"stage effect", "broker: kafka\nstage:\n  effect: twice\n",
			[]string{`my.yaml:3: stage.effect: unknown processor effect "twice" (valid: none, plain, inbox)`}},
		{"stage effect with poison events", "broker: kafka\nworkload:\n  poison_ratio: 0.1\nstage:\n  effect: inbox\n",
			[]string{"my.yaml:5: stage.effect: the processor applies every input and dead-letters none: leave workload.poison_ratio out"}},
		{"stage effect's subscription taken", "broker: kafka\nworkload:\n  subscriptions: [processor]\nstage:\n  effect: plain\n",
			[]string{`my.yaml:5: stage.effect: the effect is subscription "processor"'s, and workload.subscriptions has one of that name`}},
		{"stage anomaly without a stage", "broker: kafka\nexpect:\n  verdict: invalid\n  anomaly: aborted-visible\n",
			[]string{"my.yaml:4: expect.anomaly: aborted-visible is an anomaly of the transactional stage, and the scenario has no stage section"}},
		{"processor failpoint on a relay", "broker: kafka\nstage: {processors: 1}\nnemesis:\n  failpoints:\n    relay-0: processor.after-commit-before-poll\n",
			[]string{"my.yaml:5: nemesis.failpoints.relay-0: processor.after-commit-before-poll is a processor failpoint; relay-0 is not a processor"}},
		{"unroutable on kafka", "broker: kafka\nvariants:\n  relay: unroutable\n",
			[]string{"my.yaml:3: variants.relay: unroutable only exists on rabbitmq (Kafka has no routing to get wrong)"}},
		{"replication on rabbitmq", "broker:\n  kind: rabbitmq\n  nodes: 3\n  min_insync_replicas: 1\n",
			[]string{"my.yaml:4: broker.min_insync_replicas: a Kafka replication setting; RabbitMQ's quorum queues have a member on every node (use broker: kafka)"}},
		{"replication on one node", "broker:\n  kind: kafka\n  replication_factor: 1\n  unclean_leader_election: true\n",
			[]string{
				"my.yaml:3: broker.replication_factor: a single Kafka node replicates nothing; set broker.nodes (e.g. 3)",
				"my.yaml:4: broker.unclean_leader_election: a single Kafka node replicates nothing; set broker.nodes (e.g. 3)",
			}},
		{"replication factor above the nodes", "broker:\n  kind: kafka\n  nodes: 3\n  replication_factor: 4\n",
			[]string{"my.yaml:4: broker.replication_factor: must be ≤ broker.nodes (3), got 4"}},
		{"replication factor 0", "broker:\n  kind: kafka\n  nodes: 3\n  replication_factor: 0\n",
			[]string{"my.yaml:4: broker.replication_factor: must be ≥ 1, got 0"}},
		{"min isr above the replication factor", "broker:\n  kind: kafka\n  nodes: 3\n  replication_factor: 2\n  min_insync_replicas: 3\n",
			[]string{"my.yaml:5: broker.min_insync_replicas: must be ≤ the replication factor (2), got 3: every acks=all write would be refused"}},
		{"min isr above the default replication factor", "broker:\n  kind: kafka\n  nodes: 2\n  min_insync_replicas: 3\n",
			[]string{"my.yaml:4: broker.min_insync_replicas: must be ≤ the replication factor (2), got 3: every acks=all write would be refused"}},
		{"unclean not a bool", "broker:\n  kind: kafka\n  nodes: 3\n  unclean_leader_election: maybe\n",
			[]string{`my.yaml:4: broker.unclean_leader_election: want true or false, got "maybe"`}},
		{"unbound on kafka", "broker:\n  kind: kafka\n  unbound: [email]\n",
			[]string{"my.yaml:3: broker.unbound: only RabbitMQ has bindings to leave out; Kafka delivers every record of the topic to every group"}},
		{"unbound names an undeclared subscription", "broker:\n  kind: rabbitmq\n  unbound: [billing]\n",
			[]string{`my.yaml:3: broker.unbound: "billing" is not a workload subscription (have inventory, email)`}},
		{"abort ratio without publish-then-commit", "broker: kafka\nworkload:\n  abort_ratio: 0.1\n",
			[]string{"my.yaml:3: workload.abort_ratio: only the publish-then-commit producer aborts transactions (variants.producer is outbox)"}},
		{"relay with a direct producer", "broker: kafka\nvariants: {producer: dual-write}\nworkload: {relays: 1}\n",
			[]string{"my.yaml:3: workload.relays: the dual-write producer publishes directly; a relay would publish its outbox rows too and hide the bug (set 0)"}},
		{"check-then-act expected to fail on kafka", "broker: kafka\nvariants: {consumer: check-then-act}\nexpect: {verdict: invalid, anomaly: duplicate-effect}\n",
			[]string{"my.yaml:2: variants.consumer: check-then-act is only exposed by competing consumers on one queue, which Kafka does not have; use broker: rabbitmq"}},
		{"lag alert longer than the run", "broker: kafka\nworkload: {duration: 10s}\ndrain: {timeout: 20s}\nobservability:\n  lag_alert: {threshold: 100, for: 30s}\n",
			[]string{"my.yaml:5: observability.lag_alert.for: 30s is at least the whole run (workload.duration 10s + drain.timeout 20s): the alert could never fire"}},
		{"lag alert below zero", "broker: kafka\nobservability:\n  lag_alert: {threshold: -1, for: 1s}\n",
			[]string{"my.yaml:3: observability.lag_alert.threshold: must be ≥ 0, got -1"}},
		{"expected anomaly not fatal", "broker: kafka\nexpect:\n  verdict: invalid\n  anomaly: order-regression\n",
			[]string{"my.yaml:4: expect.anomaly: order-regression is not fatal under these guarantees, so it cannot make the run invalid (set guarantees.order: per-key)"}},
		{"invalid without anomaly", "broker: kafka\nexpect:\n  verdict: invalid\n",
			[]string{"my.yaml:3: expect.anomaly: name the anomaly an invalid run must show (valid: lost, duplicate-effect, unexpected, unauthorized-effect, order-regression, gap, dlq-unaccounted, wrongly-dead-lettered, poison-applied, inbox-mismatch, unrecovered, over-retried, poll-skip, nonmonotonic-poll, output-duplicate, output-lost, aborted-visible, torn-transaction, output-order, transaction-left-open, stall, memory, redrive-rate, retry-storm, backlog-age)"}},
		{"step after the end", "broker: kafka\nworkload: {duration: 10s}\nnemesis:\n  timeline:\n    - \"at 10s: kill relay-0\"\n",
			[]string{`my.yaml:5: nemesis.timeline[0]: "at 10s: kill relay-0" starts at or after the workload ends (10s); faults only run while it does`}},
		{"unknown worker", "broker: kafka\nnemesis:\n  timeline:\n    - \"at 1s: kill relay-1\"\n",
			[]string{`my.yaml:4: nemesis.timeline[0]: unknown target "relay-1"; did you mean relay-0? (valid: postgres, broker, kafka, producer-0, producer-1, relay-0, consumer-inventory-0, consumer-email-0; a trailing * matches several workers)`}},
		{"other broker targeted", "broker: kafka\nnemesis:\n  timeline:\n    - \"at 1s: kill rabbitmq\"\n",
			[]string{"my.yaml:4: nemesis.timeline[0]: rabbitmq is not this scenario's broker (kafka); say broker to target whichever it is"}},
		{"network fault on a worker", "broker: kafka\nnemesis:\n  timeline:\n    - \"at 1s: partition relay-0 for 1s\"\n",
			[]string{"my.yaml:4: nemesis.timeline[0]: relay-0 is a worker; network faults act on a service's link (valid: postgres, broker, kafka)"}},
		{"failpoint in the wrong worker", "broker: kafka\nnemesis:\n  failpoints:\n    producer-0: relay.before-publish\n",
			[]string{"my.yaml:4: nemesis.failpoints.producer-0: relay.before-publish is a relay failpoint; producer-0 is not a relay"}},
		{"more producer processes than producers", "broker: kafka\nworkload:\n  producers: 2\n  producer_processes: 3\n",
			[]string{"my.yaml:4: workload.producer_processes: must be ≤ workload.producers (2), got 3"}},
		{"failpoint in a producer that is another's client", "broker: kafka\nworkload: {producers: 4, producer_processes: 2}\nnemesis:\n  failpoints:\n    producer-1: producer.after-commit\n",
			[]string{`my.yaml:5: nemesis.failpoints.producer-1: no worker "producer-1" in this scenario; did you mean producer-0? (workers: producer-0, producer-2, relay-0, consumer-inventory-0, consumer-email-0)`}},
		{"failpoint in a worker that does not exist", "broker: kafka\nnemesis:\n  failpoints:\n    consumer-billing-0: consumer.after-commit-before-ack\n",
			[]string{`my.yaml:4: nemesis.failpoints.consumer-billing-0: no worker "consumer-billing-0" in this scenario (workers: producer-0, producer-1, relay-0, consumer-inventory-0, consumer-email-0)`}},
		{"ack-first failpoint without ack-first", "broker: kafka\nnemesis:\n  failpoints:\n    consumer-email-0: consumer.after-ack-before-commit\n",
			[]string{"my.yaml:4: nemesis.failpoints.consumer-email-0: consumer.after-ack-before-commit is only reached by the ack-first consumer (variants.consumer is inbox)"}},
		{"guarantee subscription not declared", "broker: kafka\nguarantees:\n  subscriptions: [billing]\n",
			[]string{`my.yaml:3: guarantees.subscriptions: "billing" is not a workload subscription (have inventory, email)`}},
		{"field and cross-field mistakes together", "broker: kafka\nworkload:\n  rate: x\nvariants:\n  relay: unroutable\n",
			[]string{
				`my.yaml:3: workload.rate: want a number, got "x"`,
				"my.yaml:5: variants.relay: unroutable only exists on rabbitmq (Kafka has no routing to get wrong)",
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("my.yaml", []byte(tc.src))
			if got := errLines(err); !slices.Equal(got, tc.want) {
				t.Fatalf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("%T is not an *Error", err)
			}
		})
	}
}

func TestSet(t *testing.T) {
	base := func(t *testing.T) Scenario {
		s, err := Parse("base.yaml", []byte("name: base\nbroker: rabbitmq\nworkload: {duration: 10s}\n"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, tc := range []struct {
		path, value string
		check       func(Scenario) bool
	}{
		{"workload.rate", "500", func(s Scenario) bool { return s.Workload.Rate == 500 }},
		{"broker", "kafka", func(s Scenario) bool { return s.Broker.Kind == "kafka" }},
		{"broker.kind", "kafka", func(s Scenario) bool { return s.Broker.Kind == "kafka" }},
		{"broker.max_attempts", "3", func(s Scenario) bool { return s.PipelineConfig().MaxAttempts == 3 }},
		{"variants.consumer", "no-inbox", func(s Scenario) bool { return s.Variants.Consumer == consumer.NoInbox }},
		{"workload.subscriptions", "billing,audit", func(s Scenario) bool { return slices.Equal(s.Workload.Subscriptions, []string{"billing", "audit"}) }},
		{"workload.subscriptions", "[billing]", func(s Scenario) bool { return slices.Equal(s.Workload.Subscriptions, []string{"billing"}) }},
		{"workload.duration", "1m", func(s Scenario) bool { return s.Workload.Duration == time.Minute }},
		{"nemesis.timeline", "at 1s: kill relay-0; at 3s: pause consumer-* for 1s", func(s Scenario) bool {
			return len(s.Nemesis.Timeline) == 2 && s.Nemesis.Timeline[1].Fault.Kind == nemesis.Pause
		}},
		{"nemesis.random.interval", "3s", func(s Scenario) bool {
			return s.Nemesis.Random != nil && s.Nemesis.Random.Interval == 3*time.Second && len(s.Nemesis.Random.Families) == len(nemesis.Families())
		}},
		{"nemesis.random", "off", func(s Scenario) bool { return s.Nemesis.Random == nil }},
		{"nemesis.failpoints.relay-0", "relay.before-publish=kill(2)", func(s Scenario) bool {
			return slices.Equal(s.Nemesis.Failpoints["relay-0"], []string{"relay.before-publish=kill(2)"})
		}},
		{"nemesis.failpoints", "{consumer-email-0: consumer.after-commit-before-ack}", func(s Scenario) bool {
			return slices.Equal(s.Nemesis.Failpoints["consumer-email-0"], []string{"consumer.after-commit-before-ack=kill(once)"})
		}},
		{"guarantees", "at-least-once", func(s Scenario) bool { return s.Guarantees.DuplicateEffects == checker.Allowed }},
		{"guarantees.order", "per-key", func(s Scenario) bool { return s.Guarantees.Order == checker.PerKey }},
		{"seed", "7", func(s Scenario) bool { return s.Seed == 7 }},
	} {
		t.Run(tc.path+"="+tc.value, func(t *testing.T) {
			s := base(t)
			if err := s.Set(tc.path, tc.value); err != nil {
				t.Fatal(err)
			}
			if !tc.check(s) {
				t.Fatalf("not applied: %+v", s)
			}
		})
	}
}

func TestSetErrors(t *testing.T) {
	for _, tc := range []struct {
		path, value string
		want        string
	}{
		{"workload.rate", "-5", "--set: workload.rate: must be ≥ 0, got -5"},
		{"workload.rate", "fast", `--set: workload.rate: want a number, got "fast"`},
		{"variants.relay", "polling2", `--set: variants.relay: unknown relay variant "polling2"; did you mean polling? (valid: polling, high-water-mark, unconfirmed, unroutable, leader-ack, transient, new-id-per-attempt, debezium)`},
		{"workload", "5", "--set: workload: is a section; set one of its fields: workload.duration, workload.producers, workload.producer_processes, workload.rate, workload.rate_timeline, workload.keys, workload.poison_ratio, workload.new_schema_ratio, workload.abort_ratio, workload.sources, workload.subscriptions, workload.consumers, workload.consumer_workers, workload.consumer_work, workload.consumer_batch, workload.late_subscriptions, workload.relays, workload.relay_batch"},
		// A value that breaks a rule tying fields together.
		{"variants.relay", "unroutable", "--set: variants.relay: unroutable only exists on rabbitmq (Kafka has no routing to get wrong)"},
		{"broker.unclean_leader_election", "true", "--set: broker.unclean_leader_election: a single Kafka node replicates nothing; set broker.nodes (e.g. 3)"},
		{"broker.unclean_leader_election", "yes", `--set: broker.unclean_leader_election: want true or false, got "yes"`},
		{"workload.duration", "1s", `base.yaml: nemesis.timeline[0]: "at 2s: kill relay-0" starts at or after the workload ends (1s); faults only run while it does`},
		{"nemesis.failpoints.relay-9", "relay.before-publish", `--set: nemesis.failpoints.relay-9: no worker "relay-9" in this scenario; did you mean relay-0? (workers: producer-0, producer-1, relay-0, consumer-inventory-0, consumer-email-0)`},
	} {
		t.Run(tc.path+"="+tc.value, func(t *testing.T) {
			s, err := Parse("base.yaml", []byte("name: base\nbroker: kafka\nnemesis:\n  timeline: [\"at 2s: kill relay-0\"]\n"))
			if err != nil {
				t.Fatal(err)
			}
			before := s.clone()
			err = s.Set(tc.path, tc.value)
			if got := strings.Join(errLines(err), "\n"); got != tc.want {
				t.Fatalf("got\n  %s\nwant\n  %s", got, tc.want)
			}
			if !reflect.DeepEqual(s, before) {
				t.Fatal("a failed Set changed the scenario")
			}
		})
	}
}

func TestSetUnknownPathListsValidOnes(t *testing.T) {
	s := Default()
	s.Name, s.Broker.Kind = "x", "kafka"
	err := s.Set("workload.rat", "5")
	if err == nil || !strings.HasPrefix(err.Error(), "--set: workload.rat: unknown field; did you mean workload.rate? (valid: name, description, broker, broker.kind,") ||
		!strings.Contains(err.Error(), "nemesis.failpoints.<worker>") {
		t.Fatalf("got %v", err)
	}
}

func TestValidateAfterHandEdits(t *testing.T) {
	s, _ := Lookup("kafka-kill-broker")
	s.Workload.Duration = 2 * time.Second
	err := s.Validate()
	want := `builtin/kafka-kill-broker.yaml: nemesis.timeline[0]: "at 4s: kill broker for 3s" starts at or after the workload ends (2s); faults only run while it does`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
}

// Validate checks the numbers of a scenario changed in Go against the
// range tags the decoder checks a file's against; a zero=default field
// (prefetch) may be 0 in Go, though not in a file.
func TestValidateRangesAfterHandEdits(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Scenario)
		want string
	}{
		{"prefetch 0 keeps the default", func(s *Scenario) { s.Broker.Prefetch = 0 }, ""},
		{"prefetch", func(s *Scenario) { s.Broker.Prefetch = -1 }, "broker.prefetch: must be ≥ 1, got -1"},
		{"keys", func(s *Scenario) { s.Workload.Keys = 0 }, "workload.keys: must be ≥ 1, got 0"},
		{"duration", func(s *Scenario) { s.Workload.Duration = 0 }, "workload.duration: must be > 0, got 0s"},
		{"ratio", func(s *Scenario) { s.Workload.PoisonRatio = 1 }, "workload.poison_ratio: must be < 1, got 1"},
		{"not finite", func(s *Scenario) { s.Workload.Rate = math.Inf(1) }, "workload.rate: want a number, got +Inf"},
		{"optional section", func(s *Scenario) { s.Nemesis.Random.Interval = -time.Second }, "nemesis.random.interval: must be > 0, got -1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := Lookup("rabbitmq-random")
			tc.edit(&s)
			want := []string(nil)
			if tc.want != "" {
				want = []string{"builtin/rabbitmq-random.yaml: " + tc.want}
			}
			if got := errLines(s.Validate()); !slices.Equal(got, want) {
				t.Fatalf("got %q\nwant %q", got, want)
			}
		})
	}
}

// Every field with a range tag is checked by Validate too.
func TestValidateChecksEveryRange(t *testing.T) {
	checked := 0
	for _, p := range Paths() {
		_, f, entry, _ := lookupPath(p)
		if entry || len(f.bounds) == 0 {
			continue
		}
		s, _ := Lookup("kafka-random")
		v := reflect.ValueOf(&s).Elem()
		for _, key := range strings.Split(p, ".") {
			if v.Kind() == reflect.Pointer {
				if v.IsNil() { // an optional section the scenario has not
					v.Set(reflect.New(v.Type().Elem()))
				}
				v = v.Elem()
			}
			i := slices.IndexFunc(fieldsOf(v.Type()), func(f field) bool { return f.key == key })
			v = v.FieldByIndex(fieldsOf(v.Type())[i].index)
		}
		b := f.bounds[0]
		x := b.limit
		if b.op != "<" {
			x--
		}
		if x == 0 && f.zeroDefault {
			x--
		}
		if v.Kind() == reflect.Float64 {
			v.SetFloat(x)
		} else {
			v.SetInt(int64(x))
		}
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), ": "+p+": must be "+b.String()+", got ") {
			t.Errorf("%s = %v: Validate says %v", p, v, err)
		}
		checked++
	}
	if checked < 15 {
		t.Fatalf("only %d fields with a range", checked)
	}
}

func TestBuiltin(t *testing.T) {
	all := Builtin()
	if len(all) < 30 {
		t.Fatalf("only %d built-in scenarios", len(all))
	}
	byName := map[string]Scenario{}
	for _, s := range all {
		if _, dup := byName[s.Name]; dup {
			t.Errorf("%s: two scenarios of that name", s.Name)
		}
		byName[s.Name] = s
		if s.Source != "builtin/"+s.Name+".yaml" {
			t.Errorf("%s: file %s does not match its name", s.Name, s.Source)
		}
		if err := s.Validate(); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
		if s.Description == "" || strings.Contains(s.Description, "\n") || len(s.Description) > 160 {
			t.Errorf("%s: want a one-line description, got %q", s.Name, s.Description)
		}
		if s.Expect.Verdict == "" {
			t.Errorf("%s: a catalogue scenario states its expected verdict", s.Name)
		}
		if s.KnownBad() != (s.Expect.Verdict == checker.Invalid) {
			t.Errorf("%s: known-bad %v but expects %s", s.Name, s.KnownBad(), s.Expect.Verdict)
		}
		if s.Workload.Duration > 20*time.Second {
			t.Errorf("%s: %s is too long for CI", s.Name, s.Workload.Duration)
		}
		got, ok := Lookup(s.Name)
		if !ok || !reflect.DeepEqual(got, s) {
			t.Errorf("%s: Lookup does not find it", s.Name)
		}
	}

	// One scenario per known-bad variant, expecting the anomaly DESIGN.md
	// names for it.
	wantBad := map[string]checker.Kind{
		"dual-write": checker.Lost, "publish-then-commit": checker.Unexpected,
		"high-water-mark": checker.Lost, "unconfirmed": checker.Lost, "unroutable": checker.Lost,
		"ack-first": checker.Lost, "no-inbox": checker.DuplicateEffect,
		"check-then-act": checker.DuplicateEffect, "no-version-guard": checker.OrderRegression,
	}
	for v, kind := range wantBad {
		s, ok := byName["bad-"+v]
		if !ok {
			t.Errorf("no bad-%s scenario", v)
			continue
		}
		if s.Expect != (Expect{Verdict: checker.Invalid, Anomaly: kind}) {
			t.Errorf("bad-%s expects %+v, want invalid with %s", v, s.Expect, kind)
		}
		if string(s.Variants.Producer) != v && string(s.Variants.Relay) != v && string(s.Variants.Consumer) != v {
			t.Errorf("bad-%s runs %+v", v, s.Variants)
		}
	}
	if n := len(all) - len(wantBad); n < 20 {
		t.Errorf("only %d correct scenarios", n)
	}

	// The correct pipeline on each broker under each family.
	for _, b := range Brokers() {
		for _, suffix := range []string{"kill-broker", "kill-postgres", "pause-servers", "kill-workers",
			"partition-broker", "partition-postgres", "latency", "random",
			"failpoint-producer-after-commit", "failpoint-relay-before-publish", "failpoint-relay-after-publish-before-mark",
			"failpoint-consumer-after-effect-before-commit", "failpoint-consumer-after-commit-before-ack"} {
			if _, ok := byName[b+"-"+suffix]; !ok {
				t.Errorf("no %s-%s scenario", b, suffix)
			}
		}
	}

	// The worked example: inventory and email, competing consumers with the
	// version guard, poison dead-lettered after 5 attempts.
	oc := byName["order-confirmation"]
	if oc.Broker.Kind != "rabbitmq" || oc.Broker.MaxAttempts != 5 || oc.Workload.PoisonRatio <= 0 ||
		!slices.Equal(oc.Workload.Subscriptions, []string{"inventory", "email"}) || oc.Workload.Consumers < 2 ||
		oc.CheckGuarantees().Order != checker.PerKey || oc.Variants.Consumer != consumer.Inbox {
		t.Errorf("order-confirmation is not the worked example: %+v", oc)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "mine.yaml")
	if err := os.WriteFile(p, []byte("broker: kafka\nworkload: {rate: -1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil || err.Error() != p+":2: workload.rate: must be ≥ 0, got -1" {
		t.Fatalf("got %v", err)
	}
	if err := os.WriteFile(p, []byte("broker: kafka\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err := Load(p); err != nil || s.Name != "mine" || s.Source != p {
		t.Fatalf("got %+v, %v", s, err)
	}
	if s, err := Load("order-confirmation"); err != nil || s.Name != "order-confirmation" {
		t.Fatalf("got %+v, %v", s, err)
	}
	_, err := Load("order-confirmaton")
	if err == nil || !strings.Contains(err.Error(), `no built-in scenario or file named "order-confirmaton"; did you mean order-confirmation?`) {
		t.Fatalf("got %v", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("got %v", err)
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	for _, s := range Builtin() {
		out, err := s.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse(s.Source, out)
		if err != nil {
			t.Fatalf("%s: %v\n%s", s.Name, err, out)
		}
		// Marshal writes the guarantees normalized.
		s.Guarantees = s.Guarantees.Normalize()
		back.Guarantees = back.Guarantees.Normalize()
		if !reflect.DeepEqual(content(back), content(s)) {
			t.Errorf("%s: round trip changed it\n got %+v\nwant %+v", s.Name, back, s)
		}
	}
}

// FuzzParse: Parse never panics, and whatever it accepts marshals and
// parses back to the same scenario.
func FuzzParse(f *testing.F) {
	entries, _ := builtinFS.ReadDir("builtin")
	for _, e := range entries {
		data, _ := builtinFS.ReadFile("builtin/" + e.Name())
		f.Add(data)
	}
	f.Add([]byte("name: x\nbroker: kafka\n"))
	f.Add([]byte("broker: rabbitmq\nworkload: {rate: 1e3, subscriptions: [a]}\nnemesis: {random: {}}\n"))
	f.Add([]byte("broker: kafka\nsecurity: {sign: true, tenant: acme, freshness: 10m, authority: {/orders: [OrderConfirmed]}, intruder: {kinds: [type], per_kind: 1}}\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("broker: kafka\nx: &x {a: *x}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse("f.yaml", data)
		if err != nil {
			return
		}
		out, err := s.Marshal()
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		back, err := Parse("f.yaml", out)
		if err != nil {
			t.Fatalf("re-parse: %v\n%s", err, out)
		}
		s.Guarantees = s.Guarantees.Normalize()
		back.Guarantees = back.Guarantees.Normalize()
		if !reflect.DeepEqual(content(back), content(s)) {
			t.Fatalf("round trip changed it\n got %+v\nwant %+v\n%s", back, s, out)
		}
	})
}

// TestDocExample keeps docs/scenarios.md's full example valid.
func TestDocExample(t *testing.T) {
	doc, err := os.ReadFile("../docs/scenarios.md")
	if err != nil {
		t.Skip(err)
	}
	_, rest, ok := strings.Cut(string(doc), "## A full example\n\n```yaml\n")
	if !ok {
		t.Fatal("docs/scenarios.md has no full example")
	}
	example, _, _ := strings.Cut(rest, "```")
	s, err := Parse("docs/scenarios.md", []byte(example))
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "my-billing" || len(s.Nemesis.Timeline) != 2 {
		t.Fatalf("%+v", s)
	}
}

func TestDefaultGuarantees(t *testing.T) {
	want, ok := checker.Preset(DefaultGuarantees)
	if !ok {
		t.Fatalf("DefaultGuarantees %q is not a checker preset", DefaultGuarantees)
	}
	if got := Default().Guarantees; !reflect.DeepEqual(got, want) {
		t.Errorf("Default().Guarantees = %+v, want preset %s %+v", got, DefaultGuarantees, want)
	}
}

// With a replicated broker, faults name its nodes (or its leader), and
// the faults between nodes need one; with a standby, the database fails
// over and its nodes can be cut off from each other; without one, neither.
func TestNodeSteps(t *testing.T) {
	for _, tc := range []struct {
		nodes         int
		standby, step string
		err           string // "" valid
	}{
		{3, "", "at 1s: isolate broker-1 for 2s", ""},
		{3, "", "at 1s: isolate kafka:leader for 2s", ""},
		{3, "", "at 1s: split broker ring for 2s", ""},
		{3, "", "at 1s: kill kafka-2 for 2s", ""},
		{3, "", "at 1s: pause broker:leader for 2s", ""},
		{3, "", "at 1s: partition broker-0 upstream for 2s", ""},
		{3, "", "at 1s: kill postgres for 2s", ""},
		{0, "", "at 1s: isolate broker-1 for 2s", "isolate acts between the nodes of a replicated broker; set broker.nodes"},
		{3, "", "at 1s: isolate postgres for 2s", `isolate takes a broker node, not "postgres"`},
		{3, "", "at 1s: isolate kafka-3 for 2s", `isolate takes a broker node, not "kafka-3"`},
		{3, "", "at 1s: split kafka-1 for 2s", `split acts on the broker's nodes: target broker, not "kafka-1"`},
		{2, "", "at 1s: split broker for 2s", "split needs 3 or more broker nodes"},
		{3, "", "at 1s: kill broker for 2s", `unknown target "broker"`},
		{0, "", "at 1s: kill kafka-1 for 2s", `unknown target "kafka-1"`},
		{0, "sync", "at 1s: failover postgres", ""},
		{0, "async", "at 1s: isolate postgres-1 for 2s", ""},
		{0, "async", "at 1s: kill postgres-0 for 2s", ""},
		{0, "async", "at 1s: partition postgres-1 for 2s", ""},
		{0, "", "at 1s: failover postgres", "failover needs a standby to promote: set postgres.standby"},
		{0, "none", "at 1s: kill postgres-0 for 2s", `unknown target "postgres-0"`},
		{0, "sync", "at 1s: failover broker", `failover acts on postgres, not "broker"`},
		{0, "", "at 1s: isolate postgres-1 for 2s", "set broker.nodes"},
		{3, "", "at 1s: cut-replication broker:leader for 2s", ""},
		{3, "", "at 1s: cut-replication kafka-2 for 2s", ""},
		{0, "", "at 1s: cut-replication broker-0 for 2s", "cut-replication acts between the nodes of a replicated broker; set broker.nodes"},
		{3, "", "at 1s: cut-replication broker for 2s", `cut-replication takes a broker node, not "broker"`},
		{3, "sync", "at 1s: cut-replication postgres-1 for 2s", `cut-replication takes a broker node, not "postgres-1"`},
		{3, "", "at 1s: roll broker for 30s", ""},
		{3, "", "at 1s: roll kafka for 30s", ""},
		{0, "", "at 1s: roll broker for 30s", "roll restarts the nodes of a replicated broker one by one; set broker.nodes"},
		{3, "", "at 1s: roll broker-1 for 30s", `roll acts on the whole broker, node by node: target broker, not "broker-1"`},
		{3, "", "at 1s: roll rabbitmq for 30s", `target broker, not "rabbitmq"`},
		{3, "", "at 1s: wipe broker:leader for 2s", ""},
		{3, "", "at 1s: wipe kafka-0", ""},
		{0, "", "at 1s: wipe broker for 2s", "wipe replaces one node of a replicated broker with an empty one that rejoins its cluster; set broker.nodes"},
		{3, "", "at 1s: wipe broker for 2s", `wipe takes a broker node, not "broker"`},
		{3, "sync", "at 1s: wipe postgres-0 for 2s", `wipe takes a broker node, not "postgres-0"`},
	} {
		s := Default()
		s.Name, s.Broker.Kind, s.Broker.Nodes, s.Postgres.Standby = "nodes", "kafka", tc.nodes, tc.standby
		st, err := nemesis.ParseStep(tc.step)
		if err != nil {
			t.Fatal(err)
		}
		s.Nemesis.Timeline = []nemesis.Step{st}
		err = s.Validate()
		if tc.err == "" && err != nil {
			t.Errorf("nodes %d, standby %q, %q: %v", tc.nodes, tc.standby, tc.step, err)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("nodes %d, standby %q, %q: error %v, want %q", tc.nodes, tc.standby, tc.step, err, tc.err)
		}
	}
	// RabbitMQ has no listener for replication alone.
	s := Default()
	s.Name, s.Broker.Kind, s.Broker.Nodes = "nodes", "rabbitmq", 3
	st, err := nemesis.ParseStep("at 1s: cut-replication broker-0 for 2s")
	if err != nil {
		t.Fatal(err)
	}
	s.Nemesis.Timeline = []nemesis.Step{st}
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "cut-replication cuts Kafka's inter-broker listener") {
		t.Errorf("cut-replication on RabbitMQ: %v", err)
	}
}

// The stage section reaches the pipeline, and its processors are
// workers the nemesis can name.
func TestStage(t *testing.T) {
	s, err := Parse("my.yaml", []byte("broker: kafka\nstage:\n  processors: 2\n  outputs: [invoices]\n  processor: offsets-after\n  reader: read_uncommitted\nnemesis:\n  timeline: [\"at 1s: kill processor-1\"]\n  failpoints:\n    processor-0: processor.after-commit-before-poll\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := s.PipelineConfig().Stage
	want := &pipeline.Stage{Processors: 2, Outputs: []string{"invoices"}, ReadUncommitted: true, Variant: processor.OffsetsAfter}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("pipeline stage %+v, want %+v", got, want)
	}
	if s, _ := Parse("my.yaml", []byte("broker: kafka\n")); s.PipelineConfig().Stage != nil {
		t.Fatal("a scenario without a stage section has a stage")
	}
	if _, err := Parse("my.yaml", []byte("broker: kafka\nnemesis:\n  timeline: [\"at 1s: kill processor-0\"]\n")); err == nil {
		t.Fatal("kill processor-0 accepted without a stage")
	}
	s, err = Parse("my.yaml", []byte("broker: kafka\nstage:\n  processor: idempotent\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.PipelineConfig().Stage.Variant; got != processor.Idempotent || !s.KnownBad() {
		t.Fatalf("stage.processor idempotent: variant %q, known-bad %v", got, s.KnownBad())
	}
	// The database effect: without an inbox it is known-bad, with one
	// it is the fix.
	for e, bad := range map[processor.Effect]bool{processor.PlainEffect: true, processor.InboxEffect: false, processor.NoEffect: false} {
		s, err := Parse("my.yaml", []byte("broker: kafka\nstage:\n  effect: "+string(e)+"\n"))
		if err != nil {
			t.Fatal(err)
		}
		if got := s.PipelineConfig().Stage.Effect; got != e || s.KnownBad() != bad {
			t.Errorf("stage.effect %s: effect %q, known-bad %v", e, got, s.KnownBad())
		}
	}
}

// An intrude step needs a security section, and readies the intruder
// the section describes; without the step the pipeline has none.
func TestIntrudeStep(t *testing.T) {
	s, err := Parse("my.yaml", []byte("broker: kafka\nnemesis:\n  timeline: [\"at 1s: intrude\"]\n"))
	if err == nil {
		err = s.Validate()
	}
	if err == nil || !strings.Contains(err.Error(), "my.yaml:3: nemesis.timeline[0]") || !strings.Contains(err.Error(), "intrude needs a security section") {
		t.Errorf("intrude without a security section: %v", err)
	}
	s, err = Parse("my.yaml", []byte("broker: kafka\nsecurity: {sign: true, intruder: {permissions: none, kinds: [type], per_kind: 3}}\nnemesis:\n  timeline: [\"at 1s: intrude\"]\n"))
	if err == nil {
		err = s.Validate()
	}
	if err != nil {
		t.Fatal(err)
	}
	in := s.PipelineConfig().Intruder
	if in == nil || in.Permissions != intruder.None || !slices.Equal(in.Kinds, []intruder.Kind{intruder.Type}) || in.PerKind != 3 {
		t.Errorf("pipeline intruder %+v", in)
	}
	s.Nemesis.Timeline = nil
	if in := s.PipelineConfig().Intruder; in != nil {
		t.Errorf("no intrude step, yet the pipeline readies an intruder: %+v", in)
	}
}

// A zombie step takes one built-in processor of the stage.
func TestZombieStep(t *testing.T) {
	for _, tc := range []struct {
		yaml, err string
	}{
		{"broker: kafka\nstage:\n  processors: 2\nnemesis:\n  timeline: [\"at 1s: zombie processor-1 for 6s\"]\n", ""},
		{"broker: kafka\nstage:\n  processor: random-id\nnemesis:\n  timeline: [\"at 1s: zombie processor-0 for 6s\"]\n", ""},
		{"broker: kafka\nnemesis:\n  timeline: [\"at 1s: zombie processor-0 for 6s\"]\n", "zombie acts on a processor of the transactional stage; add a stage section"},
		{"broker: kafka\nstage:\n  processors: 1\nnemesis:\n  timeline: [\"at 1s: zombie processor-1 for 6s\"]\n", `zombie takes one processor, not "processor-1"`},
		{"broker: kafka\nstage:\n  processors: 1\nnemesis:\n  timeline: [\"at 1s: zombie relay-0 for 6s\"]\n", `zombie takes one processor, not "relay-0"`},
		{"broker: kafka\nstage:\n  processors: 1\nnemesis:\n  timeline: [\"at 1s: zombie processor-0\"]\n", "zombie needs a window"},
	} {
		s, err := Parse("my.yaml", []byte(tc.yaml))
		if err == nil {
			err = s.Validate()
		}
		if tc.err == "" && err != nil {
			t.Errorf("%q: %v", tc.yaml, err)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%q: error %v, want %q", tc.yaml, err, tc.err)
		}
	}
}
