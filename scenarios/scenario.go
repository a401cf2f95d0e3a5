// Package scenarios reads, validates and ships deliverycheck scenarios: a
// broker and its settings, the pipeline variant of each component, a
// workload, a nemesis (fixed timeline, seeded random schedule, failpoints
// armed at start), the promised guarantees, the drain deadline and, for the
// catalogue, the verdict a run is expected to reach.
//
// Read [Scenario] and [Load] first. A scenario is YAML (see
// docs/scenarios.md); every mistake in a file is reported with its file,
// line and field, and a short file is enough because everything has a
// default:
//
//	name: smoke
//	broker: kafka
//
// is the correct pipeline on Kafka, 2 producers for 30s, effectively-once.
// The built-in catalogue ([Builtin]) is embedded in the binary.
//
// # One type is the format
//
// The [Scenario] type is the file format's only definition. Each field's
// yaml tag is its key (in decode order), its enum, check and range tags
// say what values it takes, and its doc comment is its reference text:
// the decoder, --set ([Scenario.Set]), the ranges [Scenario.Validate]
// checks of a scenario changed in Go, [Scenario.Marshal], the field
// reference in docs/scenarios.md and the JSON Schema
// docs/scenario.schema.json all come from it. The last two are generated
// (go generate ./scenarios), as is the table of the catalogue in
// docs/scenarios.md; a test fails when any is stale. Field doc
// comments are written for the reader of a scenario file, as they become
// the reference; "X is" at their start is dropped there.
package scenarios

//go:generate go test -run ^TestGeneratedReference$ -update

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/nemesis"
	"github.com/deliverycheck/deliverycheck/pipeline"
	"github.com/deliverycheck/deliverycheck/pipeline/consumer"
	"github.com/deliverycheck/deliverycheck/pipeline/intruder"
	"github.com/deliverycheck/deliverycheck/pipeline/processor"
	"github.com/deliverycheck/deliverycheck/pipeline/producer"
	"github.com/deliverycheck/deliverycheck/pipeline/redrive"
	"github.com/deliverycheck/deliverycheck/pipeline/relay"
	"github.com/deliverycheck/deliverycheck/verdict"
)

// Scenario is one run's whole shape. Its zero value is not useful: get
// one from [Parse], [Load], [Lookup], [Builtin] or [Default], which fill in
// every default, and call [Scenario.Validate] after changing fields by
// hand ([Scenario.Set] validates by itself). Empty Guarantees.Subscriptions
// means every workload subscription; [Scenario.CheckGuarantees] is the set
// the checker judges against.
type Scenario struct {
	// Name identifies the scenario: lowercase letters, digits and `-`, at
	// most 63, not starting with `-`. A file without one is named after
	// the file.
	Name string `yaml:"name" check:"name"`
	// Description is one line saying what the scenario shows.
	Description string `yaml:"description,omitempty" check:"one-line"`
	// Broker is the broker and its settings; required: `kafka`,
	// `rabbitmq`, or a mapping (below).
	Broker Broker `yaml:"broker"`
	// Postgres is the database's shape; one server by default.
	Postgres Postgres `yaml:"postgres,omitempty"`
	// Variants picks the implementation of each pipeline component; the
	// defaults are the correct ones.
	Variants Variants `yaml:"variants"`
	// Workload is what the producers do and how many workers take part.
	Workload Workload `yaml:"workload"`
	// System is a team's own tables, business transaction, relay and
	// consumers under test, replacing parts of the built-in pipeline (see
	// docs/contract.md).
	System System `yaml:"system,omitempty"`
	// Stage puts a transactional consume-transform-produce stage between
	// the events topic and output topics (Kafka only; docs/history.md,
	// "Transactional stage"); none by default.
	Stage *Stage `yaml:"stage,omitempty"`
	// Security is the events' authority: what the relay stamps on every
	// event (tenant, time, signature) and what correct consumers check
	// before they apply one (docs/security.md); none by default, when
	// consumers check only which types each source may emit.
	Security Security `yaml:"security,omitempty"`
	// Observability is what the run watches besides the history: an
	// alert on consumer lag, and how the trace context travels.
	Observability Observability `yaml:"observability,omitempty"`
	// Nemesis is the faults of the run; none by default.
	Nemesis Nemesis `yaml:"nemesis"`
	// Guarantees are what the run promises, overriding the default
	// effectively-once: a preset, the `check --guarantees` form, or a
	// mapping.
	Guarantees checker.Guarantees `yaml:"guarantees"`
	// Drain bounds the wait for the pipeline to settle once the faults
	// heal.
	Drain Drain `yaml:"drain"`
	// Expect is the verdict the catalogue's detection matrix asserts;
	// nothing stated by default.
	Expect Expect `yaml:"expect,omitempty"`
	// Images overrides the container image of each server on the
	// containers runtime (the local runtime ignores it).
	Images Images `yaml:"images,omitempty"`
	// Seed makes the run reproducible: producers' key choices and the
	// random schedule derive from it. 0 means the run picks one (and
	// records it); `run --seed` overrides.
	Seed uint64 `yaml:"seed"`

	// Source is where the scenario came from ("builtin/<name>.yaml", a
	// file path, or "" when built in code); errors name it.
	Source string `yaml:"-"`

	// written is where each value of the system section was written, by
	// field path (system.transaction[1]): Parse and Set keep it so the
	// errors only the database finds, when the run starts, name the line
	// to fix as the decoder's do. A scenario changed in Go keeps the
	// positions of its file.
	written map[string]position
}

