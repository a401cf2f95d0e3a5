package pipeline

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliverycheck/deliverycheck/failpoint"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/pipeline/consumer"
	"github.com/deliverycheck/deliverycheck/pipeline/debezium"
	"github.com/deliverycheck/deliverycheck/pipeline/producer"
	"github.com/deliverycheck/deliverycheck/pipeline/worker"
	"github.com/deliverycheck/deliverycheck/process/supervisor"
)

// The environment an external component is started with: everything it
// needs to join the run, with every endpoint behind the harness's proxies
// so network faults reach it. docs/contract.md is the reference.
const (
	EnvRole         = "DELIVERYCHECK_ROLE"         // "relay", "consumer" or "processor"
	EnvSubscription = "DELIVERYCHECK_SUBSCRIPTION" // consumers: the subscription, the "consumer" of its effect rows
	EnvPostgresDSN  = "DELIVERYCHECK_POSTGRES_DSN" // the run's database
	EnvBroker       = "DELIVERYCHECK_BROKER"       // "kafka" or "rabbitmq"
	EnvKafkaBrokers = "DELIVERYCHECK_KAFKA_BROKERS"
	EnvKafkaTopic   = "DELIVERYCHECK_KAFKA_TOPIC"
	EnvKafkaGroup   = "DELIVERYCHECK_KAFKA_GROUP"     // consumers: the subscription's consumer group
	EnvKafkaDLQ     = "DELIVERYCHECK_KAFKA_DLQ_TOPIC" // the dead-letter topic
	EnvAMQPURL      = "DELIVERYCHECK_AMQP_URL"        // the first node's, the only one of a single broker
	EnvAMQPURLs     = "DELIVERYCHECK_AMQP_URLS"       // every node's, comma-separated, to fail over along
	EnvAMQPExchange = "DELIVERYCHECK_AMQP_EXCHANGE"
	EnvAMQPQueue    = "DELIVERYCHECK_AMQP_QUEUE" // consumers: the subscription's queue
	EnvSource       = "DELIVERYCHECK_EVENT_SOURCE"
	EnvMaxAttempts  = "DELIVERYCHECK_MAX_ATTEMPTS"
	EnvSeed         = "DELIVERYCHECK_SEED"
	// EnvSchemaVersions tells a consumer which event schema versions its
	// build accepts, comma-separated: "1", then "1,2" once a deploy-fix
	// redeployed it. Any other it refuses, retried to the limit then
	// dead-lettered (docs/contract.md, "Dead letters and redrive").
	EnvSchemaVersions = "DELIVERYCHECK_SCHEMA_VERSIONS"
	// A processor's (docs/contract.md, "Processor"): the stage's output
	// topics, comma-separated; the transactional.id to use, stable across
	// its restarts; the share of transactions to abort on purpose.
	EnvKafkaOutputTopics = "DELIVERYCHECK_KAFKA_OUTPUT_TOPICS"
	EnvTransactionalID   = "DELIVERYCHECK_TRANSACTIONAL_ID"
	EnvAbortRatio        = "DELIVERYCHECK_ABORT_RATIO"
)

// ErrContract marks an error in what the scenario says about the system
// under test (its SQL, its queries, its commands), found by Start before
// any worker runs: bad input, not a harness failure.
var ErrContract = errors.New("system under test")

// ContractError is a mistake in one part of System, found by Start: the
// scenario field it is in and, when System.Where knows it, where that was
// written. It reads like the scenario decoder's errors
// ("shop.yaml:14: system.transaction[1]: ...") because it is one the
// decoder could not see, and it is an [ErrContract].
type ContractError struct {
	At    string // "file:line", or "" when unknown
	Field string // the scenario field, e.g. system.transaction[1]
	Err   error
}

func (e *ContractError) Error() string {
	if e.At == "" {
		return e.Field + ": " + e.Err.Error()
	}
	return e.At + ": " + e.Field + ": " + e.Err.Error()
}

func (e *ContractError) Unwrap() error { return e.Err }

