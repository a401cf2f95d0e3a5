// Package consumer is the pipeline's read side: it takes a subscription's
// deliveries and applies each event's effect through an inbox, correctly
// or in one of its known-bad variants ([Variant]).
//
// The correct consumer receives an event, validates it, and in one
// transaction records it in the inbox and, only if it is new, applies its
// effect; then it acks. Several independent subscriptions each run their
// own consumers with their own inbox scope.
//
// Transient errors (the database is down) are retried in-process with
// exponential backoff and full jitter, so they never count as delivery
// attempts and consumers hit by one outage do not retry in step; past a
// retry budget (Config.RetryBudget) the delivery is given back to the
// broker. Permanent ones (a poison event) are given back to the broker
// and dead-lettered after MaxAttempts, with the reason.
package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/failpoint"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/internal/backoff"
	"github.com/deliverycheck/deliverycheck/internal/choice"
	"github.com/deliverycheck/deliverycheck/internal/trace"
)

// Variant is how the consumer dedupes, orders and acks.
type Variant string

const (
	// Inbox is correct: inbox row + effect in one tx, version-guarded,
	// ack after commit.
	Inbox Variant = "inbox"
	// AckFirst is known-bad: ack before the effect is durable; a crash
	// in between loses the event.
	AckFirst Variant = "ack-first"
	// NoInbox is known-bad: at-least-once without dedupe; a redelivery
	// applies the effect again.
	NoInbox Variant = "no-inbox"
	// CheckThenAct is known-bad: SELECT, then INSERT into an inbox with
	// no unique constraint; concurrent redeliveries both pass the check.
	CheckThenAct Variant = "check-then-act"
	// NoVersionGuard is known-bad: applies v7 after v8.
	NoVersionGuard Variant = "no-version-guard"
	// InboxByID is known-bad: its inbox is keyed by (consumer, event id),
	// leaving out the source. CloudEvents identifies an event by source +
	// id, so a second source's event with an id the first already used
	// is turned away as a duplicate: lost.
	InboxByID Variant = "inbox-by-id"
	// InboxByTrace is known-bad: its inbox is keyed by (consumer, trace
	// id of the traceparent header). A trace id is no event identity: a
	// relay that starts a new trace on every publish attempt
	// (observability.traces: per-attempt) makes a republished event pass
	// the inbox and be applied again.
	InboxByTrace Variant = "inbox-by-trace"
	// Trusting is known-bad: exactly the inbox consumer, but it checks
	// only that an event is well-formed (ids, key, version, a known type,
	// size, payload schema), not its authority (source and type, tenant,
	// version ahead, freshness, signature; see [Security]). "It came from
	// our own broker" is no trust boundary: it applies whatever an
	// intruder publishes there.
	Trusting Variant = "trusting"
	// Unbounded is known-bad: exactly the inbox consumer, but it parses
	// whatever a message claims, without limits (see [MaxHeaders]): no
	// header count, encoding or size checks, no payload size limit, gzip
	// inflated whole, JSON decoded into any. A compression bomb makes its
	// memory grow to the bomb's size on every attempt, and an event id
	// that is not valid UTF-8 makes its effect's insert fail forever: it
	// stalls.
	Unbounded Variant = "unbounded"
	// FixedRetry is known-bad: exactly the inbox consumer, but it
	// retries a transient failure every second, without jitter: every
	// consumer hit by one outage retries in step (retry-storm; issue 25,
	// docs/pipeline.md).
	FixedRetry Variant = "fixed-retry"
	// RetryForever is known-bad: exactly the inbox consumer, but it
	// treats every refusal as transient and retries it without a limit:
	// a poison event never reaches the dead-letter queue (over-retried).
	RetryForever Variant = "retry-forever"
	// AutoCommit is known-bad (Kafka): exactly the inbox consumer, but
	// its offsets are committed on a timer as polled, ahead of the
	// effects: a crash loses what was polled and not applied.
	AutoCommit Variant = "auto-commit"
	// CommitOnRevoke is known-bad (Kafka): exactly the inbox consumer, but
	// under the eager protocol it commits its polled positions when a
	// rebalance revokes its partitions, and drops what it had buffered:
	// the next owner skips it.
	CommitOnRevoke Variant = "commit-on-revoke"
)

// Variants lists every consumer variant.
func Variants() []Variant {
	return []Variant{Inbox, AckFirst, NoInbox, CheckThenAct, NoVersionGuard, InboxByID, InboxByTrace, Trusting, Unbounded,
		FixedRetry, RetryForever, AutoCommit, CommitOnRevoke}
}

