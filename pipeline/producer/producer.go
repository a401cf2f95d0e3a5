// Package producer is the pipeline's write side: each op is one local
// transaction that bumps an aggregate's version and records the event, in
// one of three variants (see [Variant]). Every op is recorded in the
// history as invoke then ok / fail / info.
package producer

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/failpoint"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/internal/trace"
)

// Variant is how the producer gets its event to the broker.
type Variant string

const (
	// Outbox is correct: the aggregate and its outbox row commit in one
	// transaction; the relay publishes later.
	Outbox Variant = "outbox"
	// DualWrite is known-bad: commit the aggregate, then publish straight
	// to the broker. A crash between the two loses the event.
	DualWrite Variant = "dual-write"
	// PublishThenCommit is known-bad: publish first, then commit; when
	// the transaction aborts the event is out but never happened.
	PublishThenCommit Variant = "publish-then-commit"
)

// Variants lists every producer variant.
func Variants() []Variant { return []Variant{Outbox, DualWrite, PublishThenCommit} }

// RateStep runs a producer at Rate ops per second from AtNS, in ns since
// the run's base time, for ForNS (0: until the next step or the end),
// after which it goes back to Config.Rate.
type RateStep struct {
	AtNS  int64   `json:"at_ns"`
	Rate  float64 `json:"rate"`
	ForNS int64   `json:"for_ns,omitempty"`
}

// Config is one producer process's workload.
type Config struct {
	Variant Variant `json:"variant"`
	// Source is the CloudEvents-style source of every event.
	Source string `json:"source"`
	// Sources, when it has two or more, replaces Source: ops take the
	// sources in turn and each round of them shares one event id, so
	// every id occurs once under each source. CloudEvents identifies an
	// event by source + id and lets two sources use the same id; a
	// consumer that dedupes by id alone drops the second.
	Sources []string `json:"sources,omitempty"`
	// Keys is how many aggregates (orders) ops are spread over.
	Keys int `json:"keys"`
	// KeyPrefix names the aggregates, e.g. "order-" gives order-0, order-1...
	KeyPrefix string `json:"key_prefix"`
	// Rate is ops per second for this process; 0 means as fast as it can.
	Rate float64 `json:"rate"`
	// PoisonRatio is the share of events written with a payload no
	// consumer accepts, meant for the dead-letter destination.
	PoisonRatio float64 `json:"poison_ratio"`
	// NewSchemaRatio is the share of events written in schema version 2,
	// which consumers refuse until a deploy-fix (issue 25, DLQ redrive).
	NewSchemaRatio float64 `json:"new_schema_ratio,omitempty"`
	// RateSteps change Rate over the run (issue 25, backpressure), on
	// the run's clock: BaseUnixNano is the run's base, the worker spec's,
	// so a producer restarted mid-step resumes at the step's rate.
	RateSteps    []RateStep `json:"rate_steps,omitempty"`
	BaseUnixNano int64      `json:"base_unix_nano,omitempty"`
	// AbortRatio is the share of publish-then-commit transactions that
	// abort after the publish (the fault that exposes that variant).
	AbortRatio float64 `json:"abort_ratio"`
	// Seed makes key and poison choices reproducible.
	Seed uint64 `json:"seed"`
	// Transaction, when set, is a team's own business transaction (see
	// [Bind]), run instead of the outbox insert, in the same transaction
	// as the harness's version bump on orders: the harness still numbers
	// each aggregate's versions, the team's SQL writes its own tables.
	// Outbox variant only.
	Transaction []Statement `json:"transaction"`
	// Broker is the run's broker, "kafka" or "rabbitmq", and Events its
	// events topic or exchange: what the transaction's :topic or
	// :exchange binds (only the one of this broker exists).
	Broker string `json:"broker,omitempty"`
	Events string `json:"events,omitempty"`
}

// DefaultSource is the source of every event unless Config.Source says
// otherwise.
const DefaultSource = "/orders"

// Producer runs ops for one process.
type Producer struct {
	cfg Config
	db  *pgxpool.Pool
	rec *history.Recorder
	fp  *failpoint.Set
	pub broker.Publisher // dual-write and publish-then-commit only
	rng *mrand.Rand
	// round is the next of Config.Sources, and roundID the id its round
	// shares.
	round   int
	roundID string
}