// System is the system under test when it is (partly) a team's own: its
// tables, its business transaction, its relay and consumers as commands,
// and the queries that read back what its consumers did. The whole
// contract, with the environment a command gets and a worked example
// (examples/consumer), is docs/contract.md.
type System struct {
	// Setup is SQL run once before any worker starts: the team's tables.
	Setup string `yaml:"setup,omitempty"`
	// Transaction is the business transaction each producer op runs
	// instead of the built-in outbox insert, one statement per item, with
	// `:event_id`, `:aggregate_id`, `:version`, `:payload`, `:type`,
	// `:source`, `:traceparent`, `:topic` (Kafka) and `:exchange` (RabbitMQ) placeholders
	// (docs/contract.md says what each binds).
	Transaction []string `yaml:"transaction,omitempty" check:"statement"`
	// Relay replaces the built-in relay with a command.
	Relay *Command `yaml:"relay,omitempty"`
	// Consumer replaces the built-in consumers of every subscription with
	// a command.
	Consumer *Command `yaml:"consumer,omitempty"`
	// Consumers replaces the built-in consumers of the subscriptions it
	// names, a command each; it wins over consumer.
	Consumers map[string]*Command `yaml:"consumers,omitempty" key:"subscription"`
	// Processor replaces the built-in processors of the transactional
	// stage (processor-0, ...) with a command (docs/contract.md,
	// "Processor"); only with a stage section, so Kafka only.
	Processor *Command `yaml:"processor,omitempty"`
	// EffectsQuery returns one row per effect the team's consumers applied:
	// `event_id`, `consumer`; optionally `aggregate_id`, `version`,
	// `source`, `committed_at` (when the effect committed:
	// `pg_xact_commit_timestamp(xmin)`; `applied_at` is its older name),
	// which orders effects. Required with the team's consumers.
	EffectsQuery string `yaml:"effects_query,omitempty"`
	// DeadLettersQuery returns one row per event the team's consumers
	// dead-lettered: `event_id`, `consumer`; optionally `reason`. Required
	// with the team's consumers when the workload has poison events.
	DeadLettersQuery string `yaml:"dead_letters_query,omitempty"`
	// InboxQuery returns one row per inbox mark the team's consumers hold:
	// `event_id`, `consumer`; optionally `source`. With it an inbox mark
	// without its effect, or an effect without its mark, is an
	// inbox-mismatch. Only with the team's consumers.
	InboxQuery string `yaml:"inbox_query,omitempty"`
	// PendingQuery returns one row with one integer: how many outbox rows
	// the team's relay has not published yet. Without it a drain that goes
	// quiet while events are missing cannot tell lost from late, and the
	// verdict is unknown. Only with the team's relay.
	PendingQuery string `yaml:"pending_query,omitempty"`
}

// Stage is a transactional consume-transform-produce stage: processors
// (processor-0, ...) read the events topic read_committed in one
// consumer group and, for each input record, write one record to each
// output topic and commit the input offsets in one Kafka transaction,
// with a stable transactional.id per processor (a restart fences the old
// one), aborting a share of transactions on purpose and retrying their
// inputs. A reader (reader-0) reads the output topics during the whole
// run, the drain waits for the stage, and the final read reads the output
// topics and their offsets. The checker then judges Kafka's exactly-once
// per input record. system.processor replaces the processors with a
// team's command. Kafka only. Give it at least one field
// (`stage: {processors: 1}`): as for every optional section, an empty
// mapping is no stage.
type Stage struct {
	// Processors is how many processor processes share the stage's
	// consumer group, overriding the default 1.
	Processors int `yaml:"processors,omitempty" range:">=1,zero=default"`
	// Outputs are the output topics, each prefixed with the run's
	// namespace like the events topic, overriding the default [invoices,
	// revenue].
	Outputs []string `yaml:"outputs,omitempty" check:"name"`
	// AbortRatio is the share of transactions aborted on purpose and
	// retried, overriding the default 0.33: without an abort no reader
	// had an aborted record to skip, and the stage's facts are not
	// established.
	AbortRatio float64 `yaml:"abort_ratio,omitempty" range:">0,<1,zero=default"`
	// Processor is how the processors commit their input offsets:
	// `transactional`, the default and correct (in the transaction that
	// writes the outputs); `offsets-after`, known-bad (after that
	// transaction commits, outside it: a crash between the two writes
	// the outputs again); or `idempotent`, known-bad (no transaction: an
	// idempotent producer writes the outputs, then the offsets are
	// committed; a crash between the two writes the outputs again, and
	// `abort_ratio` does not apply); `random-id`, known-bad (a new
	// random transactional.id on every start, offsets sent to the
	// transaction by group id alone: a zombie's late commit is not
	// fenced and writes its outputs again); or `offsets-before`,
	// known-bad (the offsets committed before the transaction that
	// writes the outputs, outside it: a crash between the two loses
	// those outputs).
	Processor processor.Variant `yaml:"processor,omitempty" enum:"processor variant"`
	// Reader is the isolation level of the reader of the output topics:
	// `read_committed`, the default and correct, or `read_uncommitted`,
	// known-bad: it reads the records of aborted transactions.
	Reader string `yaml:"reader,omitempty" enum:"isolation level"`
	// Effect is what the processors also write to PostgreSQL per input,
	// inside their loop, before the Kafka transaction ends (the seeds'
	// boundary of exactly-once): `none`, the default; `plain`, known-bad
	// for the database (an effects row per input: every input read
	// again, after an abort on purpose or a crash, writes it again, so
	// `abort_ratio` alone duplicates it); or `inbox`, the fix (in the
	// same database transaction an inbox mark keyed by the event id, and
	// the effect only if the mark is new). The effect is subscription
	// `processor`'s, judged like any subscription's (`duplicate-effect`,
	// `lost`) and shown beside the topics: "exactly once on Kafka's
	// topics; at least once on the database". Not with poison events.
	Effect processor.Effect `yaml:"effect,omitempty" enum:"processor effect"`
}