// ParseVariant checks a variant name.
func ParseVariant(s string) (Variant, error) {
	return choice.Parse(s, Variants(), "consumer: unknown variant")
}

// Config tunes one consumer process.
type Config struct {
	Variant Variant `json:"variant"`
	// Subscription is the consumer group / queue, and the inbox scope.
	Subscription string `json:"subscription"`
	// MaxAttempts is how many deliveries a poison event gets before it is
	// dead-lettered, overriding the default 5.
	MaxAttempts int64 `json:"max_attempts"`
	// Sources are the accepted event sources; empty accepts any non-empty.
	Sources []string `json:"sources"`
	// MaxPayload is the largest accepted payload in bytes, overriding the
	// default 64 KiB.
	MaxPayload int `json:"max_payload"`
	// Workers is how many deliveries one process handles at once,
	// overriding the default 1. More than one only makes sense where the
	// broker hands out competing deliveries (RabbitMQ).
	Workers int `json:"workers"`
	// BackoffBase and BackoffCap bound transient-error retries,
	// overriding the defaults 10ms and 1s.
	BackoffBase time.Duration `json:"backoff_base"`
	BackoffCap  time.Duration `json:"backoff_cap"`
	// Work is how long applying one effect takes inside the transaction
	// (a real handler does something there), default none. It widens the
	// window between a check and its act, as real work does.
	Work time.Duration `json:"work"`
	// Batch is the most deliveries applied in one transaction, where the
	// broker can hand out several at once (see [broker.Batcher]). The
	// default is 100 for the inbox variant and the known-bad ones that
	// are the inbox consumer but for one thing (trusting, unbounded,
	// fixed-retry, retry-forever: compared with a correct run, they must
	// have as many retriers), and 1 for the other known-bad ones, which
	// keep one delivery per transaction as their tests show them caught
	// that way. Work applies per transaction, not per delivery.
	Batch int `json:"batch"`
	// Security is what the consumer demands of a well-formed event's
	// authority (every variant but trusting checks it). An event that
	// fails it is dead-lettered at once: waiting never authorizes it.
	Security Security `json:"security"`
	// SchemaVersions are the event schema versions this build accepts,
	// overriding the default [1]: an event of another version is refused
	// (retried, then dead-lettered) until a deploy-fix redeploys the
	// consumer accepting it (issue 25, DLQ redrive).
	SchemaVersions []int64 `json:"schema_versions,omitempty"`
	// RetryBudget bounds the in-process retries of one delivery's
	// transient failures, overriding the default 1m: past it the
	// delivery is handed back to the broker.
	RetryBudget time.Duration `json:"retry_budget,omitempty"`
}

// Consumer handles one subscription's deliveries for one process.
type Consumer struct {
	cfg Config
	db  *pgxpool.Pool
	sub broker.Subscriber
	rec *history.Recorder
	fp  *failpoint.Set

	retry backoff.Policy // transient-error retries
	acks  sync.WaitGroup // asynchronous acks not yet answered

	applySQL string // this variant's [applySQL]

	known versions // versions known applied, for Security.MaxVersionAhead
}

// New returns a consumer.
func New(cfg Config, db *pgxpool.Pool, sub broker.Subscriber, rec *history.Recorder, fp *failpoint.Set) (*Consumer, error) {
	if _, err := ParseVariant(string(cfg.Variant)); err != nil {
		return nil, err
	}
	if cfg.Subscription == "" {
		return nil, errors.New("consumer: no subscription")
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 5
	}
	if cfg.MaxPayload <= 0 {
		cfg.MaxPayload = 64 << 10
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 1
	}
	if cfg.BackoffBase <= 0 {
		cfg.BackoffBase = 10 * time.Millisecond
	}
	if cfg.BackoffCap <= 0 {
		cfg.BackoffCap = time.Second
	}
	if cfg.RetryBudget <= 0 {
		cfg.RetryBudget = time.Minute
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 1
		if batchesAll(cfg.Variant) {
			cfg.Batch = 100
		}
	}
	if cfg.Variant == AckFirst || cfg.Variant == CheckThenAct {
		cfg.Batch = 1 // their flaws live in the single-delivery path
	}
	return &Consumer{
		cfg: cfg, db: db, sub: sub, rec: rec, fp: fp,
		retry:    retryPolicy(cfg),
		applySQL: applySQL(cfg.Variant != NoInbox, keyed(cfg.Variant), cfg.Variant != NoVersionGuard),
	}, nil
}