// Is makes every ContractError an ErrContract.
func (e *ContractError) Is(target error) bool { return target == ErrContract }

// effectColumns are the columns an effects query may return; the first two
// are required. aggregate_id and version default to the committed event's,
// source to the producer's; committed_at (a timestamp, best
// pg_xact_commit_timestamp(xmin): the harness's PostgreSQL tracks commit
// timestamps) is when the effect committed, which orders effects;
// applied_at is the older name of the same, kept for existing scenarios.
var effectColumns = []string{"event_id", "consumer", "aggregate_id", "version", "source", "committed_at", "applied_at"}

// inboxColumns are the columns an inbox query may return; the first two
// are required.
var inboxColumns = []string{"event_id", "consumer", "source"}

// deadLetterColumns are the columns a dead-letters query may return; the
// first two are required.
var deadLetterColumns = []string{"event_id", "consumer", "reason"}

// contractEnv is the environment of external worker name.
func (r *Deployment) contractEnv(name, role, sub string) []string {
	b := r.broker
	env := map[string]string{
		EnvRole:            role,
		history.EnvProcess: name,
		history.EnvFile:    filepath.Join(r.dir, HistoryDir, name+".jsonl"),
		history.EnvBase:    strconv.FormatInt(r.base.UnixNano(), 10),
		EnvPostgresDSN:     r.dsn,
		EnvBroker:          b.Kind,
		EnvSource:          producer.DefaultSource,
		EnvMaxAttempts:     strconv.FormatInt(r.cfg.MaxAttempts, 10),
		EnvSeed:            strconv.FormatUint(r.cfg.Seed^uint64(len(r.workers)+1)*0x9e3779b97f4a7c15, 10),
	}
	if sub != "" {
		env[EnvSubscription] = sub
	}
	if role == worker.RoleConsumer {
		env[EnvSchemaVersions] = consumer.JoinVersions(r.schemaVersions(sub))
	}
	r.securityEnv(env, role)
	switch b.Kind {
	case "kafka":
		env[EnvKafkaBrokers] = b.URL
		env[EnvKafkaTopic] = b.Events()
		env[EnvKafkaDLQ] = b.KafkaDLQ()
		if sub != "" {
			env[EnvKafkaGroup] = b.Qualify(sub)
		}
		if role == worker.RoleProcessor {
			r.processorEnv(env, name)
		}
	case "rabbitmq":
		urls := b.URLs()
		env[EnvAMQPURL] = urls[0]
		env[EnvAMQPURLs] = strings.Join(urls, ",")
		env[EnvAMQPExchange] = b.Events()
		if sub != "" {
			env[EnvAMQPQueue] = b.Qualify(sub)
		}
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// startExternal starts a team's component as a supervised command, with
// the failpoints the scenario arms for it armed in its endpoint.
func (r *Deployment) startExternal(ctx context.Context, name, role, sub string, ext External) error {
	c, err := r.externalCommand(name, role, sub, ext)
	if err != nil {
		return err
	}
	if err := r.sup.StartCommand(ctx, name, c); err != nil {
		return r.cfg.System.errorIn(commandField(r.cfg.System, role, sub), err)
	}
	r.workers = append(r.workers, name)
	return nil
}

// externalCommand is how the supervisor starts a team's component as
// worker name: its command, its environment, its armed failpoints.
func (r *Deployment) externalCommand(name, role, sub string, ext External) (supervisor.Command, error) {
	var terms []failpoint.Term
	for _, s := range r.cfg.Failpoints[name] {
		t, err := failpoint.ParseAny(s)
		if err != nil {
			return supervisor.Command{}, fmt.Errorf("pipeline: %s: %w", name, err)
		}
		terms = append(terms, t)
	}
	env := r.contractEnv(name, role, sub)
	for _, k := range slices.Sorted(maps.Keys(ext.Env)) {
		env = append(env, k+"="+ext.Env[k])
	}
	return supervisor.Command{Argv: ext.Command, Env: env, Dir: ext.Dir, Failpoints: terms, Seed: r.cfg.Seed ^ uint64(len(r.workers)+1)}, nil
}

// commandField is the scenario field that gave the command of a team's
// component: a subscription's own consumer, else the one for every
// subscription, or the relay.
func commandField(sys System, role, sub string) string {
	if role == worker.RoleRelay {
		return "system.relay.command"
	}
	if role == worker.RoleProcessor {
		return "system.processor.command"
	}
	if f := "system.consumers." + sub + ".command"; sys.Where[f] != "" {
		return f
	}
	return "system.consumer.command"
}

// checkSystem runs the team's setup SQL and checks the rest of the
// contract against the database before any worker starts (so before any
// fault): each transaction statement must exist on broker and prepare,
// each query must run and return the columns it owes. A mistake in one
// part is a [ContractError] naming it.
func checkSystem(ctx context.Context, db *pgxpool.Pool, broker string, sys System) error {
	if sys.Relay != nil {
		if err := (supervisor.Command{Argv: sys.Relay.Command, Dir: sys.Relay.Dir}).Check(); err != nil {
			return sys.errorIn(commandField(sys, worker.RoleRelay, ""), err)
		}
	}
	if sys.Processor != nil {
		if err := (supervisor.Command{Argv: sys.Processor.Command, Dir: sys.Processor.Dir}).Check(); err != nil {
			return sys.errorIn(commandField(sys, worker.RoleProcessor, ""), err)
		}
	}
	for _, sub := range slices.Sorted(maps.Keys(sys.Consumers)) {
		c := sys.Consumers[sub]
		if err := (supervisor.Command{Argv: c.Command, Dir: c.Dir}).Check(); err != nil {
			return sys.errorIn(commandField(sys, worker.RoleConsumer, sub), err)
		}
	}
	if err := checkSystemSQL(ctx, db, broker, sys); err != nil {
		var ce *ContractError
		if errors.As(err, &ce) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrContract, err)
	}
	return nil
}

// errorIn is a mistake in sys's field, placed where sys.Where says.
func (sys System) errorIn(field string, err error) error {
	return &ContractError{At: sys.Where[field], Field: field, Err: err}
}

func checkSystemSQL(ctx context.Context, db *pgxpool.Pool, broker string, sys System) error {
	for i, st := range sys.Transaction {
		if err := st.CheckBroker(broker); err != nil {
			return sys.errorIn(transactionField(i), err)
		}
	}
	if strings.TrimSpace(sys.Setup) != "" {
		if _, err := db.Exec(ctx, sys.Setup); err != nil {
			return sys.errorIn("system.setup", err)
		}
	}
	if len(sys.Consumers) > 0 && strings.TrimSpace(sys.EffectsQuery) == "" {
		return sys.errorIn("system.effects_query", errors.New("missing: external consumers need an effects query"))
	}
	conn, err := db.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("pipeline: %w", err)
	}
	defer conn.Release()
	for i, st := range sys.Transaction {
		if _, err := conn.Conn().Prepare(ctx, "", st.SQL); err != nil {
			return sys.errorIn(transactionField(i), explainPrepare(st, err))
		}
	}
	for _, q := range []struct {
		field, query string
		cols         []string
	}{
		{"system.effects_query", sys.EffectsQuery, effectColumns},
		{"system.dead_letters_query", sys.DeadLettersQuery, deadLetterColumns},
		{"system.inbox_query", sys.InboxQuery, inboxColumns},
	} {
		if err := checkColumns(ctx, conn.Conn(), q.query, q.cols); err != nil {
			return sys.errorIn(q.field, err)
		}
	}
	if err := checkPending(ctx, conn.Conn(), sys.PendingQuery); err != nil {
		return sys.errorIn("system.pending_query", err)
	}
	return nil
}