// New returns a producer. pub is needed only by the dual-write and
// publish-then-commit variants.
func New(cfg Config, db *pgxpool.Pool, rec *history.Recorder, fp *failpoint.Set, pub broker.Publisher) (*Producer, error) {
	switch cfg.Variant {
	case Outbox:
	case DualWrite, PublishThenCommit:
		if pub == nil {
			return nil, fmt.Errorf("producer: variant %s needs a broker publisher", cfg.Variant)
		}
	default:
		return nil, fmt.Errorf("producer: unknown variant %q (valid: outbox, dual-write, publish-then-commit)", cfg.Variant)
	}
	if cfg.Keys <= 0 {
		cfg.Keys = 10
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = "order-"
	}
	if cfg.Source == "" {
		cfg.Source = DefaultSource
	}
	if len(cfg.Transaction) > 0 && cfg.Variant != Outbox {
		return nil, fmt.Errorf("producer: a team transaction needs the outbox variant, not %s", cfg.Variant)
	}
	for i, st := range cfg.Transaction {
		if err := st.CheckBroker(cfg.Broker); err != nil {
			return nil, fmt.Errorf("producer: transaction[%d]: %w", i, err)
		}
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	return &Producer{cfg: cfg, db: db, rec: rec, fp: fp, pub: pub, rng: mrand.New(mrand.NewPCG(seed, seed>>1|1))}, nil
}

// stopGrace is how long the op in flight when Run is stopped may take to
// finish: cut mid-statement, its commit's outcome would be unknown.
const stopGrace = 2 * time.Second

// Run performs ops at the configured rate, following its rate steps on
// the run's clock, until ctx ends. It returns nil when ctx ends, after
// the op in flight finished (within stopGrace); a failed op is recorded,
// not returned.
func (p *Producer) Run(ctx context.Context) error {
	opCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(stopGrace, cancel) })
	defer stop()
	pace := newPacer(p.cfg.RateSteps, p.cfg.Rate, time.Unix(0, p.cfg.BaseUnixNano))
	defer pace.stop()
	for pace.wait(ctx) {
		if err := p.Once(opCtx); err != nil {
			return err
		}
	}
	return nil
}

// NewEventID returns a UUIDv7 (RFC 9562): event ids must be unique across
// processes and restarts without coordination, which its 74 random bits
// give, and its leading millisecond timestamp makes ids roughly ordered,
// so the outbox's and the inbox's unique indexes take new ids at their
// right edge instead of at random pages (a random UUIDv4 made each insert
// touch a different index page).
//
// The random bits come from math/rand/v2's global generator, which the
// runtime runs on ChaCha8 seeded from the OS in every process, so two
// processes (or one restarted) never share a sequence. crypto/rand would
// do too, but it makes a getrandom system call for every id, one more
// per event on the producer's path (BenchmarkNewEventID: 286 → 222 ns
// alone; more on a loaded machine, where the profile put 6% of a
// producer's CPU under it).
func NewEventID() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[0:8], mrand.Uint64())
	binary.BigEndian.PutUint64(b[8:16], mrand.Uint64())
	ms := uint64(time.Now().UnixMilli())
	for i := range 6 {
		b[i] = byte(ms >> (40 - 8*i))
	}
	b[6] = b[6]&0x0f | 0x70
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// Payload returns the JSON payload of an order event; poison payloads are
// well-formed JSON that no consumer accepts (a schema violation), so they
// are permanent failures meant for the dead-letter destination.
func Payload(key string, version int64, poison bool) []byte {
	return SchemaPayload(key, version, poison, 0)
}

// SchemaPayload is Payload in a schema version: 0 or 1 writes none (the
// first version), a later one "schema":n, which a consumer that does not
// know it refuses until a build that does is deployed.
func SchemaPayload(key string, version int64, poison bool, schema int64) []byte {
	pre, post := payloadParts(key, poison, schema)
	return []byte(pre + strconv.FormatInt(version, 10) + post)
}

// NewSchema is the schema version of the workload's new-schema events
// (Config.NewSchemaRatio).
const NewSchema = 2

// payloadParts is a payload around its version, so the producer's
// statement can put in the version PostgreSQL assigns.
func payloadParts(key string, poison bool, schema int64) (pre, post string) {
	if poison {
		return `{"order":` + strconv.Quote(key) + `,"version":"v`, `","poison":true}`
	}
	if schema > 1 {
		return `{"order":` + strconv.Quote(key) + `,"version":`, `,"status":"confirmed","schema":` + strconv.FormatInt(schema, 10) + `}`
	}
	return `{"order":` + strconv.Quote(key) + `,"version":`, `,"status":"confirmed"}`
}

// EventType is the type of every well-formed event.
const EventType = "OrderConfirmed"

