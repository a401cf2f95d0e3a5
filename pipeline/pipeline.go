// Package pipeline deploys the outbox -> relay -> broker -> inbox pipeline
// of one run on a cluster.
//
// [Start] creates the schema and the broker topology and starts every
// worker as a supervised process; at the end the [Deployment] it returns
// stops the producers, drains, and reads the final state into the
// history. The components are its subpackages: producer, relay and
// consumer (each with known-bad variants), schema (the tables and the
// final read), debezium (Debezium as the relay) and worker (the body of
// one pipeline process); contract.go runs a team's own relay or
// consumers in their place.
//
// Read [Config] and [Deployment] first. A nemesis drives faults through
// [Deployment.Supervisor] (workers) and the cluster (servers and links).
package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/pipeline/consumer"
	"github.com/deliverycheck/deliverycheck/pipeline/debezium"
	"github.com/deliverycheck/deliverycheck/pipeline/intruder"
	"github.com/deliverycheck/deliverycheck/pipeline/producer"
	"github.com/deliverycheck/deliverycheck/pipeline/redrive"
	"github.com/deliverycheck/deliverycheck/pipeline/relay"
	"github.com/deliverycheck/deliverycheck/pipeline/schema"
	"github.com/deliverycheck/deliverycheck/pipeline/worker"
	"github.com/deliverycheck/deliverycheck/process/supervisor"
)

// Config is the shape of one run's pipeline.
type Config struct {
	// Broker is "kafka" or "rabbitmq".
	Broker string
	// Name makes the run's database, topic, queues and groups unique on a
	// shared cluster, overriding the default (derived from the time).
	Name string

	Producers int
	// ProducerProcesses is how many OS processes run the producers,
	// overriding the default of one per producer. With fewer, each
	// process runs a contiguous share of the producers as clients (see
	// worker.Spec.Clients) and is named after its first one, e.g.
	// producer-0 runs producer-0..3: failpoints and crashes act on the
	// process, so on all its clients at once.
	ProducerProcesses int
	ProducerVariant   producer.Variant
	// Rate is ops per second per producer; 0 is as fast as possible.
	Rate        float64
	Keys        int
	PoisonRatio float64
	AbortRatio  float64
	// Sources are the events' sources, overriding the producer's default
	// (/orders); with two or more they share event ids (see
	// producer.Config.Sources).
	Sources []string

	Relays       int
	RelayVariant relay.Variant
	RelayBatch   int

	Subscriptions   []string
	Consumers       int // per subscription
	ConsumerVariant consumer.Variant
	ConsumerWorkers int // deliveries in flight per consumer process
	// Prefetch is the RabbitMQ prefetch window of each consumer process,
	// overriding the default 32. Many workers in one process share it:
	// a larger window lets each take a batch while the others' run. It
	// also decides how deliveries spread over competing consumers (a
	// paused consumer holds a full window), which some scenarios' races
	// depend on, so it is not raised with the workers by default.
	Prefetch int
	// QueueType is the RabbitMQ queue type of the subscriptions' queues,
	// "" for quorum (broker.RabbitConfig.QueueType).
	QueueType string
	// ConsumerWork is how long each effect takes inside the consumer's
	// transaction (default none).
	ConsumerWork time.Duration
	MaxAttempts  int64

	// Partitions of the Kafka topic, overriding the default 3.
	Partitions int32
	// Unbound lists subscriptions whose RabbitMQ binding is missing
	// (what exposes the unroutable relay).
	Unbound []string

	// Failpoints armed at start, by worker name (e.g. "consumer-inventory-0").
	Failpoints map[string][]string

	// Stage, when set, puts a transactional consume-transform-produce
	// stage between the events topic and its output topics (Kafka only;
	// see stage.go).
	Stage *Stage

	// System is the team's own code under test, if any: its tables, its
	// business transaction, its relay and consumers, and how to read back
	// what its consumers did. See docs/contract.md.
	System System

	// Security, when set, is the run's event authority: the relay stamps
	// it on every event and the consumers check it (docs/security.md).
	Security *Security

	// RestartDelay is how long a crashed worker stays down.
	RestartDelay time.Duration
	// DrainTimeout bounds the drain, overriding the default 60s.
	DrainTimeout time.Duration
	// Quiet is how long the pipeline must make no progress, with nothing
	// left in the broker, for the drain to be complete; overriding the
	// default 2s.
	Quiet time.Duration
	Seed  uint64

	// Intruder, when set, readies the intrude fault (docs/security.md):
	// Start makes the intruder's broker user with these permissions
	// (Close removes it), Deployment.Intrude sends its forged events,
	// and the drain waits for each one the broker accepted. Its RunID,
	// Source, Key and Tenant default to the run's name, first source, a
	// workload key and Security.Tenant; Start signs its replays with the
	// run's key when the run signs.
	Intruder *intruder.Config

	// Operating the pipeline (issue 25).

	// NewSchemaRatio is the share of events written in schema version 2,
	// which consumers refuse until a deploy-fix.
	NewSchemaRatio float64
	// RedriveVariant is the redriver a redrive step runs.
	RedriveVariant redrive.Variant
	// RateSteps change each producer's Rate over the run, timed from
	// the workload's start (as the nemesis schedule is): Start moves
	// them onto the run's clock when it starts the producers
	// (Deployment.RateSteps).
	RateSteps []producer.RateStep
	// ConsumerBatch is the most deliveries a consumer applies in one
	// transaction, overriding the consumer's default.
	ConsumerBatch int
	// LateSubscriptions are subscriptions (Kafka) whose consumers are not
	// started with the run: a join step starts the first.
	LateSubscriptions []string
	// OffsetReset is where a Kafka group without a committed offset
	// starts: "earliest" (default) or "latest".
	OffsetReset string
	// Traces is how the trace context travels: "propagate" (default)
	// or "per-attempt".
	Traces string
}