// Run consumes until ctx ends. Only a failure to write the history is
// returned; everything else is retried or recorded.
func (c *Consumer) Run(ctx context.Context) error {
	errs := make(chan error, c.cfg.Workers)
	var wg sync.WaitGroup
	for range c.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- c.loop(ctx)
		}()
	}
	wg.Wait()
	// Let acks in flight land before the subscriber closes, so a clean
	// stop does not turn them into redeliveries.
	c.acks.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (c *Consumer) loop(ctx context.Context) error {
	batcher, _ := c.sub.(broker.Batcher)
	if c.cfg.Batch <= 1 {
		batcher = nil
	}
	accept := func(d *broker.Delivery) bool { return c.validate(d) == "" && c.authorizedWithoutQuery(d) }
	for ctx.Err() == nil {
		var ds []*broker.Delivery
		var err error
		if batcher != nil {
			ds, err = batcher.NextBatch(ctx, c.cfg.Batch, accept)
		} else {
			var d *broker.Delivery
			d, err = c.sub.Next(ctx)
			ds = []*broker.Delivery{d}
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			c.sleep(ctx, 0)
			continue
		}
		if len(ds) == 1 {
			err = c.Handle(ctx, ds[0])
		} else {
			err = c.HandleBatch(ctx, ds)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// historyError marks a failure to record, which must stop the worker.
type historyError struct{ error }

func (e historyError) Unwrap() error { return e.error }

func (c *Consumer) record(t history.Type, f history.F, v history.Value) error {
	if _, err := c.rec.Record(t, f, v); err != nil {
		return historyError{err}
	}
	return nil
}

func (c *Consumer) value(d *broker.Delivery) history.Value {
	return history.Value{
		Event: broker.SafeText(d.ID), Source: broker.SafeText(d.Source), Key: broker.SafeText(d.Key), Version: d.Version,
		Partition: d.Partition, Offset: d.Offset, Tag: int64(d.Tag), Attempt: d.Attempt,
		Consumer: c.cfg.Subscription, Trace: broker.SafeText(d.TraceParent),
	}
}

// retryPolicy is how cfg's variant waits between transient retries:
// exponential from BackoffBase to BackoffCap with full jitter, so
// consumers hit by one outage spread their retries; the known-bad
// fixed-retry waits BackoffCap every time, without jitter, so they retry
// in step.
func retryPolicy(cfg Config) backoff.Policy {
	if cfg.Variant == FixedRetry {
		return backoff.Policy{Base: cfg.BackoffCap, Cap: cfg.BackoffCap, Jitter: backoff.NoJitter}
	}
	return backoff.Policy{Base: cfg.BackoffBase, Cap: cfg.BackoffCap}
}

// Handle processes one delivery. Its error is only a failure to record.
func (c *Consumer) Handle(ctx context.Context, d *broker.Delivery) error {
	v := c.value(d)
	if err := c.record(history.OK, history.Deliver, v); err != nil {
		return err
	}
	if reason, permanent := c.check(d); reason != "" {
		return c.reject(ctx, d, v, reason, permanent)
	}
	reason, err := c.authorize(ctx, d)
	if err != nil {
		return nil // ctx ended: the delivery stays unsettled, as in apply
	}
	if reason != "" {
		return c.reject(ctx, d, v, reason, true)
	}
	if c.cfg.Variant == AckFirst {
		if err := c.ack(ctx, d, v); err != nil {
			return err
		}
		c.fp.Hit(failpoint.ConsumerAfterAckBeforeCommit, v)
	}
	// Transient failures retry in-process: they are not the event's fault
	// and must not count towards its dead-letter limit; past the retry
	// budget the delivery goes back to the broker.
	var failing time.Time
	for attempt := 0; ; attempt++ {
		done, err := c.apply(ctx, d, v)
		if err != nil {
			var herr historyError
			if errors.As(err, &herr) || ctx.Err() != nil {
				return herr.error
			}
			if c.budgetSpent(&failing) {
				return c.giveBack(ctx, []*broker.Delivery{d}, []history.Value{v})
			}
			c.sleep(ctx, attempt)
			continue
		}
		if !done {
			return nil
		}
		break
	}
	c.fp.Hit(failpoint.ConsumerAfterCommitBeforeAck, v)
	if c.cfg.Variant != AckFirst {
		return c.ack(ctx, d, v)
	}
	return nil
}

// HandleBatch processes deliveries that all passed validation and
// [Consumer.authorizedWithoutQuery], in one
// transaction, then acks each. It records every op Handle would, in the
// same order per delivery, and hits each failpoint once per delivery, so a
// failpoint fires with the whole batch in flight. Its error is only a
// failure to record.
func (c *Consumer) HandleBatch(ctx context.Context, ds []*broker.Delivery) error {
	vs := make([]history.Value, len(ds))
	es := make([]history.Entry, 0, 2*len(ds))
	for i, d := range ds {
		vs[i] = c.value(d)
		es = append(es, history.Entry{Type: history.OK, F: history.Deliver, Value: vs[i]})
	}
	for _, v := range vs {
		es = append(es, history.Entry{Type: history.Invoke, F: history.Apply, Value: v})
	}
	if err := c.recordAll(es); err != nil {
		return err
	}
	var outs []outcome
	var failing time.Time
	for attempt := 0; ; attempt++ {
		var err error
		outs, err = c.txBatch(ctx, ds, vs)
		if err == nil {
			break
		}
		t := history.Fail
		if errors.Is(err, errCommitUnknown) {
			t = history.Info
		}
		es = es[:0]
		for _, v := range vs {
			v.Error = err.Error()
			es = append(es, history.Entry{Type: t, F: history.Apply, Value: v})
		}
		if err := c.recordAll(es); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		if c.budgetSpent(&failing) {
			return c.giveBack(ctx, ds, vs)
		}
		c.sleep(ctx, attempt)
		es = es[:0]
		for _, v := range vs {
			es = append(es, history.Entry{Type: history.Invoke, F: history.Apply, Value: v})
		}
		if err := c.recordAll(es); err != nil {
			return err
		}
	}
	es = es[:0]
	for i, v := range vs {
		es = outcomeOps(es, outs[i], v)
	}
	if err := c.recordAll(es); err != nil {
		return err
	}
	for _, v := range vs {
		c.fp.Hit(failpoint.ConsumerAfterCommitBeforeAck, v)
	}
	return c.ackAll(ctx, ds, vs)
}

// budgetSpent reports whether the transient failures of one delivery (or
// batch) have outlasted the retry budget, *since being when the first of
// them happened (set on the first call).
func (c *Consumer) budgetSpent(since *time.Time) bool {
	if since.IsZero() {
		*since = time.Now()
		return false
	}
	return time.Since(*since) >= c.cfg.RetryBudget
}

// giveBack hands deliveries whose transient failures outlasted the retry
// budget back to the broker, recording for each an apply fail whose
// reason begins [history.ReasonRetryBudget]: the event is not at fault,
// yet holding it longer would hold its partition or prefetch slot as
// long as the outage lasts. On RabbitMQ the give-back counts as a
// delivery towards the dead-letter limit (docs/pipeline.md, Retries).
func (c *Consumer) giveBack(ctx context.Context, ds []*broker.Delivery, vs []history.Value) error {
	es := make([]history.Entry, len(ds))
	for i, d := range ds {
		v := vs[i]
		v.Reason = history.ReasonRetryBudget + " (" + c.cfg.RetryBudget.String() + "): handed back to the broker"
		if err := c.sub.Retry(ctx, d); err != nil {
			v.Error = err.Error()
		}
		es[i] = history.Entry{Type: history.Fail, F: history.Apply, Value: v}
	}
	return c.recordAll(es)
}

func (c *Consumer) recordAll(es []history.Entry) error {
	if err := c.rec.RecordAll(es); err != nil {
		return historyError{err}
	}
	return nil
}

// ackAll acks a batch, oldest first, asynchronously where the subscriber
// can; the ack ops of the batch are recorded together.
func (c *Consumer) ackAll(ctx context.Context, ds []*broker.Delivery, vs []history.Value) error {
	es := make([]history.Entry, len(vs))
	for i, v := range vs {
		es[i] = history.Entry{Type: history.Invoke, F: history.Ack, Value: v}
	}
	if err := c.recordAll(es); err != nil {
		return err
	}
	var results []<-chan error
	if a, ok := c.sub.(broker.AsyncAcker); ok {
		results = a.AckAsync(ctx, ds)
	} else {
		results = make([]<-chan error, len(ds))
		for i, d := range ds {
			ch := make(chan error, 1)
			ch <- c.sub.Ack(ctx, d)
			results[i] = ch
		}
	}
	c.acks.Add(1)
	go func() {
		defer c.acks.Done()
		out := make([]history.Entry, len(vs))
		for i, v := range vs {
			t := history.OK
			if err := <-results[i]; err != nil {
				v.Error = err.Error()
				t = history.Info
			}
			out[i] = history.Entry{Type: t, F: history.Ack, Value: v}
		}
		// A failure to record sticks in the recorder: the worker's next
		// record returns it and stops.
		_ = c.recordAll(out)
	}()
	return nil
}

// txBatch applies a batch (or a single delivery) in one transaction: BEGIN
// and one [applySQL] per delivery in a single round trip, then COMMIT,
// with the failpoint between them. On an error the connection is left
// inside its transaction, so the pool closes it, which rolls back. The statements run in
// aggregate order (stable, so one aggregate's events keep their order), so
// two workers' batches lock projection rows in the same order and cannot
// deadlock.
func (c *Consumer) txBatch(ctx context.Context, ds []*broker.Delivery, vs []history.Value) ([]outcome, error) {
	conn, err := c.db.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	defer conn.Release()
	order := make([]int, len(ds))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(ds[a].Key, ds[b].Key) })
	counts := make([][2]int64, len(ds))
	var b pgx.Batch
	b.Queue("BEGIN")
	if batchesAll(c.cfg.Variant) && len(ds) > 1 {
		for _, seg := range segments(ds, order) {
			queueApplyAll(&b, c.cfg.Subscription, ds, seg, counts)
		}
	} else {
		for _, i := range order {
			d := ds[i]
			args := []any{c.cfg.Subscription, d.Source, d.ID, d.Key, d.Version}
			if keyed(c.cfg.Variant) {
				args = append(args, dedupeKey(c.cfg.Variant, d))
			}
			b.Queue(c.applySQL, args...).QueryRow(func(row pgx.Row) error {
				return row.Scan(&counts[i][0], &counts[i][1])
			})
		}
	}
	if err := conn.SendBatch(ctx, &b).Close(); err != nil {
		return nil, fmt.Errorf("apply: %w", err)
	}
	if err := c.work(ctx); err != nil {
		return nil, err
	}
	outs := make([]outcome, len(ds))
	for i, n := range counts {
		switch {
		case n[0] == 0:
			outs[i] = duplicate
		case n[1] == 0:
			outs[i] = stale
		default:
			outs[i] = applied
			c.fp.Hit(failpoint.ConsumerAfterEffectBeforeCommit, vs[i])
		}
	}
	if err := c.commitConn(ctx, conn); err != nil {
		return nil, err
	}
	c.noteApplied(ds, outs)
	return outs, nil
}

func (c *Consumer) ack(ctx context.Context, d *broker.Delivery, v history.Value) error {
	// Ack-first must know its ack landed before it applies, so it waits.
	if _, ok := c.sub.(broker.AsyncAcker); ok && c.cfg.Variant != AckFirst {
		return c.ackAll(ctx, []*broker.Delivery{d}, []history.Value{v})
	}
	if err := c.record(history.Invoke, history.Ack, v); err != nil {
		return err
	}
	if err := c.sub.Ack(ctx, d); err != nil {
		v.Error = err.Error()
		return c.record(history.Info, history.Ack, v)
	}
	return c.record(history.OK, history.Ack, v)
}

// apply runs the consumer transaction. done is false when ctx ended. A
// non-history error is transient and worth retrying.
func (c *Consumer) apply(ctx context.Context, d *broker.Delivery, v history.Value) (done bool, err error) {
	if err := c.record(history.Invoke, history.Apply, v); err != nil {
		return false, err
	}
	outcome, err := c.tx(ctx, d, v)
	if err != nil {
		v.Error = err.Error()
		t := history.Fail
		if errors.Is(err, errCommitUnknown) {
			t = history.Info
		}
		if rerr := c.record(t, history.Apply, v); rerr != nil {
			return false, rerr
		}
		if ctx.Err() != nil {
			return false, nil
		}
		return false, err
	}
	err = c.recordAll(outcomeOps(nil, outcome, v))
	return err == nil, err
}

// outcomeOps appends to es the ops that record a committed apply's
// outcome for v.
func outcomeOps(es []history.Entry, o outcome, v history.Value) []history.Entry {
	switch o {
	case duplicate:
		v.Reason = "duplicate: already in the inbox"
		return append(es, history.Entry{Type: history.Fail, F: history.Apply, Value: v})
	case stale:
		v.Reason = "stale: a newer version is already applied"
		return append(es, history.Entry{Type: history.Fail, F: history.Apply, Value: v},
			history.Entry{Type: history.OK, F: history.SkipStale, Value: v})
	}
	return append(es, history.Entry{Type: history.OK, F: history.Apply, Value: v})
}

type outcome int

const (
	applied outcome = iota
	duplicate
	stale
)

var errCommitUnknown = errors.New("commit outcome unknown")

// applySQL is the consumer transaction's work as one statement, for every
// variant but check-then-act (whose flaw needs a window between its
// check and its act). In order: the inbox row (skipped without an inbox;
// in inbox_keyed under the dedupe key $6 when keyed; a conflict means a
// duplicate and stops here); the projection, whose
// ON CONFLICT DO UPDATE locks the aggregate's row and, with the version
// guard, updates it only if the event is not older than what is applied
// (re-checked against the latest committed version when it had to wait,
// so two workers on one aggregate serialise); then the ledger row, only
// if the projection moved. It returns how many inbox rows and effects it
// wrote.
func applySQL(inbox, keyed, guard bool) string {
	var b strings.Builder
	b.WriteString("WITH ")
	from := ""
	switch {
	case inbox && keyed:
		b.WriteString(`i AS (INSERT INTO inbox_keyed (consumer, dedupe_key, source, event_id) VALUES ($1, $6, $2, $3)
	ON CONFLICT DO NOTHING RETURNING 1), `)
		from = " FROM i"
	case inbox:
		b.WriteString(`i AS (INSERT INTO inbox (consumer, source, event_id) VALUES ($1, $2, $3)
	ON CONFLICT DO NOTHING RETURNING 1), `)
		from = " FROM i"
	}
	b.WriteString(`p AS (INSERT INTO projection (consumer, aggregateid, version) SELECT $1, $4, $5` + from + `
	ON CONFLICT (consumer, aggregateid) DO UPDATE SET version = EXCLUDED.version`)
	if guard {
		b.WriteString(` WHERE projection.version <= EXCLUDED.version`)
	}
	b.WriteString(` RETURNING 1),
e AS (INSERT INTO effects (consumer, source, event_id, aggregateid, version) SELECT $1, $2, $3, $4, $5 FROM p RETURNING 1)
SELECT `)
	if inbox {
		b.WriteString(`(SELECT count(*) FROM i)`)
	} else {
		b.WriteString(`1::bigint`)
	}
	b.WriteString(`, (SELECT count(*) FROM e)`)
	return b.String()
}

// batchesAll reports whether variant v applies a batch of deliveries in
// one statement ([applyAllSQL]) and takes batches of 100 by default: the
// inbox consumer and the trusting and unbounded ones, which differ from
// it only in what they check.
func batchesAll(v Variant) bool {
	switch v {
	case Inbox, Trusting, Unbounded, FixedRetry, RetryForever:
		return true
	}
	return false
}

// keyed reports whether variant v dedupes in inbox_keyed, by a key other
// than the event's (source, id).
func keyed(v Variant) bool { return v == InboxByID || v == InboxByTrace }

// dedupeKey is what a keyed variant's inbox takes as d's identity: the
// event id alone (inbox-by-id), or the trace id of its traceparent
// (inbox-by-trace; a delivery without a well-formed one falls back to its
// source and id, so a relay that sends none does not make every event one).
func dedupeKey(v Variant, d *broker.Delivery) string {
	if v == InboxByID {
		return d.ID
	}
	if id, ok := trace.ID(d.TraceParent); ok {
		return id
	}
	return d.Source + " " + d.ID
}

// applyAllSQL is [applySQL] for many deliveries in one statement, for the
// inbox variant: the deliveries come as arrays ($2 sources, $3 event ids,
// $4 aggregate ids, $5 versions, in aggregate order), and the statement
// returns, per delivery in that order, whether its inbox row and its
// effect were written. Each step takes the rows in the arrays' order, so
// projection rows are locked in aggregate order, as with a statement per
// delivery. No two of the deliveries may share an aggregate or an event
// (see segments): a step matches rows to deliveries by them, and an
// INSERT ON CONFLICT DO UPDATE cannot touch one row twice.
//
// A statement for many deliveries instead of one each saves PostgreSQL
// the per-statement work (executor start, three CTEs' setup).
const applyAllSQL = `WITH ev AS (
	SELECT * FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[]) WITH ORDINALITY AS e(source, event_id, aggregateid, version, n)),
i AS (INSERT INTO inbox (consumer, source, event_id) SELECT $1, source, event_id FROM ev ORDER BY n
	ON CONFLICT DO NOTHING RETURNING source, event_id),
p AS (INSERT INTO projection (consumer, aggregateid, version)
	SELECT $1, ev.aggregateid, ev.version FROM ev JOIN i USING (source, event_id) ORDER BY ev.n
	ON CONFLICT (consumer, aggregateid) DO UPDATE SET version = EXCLUDED.version
	WHERE projection.version <= EXCLUDED.version RETURNING aggregateid),
e AS (INSERT INTO effects (consumer, source, event_id, aggregateid, version)
	SELECT $1, ev.source, ev.event_id, ev.aggregateid, ev.version FROM ev JOIN p USING (aggregateid) ORDER BY ev.n
	RETURNING source, event_id)
SELECT (i.event_id IS NOT NULL)::int, (e.event_id IS NOT NULL)::int
FROM ev LEFT JOIN i USING (source, event_id) LEFT JOIN e USING (source, event_id) ORDER BY ev.n`

// queueApplyAll queues [applyAllSQL] for ds in the given order, filling
// counts like the statements per delivery do.
func queueApplyAll(b *pgx.Batch, sub string, ds []*broker.Delivery, order []int, counts [][2]int64) {
	sources, ids, keys := make([]string, len(order)), make([]string, len(order)), make([]string, len(order))
	versions := make([]int64, len(order))
	for j, i := range order {
		sources[j], ids[j], keys[j], versions[j] = ds[i].Source, ds[i].ID, ds[i].Key, ds[i].Version
	}
	b.Queue(applyAllSQL, sub, sources, ids, keys, versions).Query(func(rows pgx.Rows) error {
		j := 0
		for rows.Next() {
			if j == len(order) {
				return errors.New("apply: more rows than deliveries")
			}
			if err := rows.Scan(&counts[order[j]][0], &counts[order[j]][1]); err != nil {
				return err
			}
			j++
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if j != len(order) {
			return fmt.Errorf("apply: %d rows for %d deliveries", j, len(order))
		}
		return nil
	})
}

// segments cuts a batch, in the given (aggregate) order, into runs that
// [applyAllSQL] can take: a run ends before a delivery whose aggregate or
// event it already holds. One aggregate's deliveries are adjacent in that
// order, so a run rarely ends early, and the runs applied one after the
// other lock projection rows in the same non-decreasing aggregate order a
// statement per delivery does, and see each other's writes as those do.
func segments(ds []*broker.Delivery, order []int) [][]int {
	var out [][]int
	start := 0
	keys := map[string]bool{}
	events := map[[2]string]bool{}
	for j, i := range order {
		d := ds[i]
		e := [2]string{d.Source, d.ID}
		if keys[d.Key] || events[e] {
			out = append(out, order[start:j])
			start = j
			clear(keys)
			clear(events)
		}
		keys[d.Key], events[e] = true, true
	}
	return append(out, order[start:])
}

// tx is the consumer's one local transaction.
func (c *Consumer) tx(ctx context.Context, d *broker.Delivery, v history.Value) (outcome, error) {
	if c.cfg.Variant == CheckThenAct {
		return c.checkThenAct(ctx, d, v)
	}
	outs, err := c.txBatch(ctx, []*broker.Delivery{d}, []history.Value{v})
	if err != nil {
		return 0, err
	}
	return outs[0], nil
}

// checkThenAct is the check-then-act variant's transaction, statement by
// statement: its inbox check is a SELECT and its record an INSERT into a
// table with no unique constraint, and Work runs between the two halves,
// so concurrent redeliveries of one event can both pass the check. The
// version guard is the correct one (lock the projection row, skip an
// older event), so the inbox is the only mechanism it lacks.
func (c *Consumer) checkThenAct(ctx context.Context, d *broker.Delivery, v history.Value) (outcome, error) {
	tx, err := c.db.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.Background())
	sub := c.cfg.Subscription
	var seen bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM inbox_unchecked WHERE consumer = $1 AND source = $2 AND event_id = $3)`, sub, d.Source, d.ID).Scan(&seen); err != nil {
		return 0, fmt.Errorf("inbox check: %w", err)
	}
	if seen {
		return duplicate, c.commit(ctx, tx)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO inbox_unchecked (consumer, source, event_id) VALUES ($1, $2, $3)`, sub, d.Source, d.ID); err != nil {
		return 0, fmt.Errorf("inbox: %w", err)
	}
	// Make sure the projection row exists, then lock it, so two workers
	// handling one aggregate serialise here: the second waits for the
	// first to commit and then sees its version.
	if _, err := tx.Exec(ctx, `INSERT INTO projection (consumer, aggregateid, version) VALUES ($1, $2, 0) ON CONFLICT DO NOTHING`, sub, d.Key); err != nil {
		return 0, fmt.Errorf("projection: %w", err)
	}
	var cur int64
	err = tx.QueryRow(ctx, `SELECT version FROM projection WHERE consumer = $1 AND aggregateid = $2 FOR UPDATE`, sub, d.Key).Scan(&cur)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("projection: %w", err)
	}
	if cur > d.Version {
		return stale, c.commit(ctx, tx)
	}
	if err := c.work(ctx); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO effects (consumer, source, event_id, aggregateid, version) VALUES ($1, $2, $3, $4, $5)`, sub, d.Source, d.ID, d.Key, d.Version); err != nil {
		return 0, fmt.Errorf("effect: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE projection SET version = $3 WHERE consumer = $1 AND aggregateid = $2`, sub, d.Key, d.Version); err != nil {
		return 0, fmt.Errorf("projection: %w", err)
	}
	c.fp.Hit(failpoint.ConsumerAfterEffectBeforeCommit, v)
	return applied, c.commit(ctx, tx)
}