// Once performs one op. Its error is only for failures of the harness
// itself (the history could not be written); the op's own outcome is
// recorded.
func (p *Producer) Once(ctx context.Context) error {
	key := p.cfg.KeyPrefix + strconv.Itoa(p.rng.IntN(p.cfg.Keys))
	poison := p.cfg.PoisonRatio > 0 && p.rng.Float64() < p.cfg.PoisonRatio
	// A new-schema event is never poison too, and is the first and only
	// event of an aggregate of its own: a new event schema comes with a
	// new feature's aggregates. On a shared key the consumer's version
	// guard would skip it as stale once redriven after later versions.
	var schema int64
	if !poison && p.cfg.NewSchemaRatio > 0 && p.rng.Float64() < p.cfg.NewSchemaRatio {
		schema = NewSchema
		key = p.cfg.KeyPrefix + "s2-" + NewEventID()
	}
	abort := p.cfg.Variant == PublishThenCommit && p.cfg.AbortRatio > 0 && p.rng.Float64() < p.cfg.AbortRatio
	source, id := p.nextIdentity()
	v := history.Value{Event: id, Source: source, Key: key, Poison: poison, Schema: schema}
	switch p.cfg.Variant {
	case PublishThenCommit:
		return p.publishThenCommit(ctx, v, abort)
	default:
		return p.commitThenMaybePublish(ctx, v)
	}
}

// nextIdentity returns the source and id of the next event: a new id
// under Config.Source, or, with several Config.Sources, the next source in
// turn and the id its round shares (a new one at each round's start).
func (p *Producer) nextIdentity() (source, id string) {
	if len(p.cfg.Sources) < 2 {
		return p.cfg.Source, NewEventID()
	}
	if p.round == 0 {
		p.roundID = NewEventID()
	}
	source = p.cfg.Sources[p.round]
	p.round = (p.round + 1) % len(p.cfg.Sources)
	return source, p.roundID
}

func (p *Producer) commitThenMaybePublish(ctx context.Context, v history.Value) error {
	// Each op is a request of its own: the root of a new trace, stored
	// in the outbox row for the relay to continue (docs/history.md,
	// "Traces").
	v.Trace = trace.New()
	if _, err := p.rec.Record(history.Invoke, history.Commit, v); err != nil {
		return err
	}
	// The dual-write variant writes the outbox row too but nothing relays
	// it: the row is only the database's record that the commit happened
	// (what lets the checker tell a lost event from one never committed),
	// marked published by the producer after its own direct publish.
	version, err := p.commit(ctx, v, true, false)
	if err != nil {
		return p.recordOutcome(history.Commit, v, err)
	}
	v.Version = version
	p.fp.Hit(failpoint.ProducerAfterCommit, v)
	if _, err := p.rec.Record(history.OK, history.Commit, v); err != nil {
		return err
	}
	if p.cfg.Variant == DualWrite {
		return p.publishDirect(ctx, v)
	}
	return nil
}

// publishDirect is the dual-write's second write: straight to the broker,
// then the row is marked so the drain knows it left.
func (p *Producer) publishDirect(ctx context.Context, v history.Value) error {
	ok, err := p.publish(ctx, v)
	if err != nil || !ok {
		return err
	}
	if _, err := p.db.Exec(ctx, `UPDATE outbox SET published_at = now() WHERE id = $1 AND source = $2`, v.Event, v.Source); err != nil {
		// Only the drain's bookkeeping suffers; the event is out.
		return nil
	}
	return nil
}