// Security is the run's event authority (docs/security.md). The relay
// (the built-in one, or a team's given DELIVERYCHECK_SIGNING_KEY and
// DELIVERYCHECK_TENANT) puts the tenant, the outbox row's creation time
// and, with sign, a signature on every event; a correct consumer rejects
// an event that fails a check, in this order: authority, tenant, version
// ahead, freshness, signature, and dead-letters it at once with the
// reason. The trusting consumer checks none of it. Give it at least one
// field: as for every optional section, an empty mapping is none.
type Security struct {
	// Sign makes the relay sign every event (HMAC-SHA256 under a 32-byte
	// key the run mints) and correct consumers verify the signature.
	Sign bool `yaml:"sign,omitempty"`
	// Tenant is the run's tenant: the relay sends it with every event and
	// correct consumers reject an event of any other. Empty: no tenant,
	// no check.
	Tenant string `yaml:"tenant,omitempty" check:"name"`
	// Freshness is the oldest an event's time may be when a consumer
	// takes it; older is rejected as stale (what stops a replay of a
	// real, correctly signed event). 0 is no check. It must exceed the
	// run (workload.duration plus drain.timeout), so no real event goes
	// stale.
	Freshness time.Duration `yaml:"freshness,omitempty" range:">=0"`
	// MaxVersionAhead is how far past its aggregate's applied version (0
	// when none is) an event's version may be; further is rejected. 0 is
	// no check.
	MaxVersionAhead int64 `yaml:"max_version_ahead,omitempty" range:">=0"`
	// Authority is, per workload source, the event types it may emit,
	// overriding the default: every workload source may emit
	// `OrderConfirmed` only.
	Authority map[string][]string `yaml:"authority,omitempty" key:"source" keycheck:"source" check:"event-type"`
	// Intruder is what the fault `intrude` publishes and with which
	// broker rights (docs/security.md).
	Intruder Intruder `yaml:"intruder,omitempty"`
}

// Intruder is the fault `intrude`'s shape: its broker user's rights, the
// kinds of forged event it sends and how many of each.
type Intruder struct {
	// Permissions are the broker rights of the intruder's own user:
	// `publish` (the default: only the consumers stand in its way) or
	// `none` (least privilege: the broker refuses its publishes).
	Permissions intruder.Permissions `yaml:"permissions,omitempty" enum:"intruder permissions"`
	// Kinds are what it sends, overriding the default, the six forged
	// kinds (type, tenant, signature-missing, signature-wrong, replay,
	// version-ahead). The hostile kinds (oversize, compression-bomb,
	// deep-json, invalid-utf8, unknown-type, many-headers) are sent only
	// when listed here.
	Kinds []intruder.Kind `yaml:"kinds,omitempty" enum:"intruder kind"`
	// PerKind is how many messages of each kind it sends, overriding the
	// default 2.
	PerKind int `yaml:"per_kind,omitempty" range:">=1,zero=default"`
}

// DefaultPerKind is how many messages of each kind the intruder sends.
const DefaultPerKind = intruder.DefaultPerKind

// Enabled reports whether the scenario has a security section.
func (s Security) Enabled() bool {
	return s.Sign || s.Tenant != "" || s.Freshness != 0 || s.MaxVersionAhead != 0 || len(s.Authority) > 0 || !s.Intruder.zero()
}

func (in Intruder) zero() bool { return in.Permissions == "" && len(in.Kinds) == 0 && in.PerKind == 0 }

// WithDefaults is in with every default filled in: publish, the forged
// kinds, DefaultPerKind of each.
func (in Intruder) WithDefaults() Intruder {
	if in.Permissions == "" {
		in.Permissions = intruder.Publish
	}
	if len(in.Kinds) == 0 {
		in.Kinds = intruder.Kinds()
	} else {
		in.Kinds = slices.Clone(in.Kinds)
	}
	if in.PerKind == 0 {
		in.PerKind = DefaultPerKind
	}
	return in
}

func (s Security) clone() Security {
	c := s
	c.Intruder.Kinds = slices.Clone(s.Intruder.Kinds)
	if s.Authority != nil {
		c.Authority = make(map[string][]string, len(s.Authority))
		for k, v := range s.Authority {
			c.Authority[k] = slices.Clone(v)
		}
	}
	return c
}

// pipelineSecurity is the pipeline's view of Security, nil without one.
func (s Scenario) pipelineSecurity() *pipeline.Security {
	if !s.Security.Enabled() {
		return nil
	}
	sec := s.Security.clone()
	return &pipeline.Security{Sign: sec.Sign, Tenant: sec.Tenant, Freshness: sec.Freshness, MaxVersionAhead: sec.MaxVersionAhead, Authority: sec.Authority}
}

// pipelineIntruder is the intruder the pipeline readies: the security
// section's, when the timeline has an intrude step (its user is made
// only for a run that uses it); nil otherwise.
func (s Scenario) pipelineIntruder() *intruder.Config {
	if !s.Security.Enabled() || !slices.ContainsFunc(s.Nemesis.Timeline, func(st nemesis.Step) bool { return st.Fault.Kind == nemesis.Intrude }) {
		return nil
	}
	in := s.Security.Intruder.WithDefaults()
	return &intruder.Config{Permissions: in.Permissions, Kinds: in.Kinds, PerKind: in.PerKind}
}

// Command is an external component: a program the harness starts,
// supervises, kills and restarts like a built-in worker.
type Command struct {
	// Command is the program and its arguments, a list. A relative
	// program path is resolved against dir.
	Command []string `yaml:"command" check:"program"`
	// Env is variables added to the environment the contract gives the
	// command.
	Env map[string]string `yaml:"env,omitempty" key:"name" keycheck:"env"`
	// Dir is the working directory; relative to the scenario file's
	// directory, which is also the default.
	Dir string `yaml:"dir,omitempty"`
	// Failpoints names the crash windows the component marks with
	// `failpoint.Inject`. The random schedule arms them; timeline and
	// nemesis.failpoints terms must use them. Empty: the component has
	// none, and crash faults on it are random SIGKILLs.
	Failpoints []string `yaml:"failpoints,omitempty" check:"failpoint"`
}