// work waits Config.Work, the handler's own time inside the transaction.
func (c *Consumer) work(ctx context.Context) error {
	if c.cfg.Work <= 0 {
		return nil
	}
	return backoff.Sleep(ctx, c.cfg.Work)
}

func (c *Consumer) commitConn(ctx context.Context, conn *pgxpool.Conn) error {
	if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("commit: %w: %w", errCommitUnknown, err)
	}
	return nil
}

func (c *Consumer) commit(ctx context.Context, tx pgx.Tx) error {
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w: %w", errCommitUnknown, err)
	}
	return nil
}

// validate returns why d can never be applied, or "" if it can (see
// [Consumer.check]).
func (c *Consumer) validate(d *broker.Delivery) string {
	r, _ := c.check(d)
	return r
}

// truncate cuts s to at most n bytes, at a rune boundary, so a cut never
// makes valid text invalid.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// reject handles a permanently invalid delivery: give it back until it has
// had MaxAttempts, then dead-letter it with the reason. An unauthorized
// one (now) is dead-lettered at once: no redelivery makes it authorized.
func (c *Consumer) reject(ctx context.Context, d *broker.Delivery, v history.Value, reason string, now bool) error {
	reason = broker.SafeText(reason) // it may cite a hostile value
	v.Reason = reason
	if c.cfg.Variant == RetryForever && !now && d.ID != "" {
		return c.retryForever(ctx, v)
	}
	if !now && d.Attempt < c.cfg.MaxAttempts && d.ID != "" {
		if err := c.sub.Retry(ctx, d); err != nil {
			v.Error = err.Error()
		}
		return c.record(history.Fail, history.Apply, v)
	}
	// Record the dead letter durably first, then hand it to the broker's
	// dead-letter destination (which acks it).
	for attempt := 0; ; attempt++ {
		_, err := c.db.Exec(ctx, `INSERT INTO dead_letters (consumer, source, event_id, aggregateid, version, reason, attempts, metadata)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
			c.cfg.Subscription, broker.SafeText(d.Source), broker.SafeText(d.ID), broker.SafeText(d.Key), d.Version, reason, d.Attempt, metadata(d))
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		c.sleep(ctx, attempt)
	}
	if err := c.sub.DeadLetter(ctx, d, reason); err != nil {
		v.Error = err.Error()
	}
	return c.record(history.OK, history.DLQ, v)
}

// retryForever is the known-bad retry-forever's answer to a refusal that
// is not permanent: it takes it for a transient failure and retries it
// in-process with backoff until ctx ends, never handing the delivery
// back and never dead-lettering it, so a poison event holds its worker
// (and on Kafka its partition) for good. Each attempt is a refusal (an
// apply fail with v's reason), its attempt counting up from the
// delivery's: past MaxAttempts that is over-retried.
func (c *Consumer) retryForever(ctx context.Context, v history.Value) error {
	for n := 0; ctx.Err() == nil; n++ {
		if err := c.record(history.Fail, history.Apply, v); err != nil {
			return err
		}
		c.sleep(ctx, n)
		v.Attempt++
	}
	return nil
}

// metadata keeps the original delivery facts with a dead letter: at most
// MaxHeaders headers (the first by name), each value cut to 256 bytes and
// quoted if it is not valid text, so a hostile message's row stays small
// and storable; headers_dropped counts the rest.
func metadata(d *broker.Delivery) string {
	names := make([]string, 0, len(d.Headers))
	for k := range d.Headers {
		names = append(names, k)
	}
	slices.Sort(names)
	hs := make(map[string]string, min(len(names), MaxHeaders))
	for _, k := range names[:min(len(names), MaxHeaders)] {
		hs[broker.SafeText(truncate(k, 256))] = broker.SafeText(truncate(d.Headers[k], 256))
	}
	m := map[string]any{
		"partition": d.Partition, "offset": d.Offset, "tag": d.Tag,
		"attempt": d.Attempt, "headers": hs, "subscription": d.Subscription,
	}
	if len(names) > MaxHeaders {
		m["headers_dropped"] = len(names) - MaxHeaders
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// sleep waits a full-jitter exponential backoff for the given retry.
func (c *Consumer) sleep(ctx context.Context, attempt int) {
	_ = c.retry.Wait(ctx, attempt)
}