// transactionField is the scenario field of transaction statement i
// (0-based, as the decoder numbers list items).
func transactionField(i int) string { return fmt.Sprintf("system.transaction[%d]", i) }

// untypedParam is PostgreSQL's message for a parameter whose type nothing
// around it decides (SQLSTATE 42P18), e.g. one inside json_build_object.
var untypedParam = regexp.MustCompile(`could not determine data type of parameter \$(\d+)`)

// explainPrepare names the placeholder behind a parameter PostgreSQL
// could not type, with the cast that fixes it; other errors pass through.
func explainPrepare(st producer.Statement, err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42P18" {
		return err
	}
	m := untypedParam.FindStringSubmatch(pe.Message)
	if m == nil {
		return err
	}
	n, _ := strconv.Atoi(m[1])
	if n < 1 || n > len(st.Args) {
		return err
	}
	name := st.Args[n-1]
	return fmt.Errorf("PostgreSQL cannot tell the type of :%s here; cast it to the type it stands for, e.g. :%s::text (%w)", name, name, err)
}

// checkPending runs the pending query once: it must return one row with
// one integer.
func checkPending(ctx context.Context, conn *pgx.Conn, query string) error {
	if strings.TrimSpace(query) == "" {
		return nil
	}
	_, err := pendingRows(ctx, conn, query)
	return err
}