// TeamFailpoints maps each of the team's workers to the failpoints its
// command declares (nil when it declares none).
func (s Scenario) TeamFailpoints() map[string][]string {
	out := map[string][]string{}
	for _, w := range s.externalWorkers() {
		out[w] = slices.Clone(s.commandOf(w).Failpoints)
	}
	return out
}

// commandOf is the team command behind worker w, or nil.
func (s Scenario) commandOf(w string) *Command {
	if strings.HasPrefix(w, "relay-") {
		return s.System.Relay
	}
	if strings.HasPrefix(w, "processor-") {
		return s.System.Processor
	}
	if sub, ok := strings.CutPrefix(w, "consumer-"); ok {
		if i := strings.LastIndexByte(sub, '-'); i >= 0 {
			return s.System.consumerFor(sub[:i])
		}
	}
	return nil
}

// External reports whether any component is a team's.
func (s System) External() bool {
	return s.Relay != nil || s.Consumer != nil || len(s.Consumers) > 0
}

// consumerFor is the command replacing sub's consumers, or nil.
func (s System) consumerFor(sub string) *Command {
	if c, ok := s.Consumers[sub]; ok {
		return c
	}
	return s.Consumer
}

// Images name the container image of each server when the run uses the
// containers runtime (`--runtime containers`, or `auto` with an engine);
// the local runtime ignores them. An empty one keeps the default:
// `$DELIVERYCHECK_IMAGE_<SERVER>`, else the official image.
// `--image postgres=postgres:16` (or `--set images.postgres=postgres:16`)
// overrides the file. Any image that honours the official one's
// environment contract works (images/README.md builds such images from
// Debian packages).
type Images struct {
	// Postgres is the PostgreSQL image, overriding the default postgres:17.
	Postgres string `yaml:"postgres,omitempty" check:"image"`
	// Kafka is the Kafka image, overriding the default apache/kafka:4.1.1.
	Kafka string `yaml:"kafka,omitempty" check:"image"`
	// RabbitMQ is the RabbitMQ image, overriding the default
	// rabbitmq:4.1-management.
	RabbitMQ string `yaml:"rabbitmq,omitempty" check:"image"`
}

// Map is the overrides keyed by server name, without the empty ones.
func (i Images) Map() map[string]string {
	out := map[string]string{}
	for k, v := range map[string]string{"postgres": i.Postgres, "kafka": i.Kafka, "rabbitmq": i.RabbitMQ} {
		if v != "" {
			out[k] = v
		}
	}
	return out
}

// Broker is the broker and its settings. `broker: rabbitmq` is short for
// `broker: {kind: rabbitmq}`.
type Broker struct {
	// Kind is the broker; required.
	Kind string `yaml:"kind" enum:"broker"`
	// Partitions of the Kafka topic, overriding the default 3. Ignored on
	// RabbitMQ.
	Partitions int32 `yaml:"partitions" range:">=1"`
	// MaxAttempts is how many deliveries a poison event gets before it is
	// dead-lettered, overriding the default 5 (RabbitMQ's x-delivery-limit
	// and the consumers' own count).
	MaxAttempts int64 `yaml:"max_attempts" range:">=1"`
	// Unbound lists subscriptions whose RabbitMQ binding is left out on
	// purpose: what exposes the unroutable relay. RabbitMQ only; each must
	// be a workload subscription.
	Unbound []string `yaml:"unbound,omitempty" check:"name"`
	// Prefetch is each RabbitMQ consumer process's prefetch window (how
	// many deliveries it may hold unacknowledged), overriding the
	// pipeline's default 32 (0 in Go keeps it). Ignored on Kafka. A larger
	// window lets a process's consumer_workers each take a batch; it also
	// decides how deliveries spread over competing consumers (a paused one
	// holds a full window).
	Prefetch int `yaml:"prefetch,omitempty" range:">=1,zero=default"`
	// Nodes is how many broker nodes run, overriding the default 1. With
	// 3, Kafka is a KRaft cluster of three combined broker+controller
	// nodes (replication factor 3, min.insync.replicas 2) and RabbitMQ a
	// three-node cluster whose quorum queues have a member on each. Each
	// node is its own process in its own network namespace (on the
	// containers runtime its own container, in a namespace the harness
	// enters from the host), behind its own proxy link, so faults can
	// target one: kafka-0, rabbitmq-2 (as root; anything else is refused
	// before the run starts, saying what is missing).
	Nodes int `yaml:"nodes,omitempty" range:">=1,zero=default"`
	// QueueType is the RabbitMQ queue type of the subscriptions' queues:
	// `quorum` (the default: replicated, every message fsynced before
	// the confirm, a delivery limit) or `classic` (a message published
	// non-persistent lives in memory only, and a restart drops it; no
	// delivery limit, so no poison events). With broker.nodes above 1,
	// classic is a known-bad setting: a classic queue lives on the one
	// node it was declared on, and that node's disk is all there is.
	// RabbitMQ only.
	QueueType string `yaml:"queue_type,omitempty" enum:"queue type"`
	// ReplicationFactor is the replicas of the Kafka topic, overriding
	// the default of one per node up to 3. 1 is a known-bad setting: the
	// topic lives on one broker, and that broker's disk is all there is.
	// Kafka with broker.nodes above 1 only; at most broker.nodes.
	ReplicationFactor int `yaml:"replication_factor,omitempty" range:">=1,zero=default"`
	// MinInsyncReplicas is Kafka's min.insync.replicas: how many replicas
	// must have an acks=all record before the leader acknowledges it,
	// overriding the default 2. 1 is a known-bad setting: a leader whose
	// followers fell out of the ISR acknowledges alone. Kafka with
	// broker.nodes above 1 only; at most the replication factor.
	MinInsyncReplicas int `yaml:"min_insync_replicas,omitempty" range:">=1,zero=default"`
	// UncleanLeaderElection sets Kafka's
	// unclean.leader.election.enable: when no in-sync replica is left, an
	// out-of-sync one may lead, and the records only the old leader had
	// (acknowledged ones among them) are truncated away when it rejoins.
	// Known-bad; off by default. Kafka with broker.nodes above 1 only.
	UncleanLeaderElection bool `yaml:"unclean_leader_election,omitempty"`
	// OffsetReset is where a Kafka consumer group with no committed
	// offset starts: `earliest` (the default: a group that joins late
	// replays the whole topic) or `latest` (known-bad: it skips what
	// was published before it joined). Kafka only.
	OffsetReset string `yaml:"offset_reset,omitempty" enum:"offset reset"`
}