func (c *Config) defaults() error {
	if c.Broker != "kafka" && c.Broker != "rabbitmq" {
		return fmt.Errorf("pipeline: unknown broker %q (valid: kafka, rabbitmq)", c.Broker)
	}
	if c.Name == "" {
		c.Name = "run" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	c.Name = strings.ToLower(c.Name)
	if c.Producers <= 0 {
		c.Producers = 1
	}
	if c.ProducerVariant == "" {
		c.ProducerVariant = producer.Outbox
	}
	if c.Keys <= 0 {
		c.Keys = 10
	}
	if c.Relays <= 0 && c.ProducerVariant == producer.Outbox {
		c.Relays = 1
	}
	if c.RelayVariant == "" {
		c.RelayVariant = relay.Polling
	}
	if len(c.Subscriptions) == 0 {
		c.Subscriptions = []string{"inventory", "email"}
	}
	if c.Consumers <= 0 {
		c.Consumers = 1
	}
	if c.ConsumerVariant == "" {
		c.ConsumerVariant = consumer.Inbox
	}
	if c.Partitions <= 0 {
		c.Partitions = 3
	}
	if c.ConsumerWorkers <= 0 && c.Broker == "kafka" {
		// One delivery per partition is in flight at a time, so a worker
		// per partition keeps order and uses them all. On RabbitMQ
		// concurrent workers reorder one aggregate's events; one it is.
		c.ConsumerWorkers = int(c.Partitions)
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 60 * time.Second
	}
	if c.Quiet <= 0 {
		c.Quiet = 2 * time.Second
	}
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	if c.Stage != nil {
		st := *c.Stage // the caller's stays as it was
		st.defaults()
		c.Stage = &st
	}
	if err := checkStage(*c); err != nil {
		return err
	}
	if err := c.checkGroups(); err != nil {
		return err
	}
	// Failpoints are armed in a process: a producer running as a client
	// of another's process has none of its own.
	procs := ProducerProcessNames(c.Producers, c.ProducerProcesses)
	for name := range c.Failpoints {
		if strings.HasPrefix(name, "producer-") && !slices.Contains(procs, name) {
			return fmt.Errorf("pipeline: failpoints for %s: no producer process has that name (they are %s)", name, strings.Join(procs, ", "))
		}
	}
	return nil
}

// System is a team's own components and schema, run under the same faults
// and checker as the built-in pipeline.
type System struct {
	// Setup is SQL run once, after the harness's own schema and before
	// any worker starts: the team's tables.
	Setup string
	// Transaction replaces the built-in producer's outbox insert (see
	// producer.Config.Transaction).
	Transaction []producer.Statement
	// Relay, when set, replaces the built-in relays: Relays processes of
	// this command.
	Relay *External
	// Consumers replaces the built-in consumers of a subscription, by
	// subscription name.
	Consumers map[string]External
	// Processor, when set, replaces the transactional stage's built-in
	// processors: Stage.Processors processes of this command
	// (docs/contract.md, "Processor").
	Processor *External
	// EffectsQuery returns one row per effect the team's consumers
	// applied: columns event_id and consumer, and optionally
	// aggregate_id, version, source and applied_at,
	// in applied order unless applied_at says it. Required with Consumers.
	EffectsQuery string
	// DeadLettersQuery returns one row per event the team's consumers
	// dead-lettered: event_id, consumer, and optionally reason.
	DeadLettersQuery string
	// InboxQuery returns one row per inbox mark the team's consumers
	// hold: event_id, consumer, and optionally source. Optional: with it
	// an inbox mark without its effect, or an effect without its mark,
	// is found.
	InboxQuery string
	// PendingQuery returns one row, one integer: the team's outbox rows
	// its relay has not published yet. Optional: without it a drain that
	// goes quiet while events are still missing cannot tell whether they
	// are lost or still on their way, and the verdict is unknown.
	PendingQuery string
	// Where says where each part was written, by its scenario field
	// ("system.transaction[1]" → "shop.yaml:14"), so Start's errors
	// about it (a [ContractError]) point at the line to fix; a part
	// without an entry is named by its field alone.
	Where map[string]string
}

// External is one component given as a command: the supervisor starts it
// with the contract's environment (EnvRole and the other Env constants)
// and restarts it after every crash.
type External struct {
	Command []string
	Env     map[string]string
	// Dir is the working directory; a relative program path in Command is
	// resolved against it.
	Dir string
}

// Deployment is a pipeline started on a cluster: its database, broker
// topology, supervised workers and history, from Start until Close. The
// caller should call Close.
type Deployment struct {
	cfg     Config
	cl      *cluster.Cluster
	dir     string
	base    time.Time
	rec     *history.Recorder
	db      *pgxpool.Pool
	dsn     string
	broker  worker.Broker
	sup     *supervisor.Supervisor
	log     *slog.Logger
	workers []string
	dbz     *debezium.Config // the debezium relay's, if it runs
	// backlog asks the broker what it holds, for the drain; opened on
	// first use.
	backlog *worker.BacklogReader
	// stage watches the transactional stage for the drain, and
	// stopReader stops the reader of its output topics (nil without a
	// stage, or until it started).
	stage      *broker.KafkaStageWatcher
	stopReader func() error
	// key is the run's signing key (Security.Sign), minted at Start.
	key []byte
	// intruder is the intrude fault's user, publisher and history (nil
	// without Config.Intruder).
	intruder *intruderRun
	// stopLag stops the lag sampler (lag.go); nil until it started.
	stopLag func()
	// load is the rate timeline on the run's clock (backpressure.go).
	load []producer.RateStep
	// schemas are the schema versions each subscription's consumers
	// accept, changed by DeployFix (redrive.go), and the consumers that
	// left (groups.go), which a deploy-fix leaves stopped.
	schemas schemaState
	// dlqLocks let one redrive or purge at a time run on a
	// subscription's dead-letter queue (redrive.go).
	dlqLocks dlqLocks
}

// HistoryDir is where a run's history files go, under its run dir.
const HistoryDir = "history"

// Start prepares the run in dir (history/ and logs/ are created there) and
// starts every worker: consumers first, then relays, then producers.
// workerCmd is the argv prefix that starts a worker process.
func Start(ctx context.Context, cl *cluster.Cluster, dir string, cfg Config, workerCmd []string, log *slog.Logger) (_ *Deployment, err error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	for _, d := range []string{filepath.Join(dir, HistoryDir), filepath.Join(dir, "logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("pipeline: %w", err)
		}
	}
	r := &Deployment{cfg: cfg, cl: cl, dir: dir, base: time.Now(), log: log}
	defer func() {
		if err != nil {
			err = errors.Join(err, r.Close())
		}
	}()
	if err := r.mintKey(); err != nil {
		return nil, err
	}
	r.rec, err = history.NewRecorder(filepath.Join(dir, HistoryDir, "harness.jsonl"), "harness", r.base)
	if err != nil {
		return nil, err
	}
	if r.dsn, err = createDatabase(ctx, cl.ClientURL(cluster.Postgres), cfg.Name); err != nil {
		return nil, err
	}
	if r.db, err = pgxpool.New(ctx, r.dsn); err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	if err := schema.Create(ctx, r.db); err != nil {
		return nil, err
	}
	if err := checkSystem(ctx, r.db, cfg.Broker, cfg.System); err != nil {
		return nil, err
	}
	r.broker = worker.Broker{
		Kind:          cfg.Broker,
		URL:           cl.ClientURL(cfg.Broker),
		Namespace:     cfg.Name,
		Partitions:    cfg.Partitions,
		Subscriptions: cfg.Subscriptions,
		Unbound:       cfg.Unbound,
		DeliveryLimit: int(cfg.MaxAttempts),
		Prefetch:      cfg.Prefetch,
		QueueType:     cfg.QueueType,
		OffsetReset:   cfg.OffsetReset,
	}
	if err := worker.SetupBroker(ctx, r.broker); err != nil {
		return nil, err
	}
	if err := r.waitQueuesDurable(ctx); err != nil {
		return nil, err
	}
	if err := r.startIntruder(ctx); err != nil {
		return nil, err
	}
	if _, err := r.rec.Record(history.OK, history.Setup, history.Value{
		Subscriptions: declaredSubscriptions(cfg),
		// The dead-letter limit, which over-retried is judged against.
		Attempt: cfg.MaxAttempts,
		Detail:  fmt.Sprintf("broker=%s producer=%s relay=%s consumer=%s seed=%d", cfg.Broker, cfg.ProducerVariant, cfg.RelayVariant, cfg.ConsumerVariant, cfg.Seed),
	}); err != nil {
		return nil, err
	}
	// The built-in consumers record every delivery; a team's may post
	// some lineage, or none, so the checker learns of theirs from the
	// deliver ops it finds.
	var lineage []history.Entry
	for _, sub := range cfg.Subscriptions {
		if _, ok := cfg.System.Consumers[sub]; !ok {
			lineage = append(lineage, history.Entry{Type: history.OK, F: history.Lineage, Value: history.Value{Consumer: sub}})
		}
	}
	if err := r.rec.RecordAll(lineage); err != nil {
		return nil, err
	}
	r.sup, err = supervisor.New(supervisor.Config{
		Command:      workerCmd,
		LogDir:       filepath.Join(dir, "logs"),
		RestartDelay: cfg.RestartDelay,
		Recorder:     r.rec,
		HistoryDir:   filepath.Join(dir, HistoryDir),
		Base:         r.base,
		Logger:       log,
	})
	if err != nil {
		return nil, err
	}
	for _, sub := range cfg.Subscriptions {
		for i := range cfg.consumersAtStart(sub) {
			if err := r.startConsumer(ctx, sub, consumerName(sub, i)); err != nil {
				return nil, err
			}
		}
	}
	// The stage's processors are up before the relays publish anything.
	if cfg.Stage != nil {
		if err := r.startStage(ctx); err != nil {
			return nil, err
		}
	}
	for i := range cfg.Relays {
		name := fmt.Sprintf("relay-%d", i)
		if cfg.RelayVariant == relay.Debezium {
			if err := r.startDebezium(ctx, name); err != nil {
				return nil, err
			}
			continue
		}
		if ext := cfg.System.Relay; ext != nil {
			if err := r.startExternal(ctx, name, worker.RoleRelay, "", *ext); err != nil {
				return nil, err
			}
			continue
		}
		spec := r.spec(worker.RoleRelay, name)
		spec.Relay = relay.Config{Variant: cfg.RelayVariant, Batch: cfg.RelayBatch, Name: spec.Process, Authority: r.relayAuthority(), Traces: cfg.Traces}
		if err := r.start(ctx, spec); err != nil {
			return nil, err
		}
	}
	if r.dbz != nil {
		// The connector takes no snapshot: what commits before it
		// streams would never be relayed.
		start := time.Now()
		wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		err := debezium.WaitReady(wctx, r.db, *r.dbz)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("pipeline: %w (see logs/relay-0.log)", err)
		}
		r.log.Info("debezium relay streaming", "took", time.Since(start).Round(time.Millisecond))
	}
	// The workload starts with the producers: its rate steps go onto
	// the run's clock now.
	r.load = r.loadSteps()
	for _, group := range producerGroups(cfg.Producers, cfg.ProducerProcesses) {
		spec := r.spec(worker.RoleProducer, producerName(group[0]))
		spec.Producer = producer.Config{
			Variant: cfg.ProducerVariant, Keys: cfg.Keys, Rate: cfg.Rate,
			RateSteps: r.load, BaseUnixNano: r.base.UnixNano(),
			PoisonRatio: cfg.PoisonRatio, NewSchemaRatio: cfg.NewSchemaRatio, AbortRatio: cfg.AbortRatio, Seed: cfg.Seed + uint64(group[0]),
			Sources:     slices.Clone(cfg.Sources),
			Transaction: cfg.System.Transaction,
			// What :topic or :exchange binds: the name the team's relay
			// gets in its environment (contractEnv).
			Broker: r.broker.Kind, Events: r.broker.Events(),
		}
		for _, i := range group[1:] {
			c := r.spec(worker.RoleProducer, producerName(i))
			spec.Clients = append(spec.Clients, worker.Client{Process: c.Process, History: c.History, Seed: cfg.Seed + uint64(i)})
		}
		if err := r.start(ctx, spec); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// quorumQueueWaiter is a RabbitMQ service that can tell when a new quorum
// queue's registration is on disk (cluster/local's can).
type quorumQueueWaiter interface {
	WaitQuorumQueueDurable(ctx context.Context, vhost, queue string) error
}

// waitQueuesDurable waits until RabbitMQ has saved its new quorum queues:
// RabbitMQ 3.10 writes a queue's Raft registration only every 500ms, and a
// node killed before that loses the queue and every message confirmed into
// it. A run that crashes the broker must not trip over that bug by accident.
func (r *Deployment) waitQueuesDurable(ctx context.Context) error {
	w, ok := r.cl.Service(cluster.RabbitMQ).(quorumQueueWaiter)
	if r.cfg.Broker != "rabbitmq" || !ok {
		return nil
	}
	// The witness too: one lost to that bug would make every event
	// read as absent from the broker.
	var names []string
	for _, sub := range r.cfg.Subscriptions {
		q := r.broker.Qualify(sub)
		if r.cfg.QueueType != "classic" { // a classic queue has no Raft log to wait for
			names = append(names, q)
		}
		names = append(names, q+".dlq")
	}
	if r.cfg.QueueType != "classic" {
		names = append(names, r.broker.Witness())
	}
	for _, name := range names {
		if err := w.WaitQuorumQueueDurable(ctx, "/", name); err != nil {
			return fmt.Errorf("pipeline: %w", err)
		}
	}
	return nil
}

// WorkerNames lists the workers a run of cfg starts, in start order:
// consumer-<subscription>-<i>, processor-<i> (with a Stage), relay-<i>,
// producer-<i> (with ProducerProcesses, only the first producer of each
// process).
func WorkerNames(cfg Config) ([]string, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	var out []string
	for _, sub := range cfg.Subscriptions {
		for i := range cfg.consumersAtStart(sub) {
			out = append(out, consumerName(sub, i))
		}
	}
	out = append(out, stageWorkerNames(cfg)...)
	for i := range cfg.Relays {
		out = append(out, fmt.Sprintf("relay-%d", i))
	}
	return append(out, ProducerProcessNames(cfg.Producers, cfg.ProducerProcesses)...), nil
}

// ProducerProcessNames names the processes that run n producers in procs
// processes (0: one each; see Config.ProducerProcesses): each is named
// after its first producer, and only those names take failpoints.
func ProducerProcessNames(n, procs int) []string {
	var out []string
	for _, group := range producerGroups(n, procs) {
		out = append(out, producerName(group[0]))
	}
	return out
}

func producerName(i int) string { return fmt.Sprintf("producer-%d", i) }

// producerGroups splits n producers over procs processes (0: one each):
// contiguous, the first groups one larger when they do not
// divide evenly.
func producerGroups(n, procs int) [][]int {
	if procs <= 0 || procs > n {
		procs = n
	}
	out := make([][]int, 0, procs)
	next := 0
	for g := range procs {
		size := n / procs
		if g < n%procs {
			size++
		}
		group := make([]int, size)
		for j := range group {
			group[j] = next + j
		}
		next += size
		out = append(out, group)
	}
	return out
}

func (r *Deployment) spec(role, name string) worker.Spec {
	return worker.Spec{
		Role: role, Process: name,
		History:      filepath.Join(r.dir, HistoryDir, name+".jsonl"),
		BaseUnixNano: r.base.UnixNano(),
		Seed:         r.cfg.Seed ^ uint64(len(r.workers)+1)*0x9e3779b97f4a7c15,
		PostgresDSN:  r.dsn,
		Broker:       r.broker,
		Failpoints:   r.cfg.Failpoints[name],
	}
}

// consumerSpec is the spec of built-in consumer name of sub, in the
// build its subscription runs now (the schema versions it accepts).
func (r *Deployment) consumerSpec(sub, name string) worker.Spec {
	spec := r.spec(worker.RoleConsumer, name)
	spec.Consumer = consumer.Config{Variant: r.cfg.ConsumerVariant, Subscription: sub, MaxAttempts: r.cfg.MaxAttempts, Workers: r.cfg.ConsumerWorkers, Work: r.cfg.ConsumerWork,
		Batch: r.cfg.ConsumerBatch, Security: r.consumerSecurity(), SchemaVersions: r.schemaVersions(sub)}
	return spec
}

func (r *Deployment) start(ctx context.Context, spec worker.Spec) error {
	b, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("pipeline: %w", err)
	}
	if err := r.sup.Start(ctx, spec.Process, b); err != nil {
		return err
	}
	r.workers = append(r.workers, spec.Process)
	return nil
}

// Supervisor gives access to the workers, for faults.
func (r *Deployment) Supervisor() *supervisor.Supervisor { return r.sup }

// Cluster is the cluster the run is on, for faults on servers and links.
func (r *Deployment) Cluster() *cluster.Cluster { return r.cl }

// Recorder is the harness's own history recorder (for nemesis ops).
func (r *Deployment) Recorder() *history.Recorder { return r.rec }

// Dir is the run's directory.
func (r *Deployment) Dir() string { return r.dir }

// DB is the run's database.
func (r *Deployment) DB() *pgxpool.Pool { return r.db }

// HistoryFiles lists every history file of the run.
func (r *Deployment) HistoryFiles() ([]string, error) {
	m, err := filepath.Glob(filepath.Join(r.dir, HistoryDir, "*.jsonl"))
	slices.Sort(m)
	return m, err
}

// StopProducers stops every producer, so nothing new is committed.
func (r *Deployment) StopProducers(ctx context.Context) error {
	var errs []error
	for _, w := range r.workers {
		if strings.HasPrefix(w, "producer-") {
			errs = append(errs, r.sup.Stop(ctx, w))
		}
	}
	return errors.Join(errs...)
}

// progress is what the drain watches.
type progress struct {
	unpublished, effects, inbox, dlq, backlog int64
	// idleRelays counts relays that found nothing to publish since the
	// drain started.
	idleRelays int64
	// With a team's components: their effect rows, the events committed
	// (the sum of the aggregates' versions: each commit adds one), and
	// the fewest events any subscription has applied or dead-lettered.
	teamEffects, committed, resolvedMin int64
	// relayDown: the debezium relay is not streaming (its replication
	// slot is inactive: Connect is restarting), so the quiet means nothing.
	relayDown bool
	// stageLag is the transactional stage's lag on the events topic, and
	// stageOpen its output partitions with a transaction open.
	stageLag, stageOpen int64
	// intruderPending counts (intruder event the broker accepted,
	// subscription) pairs the subscription has not finished with yet
	// (intruderPending); intruderOwed names the first few.
	intruderPending int64
	intruderOwed    string
}

func (r *Deployment) progress(ctx context.Context, since time.Time) (progress, error) {
	var p progress
	err := r.db.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM outbox WHERE published_at IS NULL),
		(SELECT count(*) FROM effects),
		(SELECT count(*) FROM inbox) + (SELECT count(*) FROM inbox_unchecked) + (SELECT count(*) FROM inbox_keyed),
		(SELECT count(*) FROM dead_letters),
		(SELECT count(*) FROM relay_idle WHERE polled_at > $1)`, since).Scan(&p.unpublished, &p.effects, &p.inbox, &p.dlq, &p.idleRelays)
	if err != nil {
		return p, fmt.Errorf("drain: %w", err)
	}
	if r.external() {
		if err := r.teamProgress(ctx, &p); err != nil {
			return p, err
		}
	}
	if r.dbz != nil {
		var active bool
		err := r.db.QueryRow(ctx, `SELECT coalesce(bool_or(active), false) FROM pg_replication_slots WHERE slot_name = $1`, r.dbz.Slot()).Scan(&active)
		if err != nil {
			return p, fmt.Errorf("drain: %w", err)
		}
		p.relayDown = !active
	}
	if r.backlog == nil {
		if r.backlog, err = worker.NewBacklogReader(r.broker); err != nil {
			return p, err
		}
	}
	if p.backlog, err = r.backlog.Backlog(ctx); err != nil {
		return p, err
	}
	if p.stageLag, p.stageOpen, err = r.stagePending(ctx); err != nil {
		return p, err
	}
	owed, err := r.intruderPending(ctx)
	p.intruderPending = int64(len(owed))
	if len(owed) > 3 {
		owed = append(owed[:3], "...")
	}
	p.intruderOwed = strings.Join(owed, ", ")
	return p, err
}

// external reports whether any component is not the built-in pipeline's.
func (r *Deployment) external() bool { return r.externalRelay() || len(r.cfg.System.Consumers) > 0 }

// externalRelay reports whether the relay is a team's or Debezium, which
// cannot tell the drain it is idle.
func (r *Deployment) externalRelay() bool {
	return r.cfg.System.Relay != nil || r.cfg.RelayVariant == relay.Debezium
}

// builtinRelays is how many relays note their idle polls in relay_idle.
func (r *Deployment) builtinRelays() int64 {
	if r.externalRelay() {
		return 0
	}
	return int64(r.cfg.Relays)
}

// teamProgress adds what the drain can know without a relay that reports
// its idle polls: how far each subscription got with the committed events
// (the intruder's left out). One query reads the built-in and the team's
// effects and dead letters together.
func (r *Deployment) teamProgress(ctx context.Context, p *progress) error {
	union := `SELECT event_id, consumer, false AS team FROM effects UNION ALL SELECT event_id, consumer, false FROM dead_letters`
	for _, q := range r.teamQueries() {
		union += ` UNION ALL SELECT event_id::text, consumer::text, ` + strconv.FormatBool(q.Table == history.TableEffects) + ` FROM (` + q.SQL + `) AS t`
	}
	if err := r.db.QueryRow(ctx, `SELECT coalesce(sum(version), 0) FROM orders`).Scan(&p.committed); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	// The intruder's events are resolved too, but no commit owes them:
	// counted, they would let the drain think real events were done.
	rows, err := r.db.Query(ctx, `SELECT consumer, count(DISTINCT event_id), count(*) FILTER (WHERE team) FROM (`+union+`) AS u
		WHERE NOT (event_id = ANY(coalesce($1::text[], '{}'))) GROUP BY consumer`, r.intruderAccepted()) // nil is NULL
	if err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	resolved := map[string]int64{}
	var sub string
	var n, team int64
	if _, err := pgx.ForEachRow(rows, []any{&sub, &n, &team}, func() error {
		resolved[sub] = n
		p.teamEffects += team
		return nil
	}); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	p.resolvedMin = -1
	for _, sub := range r.cfg.Subscriptions {
		if p.resolvedMin < 0 || resolved[sub] < p.resolvedMin {
			p.resolvedMin = resolved[sub]
		}
	}
	return nil
}

// Drain waits until the pipeline is quiescent: every relay has polled and
// found nothing left to publish (by its own logic) and its client holds
// nothing it has not sent (broker.Holder), nothing is left in the
// broker for any subscription, and nothing progressed (publishes, effects,
// inbox marks, dead letters) for the Quiet window; or until DrainTimeout.
// A team's relay cannot say it is idle, so with one the drain is complete
// when every subscription has applied or dead-lettered as many events as
// were committed and nothing moved for Quiet, or when nothing moved for
// externalQuiet, whichever comes first. The debezium relay's quiet only
// counts while its replication slot is active (Connect is streaming).
// Every intruder event the broker accepted must also have been
// dead-lettered, applied or skipped in every (bound) subscription, so
// the checker finds each one's fate (docs/security.md). It
// records the outcome as a drain op: ok when complete, info when the
// deadline passed (the checker then cannot call the run valid).
func (r *Deployment) Drain(ctx context.Context) (bool, error) {
	// The lag is sampled while the consumers catch up, not after.
	defer r.stopLagSampler()
	ctx, cancel := context.WithTimeout(ctx, r.cfg.DrainTimeout)
	defer cancel()
	if _, err := r.rec.Record(history.Invoke, history.Drain, history.Value{}); err != nil {
		return false, err
	}
	var start time.Time
	if err := r.db.QueryRow(ctx, `SELECT now()`).Scan(&start); err != nil {
		start = time.Now()
	}
	var last progress
	var lastErr error
	since := time.Now()
	for {
		p, err := r.progress(ctx, start)
		lastErr = err
		quiet := r.cfg.Quiet
		if r.externalRelay() && p.resolvedMin < p.committed {
			quiet = r.externalQuiet()
		}
		switch {
		case err != nil || p.backlog > 0 || p.idleRelays < r.builtinRelays() || p.relayDown || p.stageLag > 0 || p.stageOpen > 0 || p.intruderPending > 0:
			last, since = p, time.Now()
		case p != last:
			last, since = p, time.Now()
		case time.Since(since) >= quiet:
			detail := fmt.Sprintf("quiescent for %s: %d unpublished, %d effects, %d inbox, %d dead letters", quiet, p.unpublished, p.effects+p.teamEffects, p.inbox, p.dlq)
			if r.external() {
				detail += fmt.Sprintf("; %d committed, the furthest-behind subscription resolved %d", p.committed, p.resolvedMin)
			}
			if r.stage != nil {
				detail += "; the transactional stage has read every input and no transaction is open"
			}
			if n := len(r.intruderAccepted()); n > 0 {
				detail += fmt.Sprintf("; every subscription dead-lettered, applied or skipped each of the %d intruder events the broker accepted", n)
			}
			if r.externalRelay() && p.resolvedMin < p.committed {
				// Quiet, with events missing: lost, or still in a relay
				// that cannot say it is idle. Only a fact settles it.
				settled, why := r.nothingPending(ctx, p)
				detail += "; " + why
				if !settled {
					_, err := r.rec.Record(history.OK, history.Drain, history.Value{Reason: history.ReasonQuiet, Detail: detail})
					return false, err
				}
			}
			_, err := r.rec.Record(history.OK, history.Drain, history.Value{Detail: detail})
			return true, err
		}
		select {
		case <-ctx.Done():
			v := history.Value{Detail: fmt.Sprintf("deadline %s passed: %d unpublished, %d in the broker, %d of %d relays idle", r.cfg.DrainTimeout, last.unpublished, last.backlog, last.idleRelays, r.builtinRelays())}
			if r.stage != nil {
				v.Detail += fmt.Sprintf("; the transactional stage has %d inputs to read and %d output partitions with a transaction open", last.stageLag, last.stageOpen)
			}
			if last.intruderPending > 0 {
				v.Detail += fmt.Sprintf("; %d (accepted intruder event, subscription) pairs not finished (no dead letter, effect or inbox mark: %s)", last.intruderPending, last.intruderOwed)
			}
			if lastErr != nil {
				v.Error = lastErr.Error()
			}
			_, err := r.rec.Record(history.Info, history.Drain, v)
			return false, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// nothingPending says whether the harness can see that a relay it cannot
// ask has nothing left to publish, and how it knows or why it cannot: a
// team's relay through its pending query (with the broker's backlog 0).
// Debezium and a team's relay without one cannot be seen: events missing
// after the quiet window are then unseen, not lost.
func (r *Deployment) nothingPending(ctx context.Context, p progress) (bool, string) {
	q := r.cfg.System.PendingQuery
	if r.cfg.System.Relay == nil || strings.TrimSpace(q) == "" {
		return false, "events still missing, and nothing shows the relay has none left to publish (a team's relay can declare system.pending_query): lost or late cannot be told"
	}
	n, err := pendingRows(ctx, r.db, q)
	switch {
	case err != nil:
		return false, "pending query failed: " + err.Error()
	case n > 0:
		return false, fmt.Sprintf("the pending query says %d rows are still unpublished", n)
	case p.backlog > 0:
		return false, fmt.Sprintf("%d messages still in the broker", p.backlog)
	}
	return true, "the pending query says nothing is left to publish and the broker holds nothing: what is missing is lost"
}

// externalQuiet is how long a run with a team's relay must show no
// progress before the drain gives up waiting for events still missing:
// long enough for a crashed component to start again.
func (r *Deployment) externalQuiet() time.Duration {
	return max(r.cfg.Quiet, 10*time.Second)
}

// StopAll stops every worker (no drain), and the reader of a
// transactional stage's output topics.
func (r *Deployment) StopAll(ctx context.Context) error {
	err := r.sup.StopAll(ctx)
	r.stopStageReader()
	return err
}

// FinalRead reads the final state into the history: the database's
// tables and the team's, what the broker's dead-letter queues hold (rows
// of table broker-dlq, closed by a row without an event), so an event
// the broker gave up on is explained as such, and the broker's log (rows of table broker, closed by a row
// without an event), which places each lost event before or after the
// broker. A broker read that fails is logged and recorded as such: it
// explains losses, it does not decide them.
func (r *Deployment) FinalRead(ctx context.Context) error {
	rows := r.brokerDeadLetters(ctx)
	rows = append(rows, r.brokerLog(ctx)...)
	if r.cfg.Stage != nil {
		rows = append(rows, r.stageRows(ctx)...)
	}
	return schema.FinalRead(ctx, r.db, r.rec, r.base, rows, r.teamQueries()...)
}

// brokerDeadLetters reads the broker's dead-letter queues into
// final-read rows: one per message still there, then the row closing
// the read (no event), ok when every queue was read whole, info with
// the error when not. A dead letter gone from its queue is known to be
// gone (redriven, or purged) only when the read was whole.
func (r *Deployment) brokerDeadLetters(ctx context.Context) []history.Entry {
	dls, err := r.broker.DeadLetters(ctx)
	rows := make([]history.Entry, 0, len(dls)+1)
	for _, d := range dls {
		rows = append(rows, finalRow(history.Value{Table: history.TableBrokerDLQ, Event: d.Event, Source: eventSource(d.Source), Consumer: d.Queue, Reason: d.Reason, Attempt: d.Deliveries}))
	}
	done := finalRow(history.Value{Table: history.TableBrokerDLQ, Detail: fmt.Sprintf("%d dead letters in the broker", len(dls))})
	if err != nil {
		r.log.Warn("read the broker's dead letters", "err", err)
		done.Type, done.Value.Error = history.Info, err.Error()
	}
	return append(rows, done)
}

// brokerLog reads the broker's log into final-read rows: one per message
// found, then the row closing the read, ok when the whole log was read,
// info with the error when it was not. A message without an event id
// (a team's relay that leaves out the event-id header) makes the read
// incomplete: the events it holds cannot be told.
func (r *Deployment) brokerLog(ctx context.Context) []history.Entry {
	l, err := r.broker.Log(ctx)
	rows := make([]history.Entry, 0, len(l.Records)+1)
	var anonymous int
	for _, rec := range l.Records {
		if rec.Event == "" {
			anonymous++
			continue
		}
		v := history.Value{Table: history.TableBroker, Event: rec.Event, Source: eventSource(rec.Source), Partition: rec.Partition, Offset: rec.Offset, Consumer: rec.Redrive}
		if r.cfg.Broker == "rabbitmq" {
			v.Target = l.Where
		}
		rows = append(rows, finalRow(v))
	}
	if err == nil && anonymous > 0 {
		err = fmt.Errorf("%d of %d messages in %s carry no event id (no message_id or %s header)", anonymous, len(l.Records), l.Where, broker.HeaderEventID)
	}
	done := finalRow(history.Value{Table: history.TableBroker, Target: l.Where, Detail: l.Detail})
	if err != nil {
		r.log.Warn("read the broker's log", "err", err)
		done.Type, done.Value.Error = history.Info, err.Error()
	}
	return append(rows, done)
}

// finalRow is a final-read row of v.
func finalRow(v history.Value) history.Entry {
	return history.Entry{Type: history.OK, F: history.FinalRead, Value: v}
}

// eventSource is the source of an event the broker holds: its source
// header, or the run's, which a team's relay may not carry.
func eventSource(s string) string {
	if s == "" {
		return producer.DefaultSource
	}
	return s
}

// teamQueries are the final read's queries of the team's own tables.
func (r *Deployment) teamQueries() []schema.Query {
	var qs []schema.Query
	if q := r.cfg.System.EffectsQuery; strings.TrimSpace(q) != "" {
		qs = append(qs, schema.Query{Table: history.TableEffects, SQL: q, Source: producer.DefaultSource})
	}
	if q := r.cfg.System.DeadLettersQuery; strings.TrimSpace(q) != "" {
		qs = append(qs, schema.Query{Table: history.TableDLQ, SQL: q, Source: producer.DefaultSource})
	}
	if q := r.cfg.System.InboxQuery; strings.TrimSpace(q) != "" {
		qs = append(qs, schema.Query{Table: history.TableInbox, SQL: q, Source: producer.DefaultSource})
	}
	return qs
}

// Counts are live figures for a status line.
type Counts struct {
	// Committed counts the producers' committed transactions, read from
	// the aggregates' versions (every transaction bumps one), so it is
	// right whatever the transaction writes: the built-in outbox insert,
	// a team's own statements, or no outbox row at all.
	Committed, Unpublished, Effects, DeadLetters int64
}

// Counts reads the live figures from the database.
func (r *Deployment) Counts(ctx context.Context) (Counts, error) {
	var c Counts
	err := r.db.QueryRow(ctx, `SELECT
		(SELECT coalesce(sum(version), 0) FROM orders),
		(SELECT count(*) FROM outbox WHERE published_at IS NULL),
		(SELECT count(*) FROM effects),
		(SELECT count(*) FROM dead_letters)`).Scan(&c.Committed, &c.Unpublished, &c.Effects, &c.DeadLetters)
	if err != nil {
		return c, fmt.Errorf("pipeline: counts: %w", err)
	}
	return c, nil
}

// Subscriptions are the run's subscriptions.
func (r *Deployment) Subscriptions() []string { return r.cfg.Subscriptions }

// Finish stops the producers, drains, stops every worker and does the
// final read. It returns whether the drain completed.
func (r *Deployment) Finish(ctx context.Context) (bool, error) {
	if err := r.StopProducers(ctx); err != nil {
		return false, err
	}
	drained, err := r.Drain(ctx)
	if err != nil {
		return false, err
	}
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := r.sup.StopAll(stopCtx); err != nil {
		r.log.Warn("stop workers", "err", err)
	}
	r.stopStageReader() // its ops are in by the final read
	if err := r.FinalRead(ctx); err != nil {
		return drained, err
	}
	return drained, nil
}

// Close stops whatever still runs and closes the run's files. Of the
// cluster it touches only what the run made there for itself besides its
// names: the intruder's broker user, which it removes.
func (r *Deployment) Close() error {
	var errs []error
	if r.sup != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		errs = append(errs, r.sup.StopAll(ctx))
		cancel()
	}
	r.stopLagSampler()
	errs = append(errs, r.closeIntruder())
	if r.dbz != nil && r.db != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		errs = append(errs, debezium.Drop(ctx, r.db, *r.dbz))
		cancel()
	}
	if r.backlog != nil {
		r.backlog.Close()
	}
	r.stopStageReader()
	if r.stage != nil {
		r.stage.Close()
	}
	if r.db != nil {
		r.db.Close()
	}
	if r.rec != nil {
		errs = append(errs, r.rec.Close())
	}
	return errors.Join(errs...)
}

// createDatabase creates a fresh database for the run and returns its DSN.
func createDatabase(ctx context.Context, adminDSN, name string) (string, error) {
	conn, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		return "", fmt.Errorf("pipeline: postgres: %w", err)
	}
	defer conn.Close(context.Background())
	db := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		return "", fmt.Errorf("pipeline: create database %s: %w", name, err)
	}
	cfg, err := pgx.ParseConfig(adminDSN)
	if err != nil {
		return "", err
	}
	return strings.Replace(adminDSN, "/"+cfg.Database+"?", "/"+name+"?", 1), nil
}