// pendingRows runs a team's pending query: one row, one integer column.
func pendingRows(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, query string) (int64, error) {
	rows, err := q.Query(ctx, query)
	if err != nil {
		return 0, err
	}
	n, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, fmt.Errorf("want one row with one integer (a count of unpublished rows): %w", err)
	}
	return n, nil
}

// checkColumns runs query with no rows and checks its column names: the
// first two of cols are required, the rest optional, nothing else allowed.
func checkColumns(ctx context.Context, conn *pgx.Conn, query string, cols []string) error {
	if strings.TrimSpace(query) == "" {
		return nil
	}
	rows, err := conn.Query(ctx, "SELECT * FROM ("+query+") AS q LIMIT 0")
	if err != nil {
		return err
	}
	fields := rows.FieldDescriptions()
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	var got []string
	for _, f := range fields {
		got = append(got, f.Name)
	}
	for _, c := range got {
		if !slices.Contains(cols, c) {
			return fmt.Errorf("returns column %q, which is not one of %s (it returned %s)", c, strings.Join(cols, ", "), strings.Join(got, ", "))
		}
	}
	for _, c := range cols[:2] {
		if !slices.Contains(got, c) {
			return fmt.Errorf("must return column %q (it returned %s; want %s, optionally %s)", c, strings.Join(got, ", "), strings.Join(cols[:2], ", "), strings.Join(cols[2:], ", "))
		}
	}
	return nil
}

// startDebezium starts Debezium's outbox event router in Kafka Connect as
// relay name, through the same contract as a team's relay.
func (r *Deployment) startDebezium(ctx context.Context, name string) error {
	if r.cfg.Broker != "kafka" {
		return fmt.Errorf("pipeline: the debezium relay needs kafka, not %s", r.cfg.Broker)
	}
	if r.dbz != nil {
		return errors.New("pipeline: one debezium relay per run (it owns the replication slot)")
	}
	libs, err := debezium.Jars(ctx)
	if err != nil {
		return fmt.Errorf("pipeline: %w", err)
	}
	slotName := strings.Map(func(c rune) rune {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			return c
		}
		return '_'
	}, r.cfg.Name)
	c := debezium.Config{
		Dir:         filepath.Join(r.dir, "debezium"),
		PostgresDSN: r.dsn,
		Bootstrap:   r.broker.URL,
		Topic:       r.broker.Events(),
		Name:        "dc_" + slotName,
		// A wide window between publishing and flushing the position,
		// so a kill -9 nearly always republishes.
		FlushInterval: 5 * time.Second,
	}
	argv, err := c.Command(libs)
	if err != nil {
		return fmt.Errorf("pipeline: %w", err)
	}
	r.dbz = &c
	return r.startExternal(ctx, name, worker.RoleRelay, "", External{Command: argv})
}