// Postgres is the database the outbox, the inboxes and the effects live
// in.
type Postgres struct {
	// Standby adds a streaming standby to the database: `async` (a commit
	// is acknowledged once the primary has flushed it) or `sync` (the
	// primary names the standby in synchronous_standby_names and
	// synchronous_commit is remote_apply: a commit is acknowledged once
	// the standby has applied it); `none`, the default, is the single
	// server. The primary and the standby are nodes postgres-0 and
	// postgres-1, each its own process in its own network namespace,
	// behind its own proxy link. A failover kills the primary, promotes
	// the standby and points the database link at it, so every client and
	// the final read reach the new primary; after it, an async standby has
	// lost commits the application was told had succeeded (local runtime,
	// as root; anything else is refused before the run starts).
	Standby string `yaml:"standby,omitempty" enum:"standby"`
}

// Variants picks the implementation of each component; the defaults are
// the correct ones (outbox, polling, inbox), the others known-bad.
// docs/pipeline.md says what each does and which fault exposes it.
type Variants struct {
	// Producer is how producers write an event; `outbox` is correct, the
	// others are known-bad.
	Producer producer.Variant `yaml:"producer" enum:"producer variant"`
	// Relay is how the outbox reaches the broker; `polling` and
	// `debezium` (Kafka only: Debezium's outbox event router in Kafka
	// Connect, see docs/contract.md) are correct, the others are known-bad
	// (`unroutable` is RabbitMQ only).
	Relay relay.Variant `yaml:"relay" enum:"relay variant"`
	// Consumer is how consumers apply an event; `inbox` is correct, the
	// others are known-bad.
	Consumer consumer.Variant `yaml:"consumer" enum:"consumer variant"`
	// Redrive is how a redrive step republishes dead letters; `canary`
	// is correct, `new-ids` and `blind` are known-bad.
	Redrive redrive.Variant `yaml:"redrive,omitempty" enum:"redrive variant"`
}

// Workload is what the producers do and how many workers take part.
type Workload struct {
	// Duration is how long producers run, overriding the default 30s;
	// faults run meanwhile, then everything heals and the run drains. A
	// timeline that ends at or after it makes producers run until a
	// second after its last fault heals, and the run says so at start.
	// A step that must wait for its server to come back from the step
	// before it (a restart slow on a loaded machine) starts late, and
	// producers run on until it has healed. `run --duration` overrides.
	Duration time.Duration `yaml:"duration" range:">0"`
	// Producers is the number of producers, overriding the default 2; each
	// is its own history process with its own connection.
	Producers int `yaml:"producers" range:">=1"`
	// ProducerProcesses is how many OS processes run the producers; 0
	// is one per producer. With fewer, each process runs a contiguous
	// share of them as clients (a heavier load for less CPU, as pgbench
	// runs many clients per thread) and is named after its first one:
	// failpoints are armed in, and crashes take down, a whole process.
	ProducerProcesses int `yaml:"producer_processes,omitempty" range:">=0"`
	// Rate is ops per second per producer, overriding the default 50; 0
	// is as fast as possible.
	Rate float64 `yaml:"rate" range:">=0"`
	// RateTimeline changes the rate over the run: each step, written
	// "at 0.5s: 150/s for 2s", runs every producer at that many ops per
	// second from its time (since the workload's start, as the nemesis
	// timeline's steps) until the next step, or for its window and then
	// back to rate. Steps are in time order, do not overlap and start
	// before the workload's duration.
	RateTimeline []RateStep `yaml:"rate_timeline,omitempty"`
	// Keys is how many aggregates (orders) ops are spread over,
	// overriding the default 10. Fewer keys mean more versions per key,
	// hence more chances to reorder.
	Keys int `yaml:"keys" range:">=1"`
	// PoisonRatio is the share of events no consumer accepts; each must
	// reach the DLQ after broker.max_attempts.
	PoisonRatio float64 `yaml:"poison_ratio" range:">=0,<1"`
	// NewSchemaRatio is the share of events written in schema version 2,
	// each the only event of an aggregate of its own: consumers refuse
	// it (retried, then dead-lettered) until a deploy-fix step
	// redeploys them accepting it, and a redrive brings it back.
	NewSchemaRatio float64 `yaml:"new_schema_ratio,omitempty" range:">=0,<1"`
	// AbortRatio is the share of transactions aborted after publishing;
	// only the publish-then-commit producer does that (its phantoms).
	AbortRatio float64 `yaml:"abort_ratio" range:">=0,<1"`
	// Sources are the CloudEvents sources events come from, overriding
	// the default [/orders]. With two or more, each producer takes them
	// in turn and every round shares one event id, so the same id occurs
	// under each source, as CloudEvents allows (an event is its source +
	// id): an inbox keyed by the id alone drops all but one.
	Sources []string `yaml:"sources,omitempty" check:"source"`
	// Subscriptions are the independent consumer groups / queues, each
	// with its own inbox, overriding the default [inventory, email].
	Subscriptions []string `yaml:"subscriptions" check:"name"`
	// Consumers is the number of consumer processes per subscription,
	// overriding the default 1. More than one on RabbitMQ makes them
	// compete for one queue.
	Consumers int `yaml:"consumers" range:">=1"`
	// ConsumerWorkers is deliveries in flight per consumer process; 0
	// keeps the pipeline default (one per partition on Kafka, 1 on
	// RabbitMQ, where more reorders one aggregate's events).
	ConsumerWorkers int `yaml:"consumer_workers" range:">=0"`
	// ConsumerWork is how long applying one effect takes inside the
	// consumer's transaction, as a real handler's work does; it widens the
	// window between a check and its act (bad-check-then-act uses 20ms).
	// 0 is none.
	ConsumerWork time.Duration `yaml:"consumer_work,omitempty" range:">=0"`
	// ConsumerBatch is the most deliveries a consumer applies in one
	// transaction, overriding the consumer's default (100 for the inbox
	// consumer); consumer_work is spent per transaction, so 1 makes it
	// bound each consumer's capacity. 0 keeps the default.
	ConsumerBatch int `yaml:"consumer_batch,omitempty" range:">=0"`
	// LateSubscriptions are subscriptions (Kafka) whose consumers do not
	// start with the run: a `join <subscription>` step starts the first,
	// and the group replays the topic from where broker.offset_reset
	// says. Each is a subscription as the others are (its own inbox and
	// effects) and must be listed in subscriptions too.
	LateSubscriptions []string `yaml:"late_subscriptions,omitempty" check:"name"`
	// Relays is the number of relay processes; 0 keeps the pipeline
	// default (1 with the outbox producer, none otherwise: the
	// direct-publishing producers must have none).
	Relays int `yaml:"relays" range:">=0"`
	// RelayBatch is the most outbox rows a relay publishes per
	// transaction; 0 keeps the relay default (100).
	RelayBatch int `yaml:"relay_batch" range:">=0"`
}