func (p *Producer) publishThenCommit(ctx context.Context, v history.Value, abort bool) error {
	v.Trace = trace.New()
	// The version is not known before the transaction; read the next one
	// optimistically so the published event carries it.
	var cur int64
	if err := p.db.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM orders WHERE id = $1`, v.Key).Scan(&cur); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		cur = 0
	}
	v.Version = cur + 1
	if _, err := p.publish(ctx, v); err != nil {
		return err
	}
	if _, err := p.rec.Record(history.Invoke, history.Commit, v); err != nil {
		return err
	}
	version, err := p.commit(ctx, v, false, abort)
	if err != nil {
		return p.recordOutcome(history.Commit, v, err)
	}
	v.Version = version
	p.fp.Hit(failpoint.ProducerAfterCommit, v)
	_, err = p.rec.Record(history.OK, history.Commit, v)
	return err
}

// errAborted is the deliberate abort of a publish-then-commit op.
var errAborted = errors.New("transaction aborted by the workload")

// commitSQL is the outbox op as one statement, so it costs one round trip
// like a single-row insert: bump the aggregate's version and write the
// outbox row carrying it. Run outside an explicit transaction, the
// statement commits on its own.
const commitSQL = `WITH o AS (
	INSERT INTO orders (id, version, status) VALUES ($1, 1, 'confirmed')
	ON CONFLICT (id) DO UPDATE SET version = orders.version + 1, updated_at = now()
	RETURNING version)
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, source, version, traceparent)
SELECT $2, 'order', $1, $3, $4::text || o.version::text || $5::text, $6, o.version, $7 FROM o
RETURNING version`

// commit runs the op's transaction and returns the aggregate's new version.
func (p *Producer) commit(ctx context.Context, v history.Value, outbox, abort bool) (int64, error) {
	if outbox && !abort && len(p.cfg.Transaction) == 0 {
		return p.commitOne(ctx, v)
	}
	tx, err := p.db.Begin(ctx)
	if err != nil {
		return 0, definite(err)
	}
	defer tx.Rollback(context.Background())
	var version int64
	err = tx.QueryRow(ctx, `INSERT INTO orders (id, version, status) VALUES ($1, 1, 'confirmed')
		ON CONFLICT (id) DO UPDATE SET version = orders.version + 1, updated_at = now()
		RETURNING version`, v.Key).Scan(&version)
	if err != nil {
		return 0, definite(err)
	}
	if outbox {
		vals := Values{
			EventID: v.Event, AggregateID: v.Key, Version: version,
			Payload: string(SchemaPayload(v.Key, version, v.Poison, v.Schema)), Type: EventType, Source: v.Source,
			Events: p.cfg.Events, TraceParent: v.Trace,
		}
		for i, st := range p.cfg.Transaction {
			if _, err := tx.Exec(ctx, st.SQL, st.Values(vals)...); err != nil {
				return 0, definite(fmt.Errorf("transaction[%d]: %w", i, err))
			}
		}
	}
	if abort {
		return 0, definite(errAborted)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, indeterminateCommit(err)
	}
	return version, nil
}

// commitOne runs the outbox op as [commitSQL]. An error is definite when
// the server answered it or the statement never left; otherwise (the
// connection dropped mid-flight) the commit may have happened.
func (p *Producer) commitOne(ctx context.Context, v history.Value) (int64, error) {
	conn, err := p.db.Acquire(ctx)
	if err != nil {
		return 0, definite(err)
	}
	defer conn.Release()
	pre, post := payloadParts(v.Key, v.Poison, v.Schema)
	var version int64
	err = conn.QueryRow(ctx, commitSQL, v.Key, v.Event, EventType, pre, post, v.Source, v.Trace).Scan(&version)
	if err != nil {
		if pgconn.SafeToRetry(err) {
			return 0, definite(err)
		}
		return 0, indeterminateCommit(err)
	}
	return version, nil
}

// publish sends v straight to the broker (the known-bad variants) and
// reports whether the broker confirmed it.
func (p *Producer) publish(ctx context.Context, v history.Value) (bool, error) {
	if _, err := p.rec.Record(history.Invoke, history.Publish, v); err != nil {
		return false, err
	}
	// The publish is a span of the op's trace.
	v.Trace = trace.Child(v.Trace)
	ev := broker.Event{ID: v.Event, Source: v.Source, Key: v.Key, Version: v.Version, Type: EventType, Payload: SchemaPayload(v.Key, v.Version, v.Poison, v.Schema), TraceParent: v.Trace}
	perr := p.pub.Publish(ctx, []broker.Event{ev})[0]
	t := history.OK
	if perr != nil {
		v.Error = perr.Error()
		t = history.Fail
		if errors.Is(perr, broker.ErrUnconfirmed) {
			t = history.Info
		}
	}
	_, err := p.rec.Record(t, history.Publish, v)
	return perr == nil, err
}

// definiteError wraps an error that proves the op did not take effect.
type definiteError struct{ err error }

func (e definiteError) Error() string { return e.err.Error() }
func (e definiteError) Unwrap() error { return e.err }

func definite(err error) error { return definiteError{err} }

// indeterminateCommit classifies a COMMIT error: the server's own answer
// (an SQLSTATE) is definite, anything else (a dropped connection, a
// timeout) leaves the outcome unknown.
func indeterminateCommit(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return definite(err)
	}
	return err
}

// recordOutcome records a failed op as fail when it definitely did not
// happen, info otherwise.
func (p *Producer) recordOutcome(f history.F, v history.Value, err error) error {
	v.Error = err.Error()
	t := history.Info
	var d definiteError
	if errors.As(err, &d) {
		t = history.Fail
	}
	_, rerr := p.rec.Record(t, f, v)
	return rerr
}