// Observability is what a run watches besides the history (issue 25).
type Observability struct {
	// LagAlert is an alert on each subscription's consumer lag, as a
	// Prometheus rule `lag > threshold for <for>`: the report says when
	// it would have fired. It never changes the verdict.
	LagAlert *LagAlert `yaml:"lag_alert,omitempty"`
	// Traces is how the trace context travels: `propagate` (the
	// default: one trace from the producer to the consumer) or
	// `per-attempt` (the relay starts a new trace on every publish
	// attempt).
	Traces string `yaml:"traces,omitempty" enum:"trace mode"`
}

// LagAlert is an alert on consumer lag: it fires once a subscription's
// lag has stayed above Threshold for For.
type LagAlert struct {
	// Threshold is the lag, in records (Kafka) or ready messages
	// (RabbitMQ), the alert watches for.
	Threshold int64 `yaml:"threshold" range:">=0"`
	// For is how long the lag must stay above the threshold before the
	// alert fires; 0 fires at once.
	For time.Duration `yaml:"for,omitempty" range:">=0"`
}

// Nemesis is the faults of a run: a fixed timeline, a seeded random
// schedule and failpoints armed at start, which may all be combined.
type Nemesis struct {
	// Timeline is a fixed schedule, each step written as a person says
	// it, "at 2s: kill relay-0" (Timeline steps in docs/scenarios.md has
	// the syntax).
	Timeline []nemesis.Step `yaml:"timeline,omitempty"`
	// Random, when set, adds a seeded random schedule. `random:` or
	// `random: on` alone means every family every 5s; `random: off`
	// removes it.
	Random *Random `yaml:"random,omitempty"`
	// Failpoints are gofail-style terms armed at start, by worker:
	// `relay-0: ["relay.after-publish-before-mark=kill(2)"]`; a term or a
	// list.
	Failpoints map[string][]string `yaml:"failpoints,omitempty" key:"worker" check:"failpoint-term"`
	// RestartDelay is how long a crashed worker stays down before the
	// supervisor starts it again; 0 keeps the default (200ms).
	RestartDelay time.Duration `yaml:"restart_delay,omitempty" range:">=0"`
}

// Random configures the seeded random schedule of package nemesis: faults
// drawn from the families alternate with quiet periods of the interval.
type Random struct {
	// Families are the nemesis families to draw faults from, overriding
	// the default: all of them.
	Families []string `yaml:"families" enum:"fault family"`
	// Interval is the quiet time between faults, overriding the default
	// 5s.
	Interval time.Duration `yaml:"interval" range:">0"`
	// SeedOffset is added to the scenario's seed, so two random parts of
	// a suite can differ while both replay from one --seed.
	SeedOffset uint64 `yaml:"seed_offset,omitempty"`
	// Targets limits the faults to these services and workers (a trailing
	// `*` matches several); empty means every target the faults can reach.
	Targets []string `yaml:"targets,omitempty"`
}

// Drain bounds the wait for the pipeline to settle after the faults heal.
type Drain struct {
	// Timeout is the deadline for every committed event to be applied or
	// dead-lettered, overriding the default 60s; a drain that misses it
	// makes the verdict unknown, never lost.
	Timeout time.Duration `yaml:"timeout" range:">0"`
	// Quiet is how long nothing must move for the drain to be complete,
	// overriding the default 2s.
	Quiet time.Duration `yaml:"quiet" range:">0"`
}

// Expect is what a catalogue scenario must produce; the run's verdict
// (package verdict) says whether it did. In a file it is the fields of
// expectFields.
type Expect = verdict.Expectation

// The defaults a scenario starts from, before its file is read.
const (
	DefaultDuration     = 30 * time.Second
	DefaultProducers    = 2
	DefaultRate         = 50
	DefaultKeys         = 10
	DefaultConsumers    = 1
	DefaultPartitions   = 3
	DefaultMaxAttempts  = 5
	DefaultDrainTimeout = 60 * time.Second
	DefaultQuiet        = 2 * time.Second
	DefaultInterval     = 5 * time.Second
	DefaultGuarantees   = "effectively-once"
)

// Default returns the scenario every file starts from: the correct
// pipeline, effectively-once, no faults. Broker is left empty: a scenario
// must name one.
func Default() Scenario {
	g, _ := checker.Preset(DefaultGuarantees) // TestDefaultGuarantees checks the name
	return Scenario{
		Broker:   Broker{Partitions: DefaultPartitions, MaxAttempts: DefaultMaxAttempts},
		Variants: Variants{Producer: producer.Outbox, Relay: relay.Polling, Consumer: consumer.Inbox},
		Workload: Workload{
			Duration:      DefaultDuration,
			Producers:     DefaultProducers,
			Rate:          DefaultRate,
			Keys:          DefaultKeys,
			Subscriptions: []string{"inventory", "email"},
			Consumers:     DefaultConsumers,
		},
		Guarantees: g,
		Drain:      Drain{Timeout: DefaultDrainTimeout, Quiet: DefaultQuiet},
	}
}

// defaultRandom is what "random:" with no fields means.
func defaultRandom() *Random {
	return &Random{Families: slices.Sorted(maps.Keys(nemesis.Families())), Interval: DefaultInterval}
}

// PipelineConfig is the pipeline the scenario runs. Name is left empty:
// the caller makes it unique per run (a shared cluster may run one
// scenario twice). Zero fields keep the pipeline's own defaults.
func (s Scenario) PipelineConfig() pipeline.Config {
	var fps map[string][]string
	if len(s.Nemesis.Failpoints) > 0 {
		fps = make(map[string][]string, len(s.Nemesis.Failpoints))
		for w, ts := range s.Nemesis.Failpoints {
			fps[w] = slices.Clone(ts)
		}
	}
	return pipeline.Config{
		Broker:            s.Broker.Kind,
		Producers:         s.Workload.Producers,
		ProducerProcesses: s.Workload.ProducerProcesses,
		ProducerVariant:   s.Variants.Producer,
		Rate:              s.Workload.Rate,
		Keys:              s.Workload.Keys,
		PoisonRatio:       s.Workload.PoisonRatio,
		AbortRatio:        s.Workload.AbortRatio,
		Sources:           slices.Clone(s.Workload.Sources),
		Relays:            s.Workload.Relays,
		RelayVariant:      s.Variants.Relay,
		RelayBatch:        s.Workload.RelayBatch,
		Subscriptions:     slices.Clone(s.Workload.Subscriptions),
		Consumers:         s.Workload.Consumers,
		ConsumerVariant:   s.Variants.Consumer,
		ConsumerWorkers:   s.Workload.ConsumerWorkers,
		Prefetch:          s.Broker.Prefetch,
		QueueType:         s.Broker.QueueType,
		ConsumerWork:      s.Workload.ConsumerWork,
		MaxAttempts:       s.Broker.MaxAttempts,
		Partitions:        s.Broker.Partitions,
		Unbound:           slices.Clone(s.Broker.Unbound),
		Failpoints:        fps,
		RestartDelay:      s.Nemesis.RestartDelay,
		DrainTimeout:      s.Drain.Timeout,
		Quiet:             s.Drain.Quiet,
		Seed:              s.Seed,
		System:            s.pipelineSystem(),
		Stage:             s.pipelineStage(),
		Security:          s.pipelineSecurity(),
		Intruder:          s.pipelineIntruder(),
		NewSchemaRatio:    s.Workload.NewSchemaRatio,
		RedriveVariant:    s.Variants.Redrive,
		ConsumerBatch:     s.Workload.ConsumerBatch,
		RateSteps:         s.producerRateSteps(),
		LateSubscriptions: slices.Clone(s.Workload.LateSubscriptions),
		OffsetReset:       s.Broker.OffsetReset,
		Traces:            s.Observability.Traces,
	}
}

// pipelineStage is the pipeline's view of Stage, nil without one.
func (s Scenario) pipelineStage() *pipeline.Stage {
	if s.Stage == nil {
		return nil
	}
	return &pipeline.Stage{
		Processors:      s.Stage.Processors,
		Outputs:         slices.Clone(s.Stage.Outputs),
		AbortRatio:      s.Stage.AbortRatio,
		ReadUncommitted: s.Stage.Reader == ReadUncommitted,
		Variant:         s.Stage.Processor,
		Effect:          s.Stage.Effect,
	}
}

// pipelineSystem is the pipeline's view of System: statements bound,
// directories resolved against the scenario file's.
func (s Scenario) pipelineSystem() pipeline.System {
	sys := pipeline.System{
		Setup:            s.System.Setup,
		EffectsQuery:     s.System.EffectsQuery,
		DeadLettersQuery: s.System.DeadLettersQuery,
		InboxQuery:       s.System.InboxQuery,
		PendingQuery:     s.System.PendingQuery,
	}
	for p, pos := range s.written {
		if sys.Where == nil {
			sys.Where = map[string]string{}
		}
		sys.Where[p] = pos.String()
	}
	for _, t := range s.System.Transaction {
		st, err := producer.Bind(t)
		if err == nil { // Validate reported it otherwise
			sys.Transaction = append(sys.Transaction, st)
		}
	}
	base := ""
	if s.Source != "" && !strings.HasPrefix(s.Source, "builtin/") {
		base = filepath.Dir(s.Source)
	}
	ext := func(c *Command) pipeline.External {
		dir := c.Dir
		if !filepath.IsAbs(dir) && base != "" {
			dir = filepath.Join(base, dir)
		}
		if dir != "" {
			if abs, err := filepath.Abs(dir); err == nil {
				dir = abs
			}
		}
		return pipeline.External{Command: slices.Clone(c.Command), Env: maps.Clone(c.Env), Dir: dir}
	}
	if s.System.Relay != nil {
		e := ext(s.System.Relay)
		sys.Relay = &e
	}
	if s.System.Processor != nil {
		e := ext(s.System.Processor)
		sys.Processor = &e
	}
	for _, sub := range s.Workload.Subscriptions {
		if c := s.System.consumerFor(sub); c != nil {
			if sys.Consumers == nil {
				sys.Consumers = map[string]pipeline.External{}
			}
			sys.Consumers[sub] = ext(c)
		}
	}
	return sys
}

// CheckGuarantees is what the checker judges the run against: the declared
// guarantees, normalized, with every workload subscription required when
// none are named (so a subscription that applied nothing shows its events
// as lost instead of going unnoticed).
func (s Scenario) CheckGuarantees() checker.Guarantees {
	g := s.Guarantees
	if len(g.Subscriptions) == 0 {
		g.Subscriptions = slices.Clone(s.Workload.Subscriptions)
	}
	return g.Normalize()
}

// RandomSeed is the seed of the random schedule: the scenario's seed plus
// the random part's offset. Set Seed first (run picks one when it is 0).
func (s Scenario) RandomSeed() uint64 {
	if s.Nemesis.Random == nil {
		return s.Seed
	}
	return s.Seed + s.Nemesis.Random.SeedOffset
}

func (s System) clone() System {
	c := s
	c.Transaction = slices.Clone(s.Transaction)
	cmd := func(x *Command) *Command {
		if x == nil {
			return nil
		}
		y := *x
		y.Command, y.Env, y.Failpoints = slices.Clone(x.Command), maps.Clone(x.Env), slices.Clone(x.Failpoints)
		return &y
	}
	c.Relay, c.Consumer, c.Processor = cmd(s.Relay), cmd(s.Consumer), cmd(s.Processor)
	if s.Consumers != nil {
		c.Consumers = make(map[string]*Command, len(s.Consumers))
		for k, v := range s.Consumers {
			c.Consumers[k] = cmd(v)
		}
	}
	return c
}

// StandbyKind is the database's standby, "async" or "sync", or "" for
// none (postgres.standby unset or "none" alike).
func (s Scenario) StandbyKind() string {
	if s.Postgres.Standby == "none" {
		return ""
	}
	return s.Postgres.Standby
}

// KnownBad reports whether any component is a deliberately broken variant,
// or a setting is (an asynchronous standby; a Kafka topic with one
// replica, a min ISR of 1, or unclean leader election; classic queues on
// a replicated RabbitMQ, where each lives on one node of several; a
// transactional stage whose processor commits offsets outside its
// transaction or has none, whose output topics are read
// read_uncommitted, or whose processor writes a database effect without
// an inbox; a max-backlog-age its consumers' ceiling cannot keep under
// its rate timeline, backlogAgeFloor). A trusting consumer is broken
// unless the broker refuses the run's intruder.
func (s Scenario) KnownBad() bool {
	correctRelay := s.Variants.Relay == relay.Polling || s.Variants.Relay == relay.Debezium
	b := s.Broker
	badSetting := s.Postgres.Standby == "async" || b.ReplicationFactor == 1 || b.MinInsyncReplicas == 1 || b.UncleanLeaderElection ||
		b.OffsetReset == broker.OffsetLatest ||
		b.QueueType == "classic" && b.Nodes > 1 ||
		s.Stage != nil && (s.Stage.Reader == ReadUncommitted || s.Stage.Processor == processor.OffsetsAfter || s.Stage.Processor == processor.Idempotent || s.Stage.Processor == processor.RandomID ||
			s.Stage.Processor == processor.OffsetsBefore ||
			s.Stage.Effect == processor.PlainEffect) ||
		s.Guarantees.MaxBacklogAge > 0 && s.backlogAgeFloor() > s.Guarantees.MaxBacklogAge
	if s.badRedrive() {
		return true
	}
	return s.Variants.Producer != producer.Outbox || !correctRelay || s.badConsumer() || badSetting
}

// badConsumer reports whether the consumer variant is a broken one. The
// trusting consumer is broken only where an intruder may publish: behind
// a broker that refuses the intruder (least privilege) it is what the
// broker protects, and the run shows the broker, not the consumer,
// stopped it.
func (s Scenario) badConsumer() bool {
	if s.Variants.Consumer == consumer.Trusting {
		in := s.pipelineIntruder()
		return in == nil || in.Permissions != intruder.None
	}
	return s.Variants.Consumer != consumer.Inbox
}

// clone is a deep copy, so Set can fail without touching the original.
func (s Scenario) clone() Scenario {
	c := s
	c.Broker.Unbound = slices.Clone(s.Broker.Unbound)
	c.Workload.Subscriptions = slices.Clone(s.Workload.Subscriptions)
	c.Workload.LateSubscriptions = slices.Clone(s.Workload.LateSubscriptions)
	c.Guarantees.Subscriptions = slices.Clone(s.Guarantees.Subscriptions)
	c.Nemesis.Timeline = slices.Clone(s.Nemesis.Timeline)
	c.System = s.System.clone()
	c.Security = s.Security.clone()
	c.written = maps.Clone(s.written)
	if s.Stage != nil {
		st := *s.Stage
		st.Outputs = slices.Clone(st.Outputs)
		c.Stage = &st
	}
	if s.Nemesis.Random != nil {
		r := *s.Nemesis.Random
		r.Families = slices.Clone(r.Families)
		r.Targets = slices.Clone(r.Targets)
		c.Nemesis.Random = &r
	}
	if s.Nemesis.Failpoints != nil {
		c.Nemesis.Failpoints = make(map[string][]string, len(s.Nemesis.Failpoints))
		for w, ts := range s.Nemesis.Failpoints {
			c.Nemesis.Failpoints[w] = slices.Clone(ts)
		}
	}
	return c
}
