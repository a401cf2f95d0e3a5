// Package relay moves committed outbox rows to the broker: take a batch of
// unpublished rows, publish, wait for the broker's confirmation, and
// commit the rows' published mark. The mark commits only after the
// confirmation, so a crash anywhere leads to a republish with the same
// event id (a duplicate the consumer's inbox must absorb), never to a
// loss.
package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/failpoint"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/internal/backoff"
	"github.com/deliverycheck/deliverycheck/internal/choice"
	"github.com/deliverycheck/deliverycheck/internal/trace"
	"github.com/deliverycheck/deliverycheck/pipeline/producer"
	"github.com/deliverycheck/deliverycheck/signing"
)

// Variant is how the relay finds rows and publishes them.
type Variant string

const (
	// Polling is correct: unpublished rows, FOR UPDATE SKIP LOCKED,
	// ordered, in batches; confirmed publishes.
	Polling Variant = "polling"
	// HighWaterMark is known-bad: WHERE seq > last_seen skips a row that
	// commits late with a lower seq (concurrent producers).
	HighWaterMark Variant = "high-water-mark"
	// Unconfirmed is known-bad: fire and forget (acks=0 / no publisher
	// confirms); a broker crash loses what it had not written.
	Unconfirmed Variant = "unconfirmed"
	// Unroutable is known-bad: confirms without mandatory, so a message
	// with no bound queue is confirmed and dropped.
	Unroutable Variant = "unroutable"
	// LeaderAck is known-bad (Kafka): acks=1, so a record the leader
	// confirmed before its followers had it is lost when a follower takes
	// over (a replicated Kafka, its leader killed or cut off).
	LeaderAck Variant = "leader-ack"
	// Transient is known-bad (RabbitMQ): confirmed but not persistent,
	// so a classic queue loses what it holds when the broker restarts.
	Transient Variant = "transient"
	// NewIDPerAttempt is known-bad: it mints a new event id for every
	// publish attempt instead of sending the outbox row's, so a republish
	// (a crash after the publish, before the mark) is a new event to
	// every inbox and applied again. It records each id it put on the
	// wire (a publish op's published_as), so the checker can tell whose
	// effect it is.
	NewIDPerAttempt Variant = "new-id-per-attempt"
	// Debezium is correct and not this package's: Debezium's outbox event
	// router in Kafka Connect reads the outbox from the WAL (package
	// pipeline/debezium). At-least-once: a crash before its offsets are
	// flushed republishes.
	Debezium Variant = "debezium"
)

// Variants lists every relay variant.
func Variants() []Variant {
	return []Variant{Polling, HighWaterMark, Unconfirmed, Unroutable, LeaderAck, Transient, NewIDPerAttempt, Debezium}
}

// ParseVariant checks a variant name.
func ParseVariant(s string) (Variant, error) {
	return choice.Parse(s, Variants(), "relay: unknown variant")
}

// Config tunes one relay process.
type Config struct {
	Variant Variant `json:"variant"`
	// Name identifies the relay in relay_idle, where it notes its idle
	// polls for the drain.
	Name string `json:"name"`
	// Batch is the most rows published per transaction, overriding the
	// default 100.
	Batch int `json:"batch"`
	// Poll is the time from the start of one poll to the start of the
	// next unless the last batch was full, overriding the default 50ms.
	// A full batch means rows are waiting, so the relay polls again at
	// once. Waiting out the interval otherwise lets the rows of many
	// commits go out together: polling again the moment a batch was
	// confirmed made batches of a few rows under load, and every batch
	// costs a claim, a broker request and a commit. Measured on a
	// two-core machine under the benchmark's load, 50ms instead of
	// back-to-back polls saved about a twentieth of the CPU per event
	// (most of it the broker's) for about 20ms more commit→apply
	// latency; 100ms saved no more.
	Poll time.Duration `json:"poll"`
	// PublishTimeout bounds one batch's wait for confirmations,
	// overriding the default 10s.
	PublishTimeout time.Duration `json:"publish_timeout"`
	// Authority, when set, is put on every event so that consumers can
	// check it (docs/security.md, "The relay and consumer").
	Authority *Authority `json:"authority,omitempty"`
	// Traces is how the trace context travels: [TracesPropagate] (the
	// default, "") or [TracesPerAttempt].
	Traces string `json:"traces,omitempty"`
}

// The trace modes (scenario observability.traces).
const (
	// TracesPropagate: each publish attempt is a span in the trace the
	// producer started and stored in the outbox row.
	TracesPropagate = "propagate"
	// TracesPerAttempt: each publish attempt starts a new trace.
	TracesPerAttempt = "per-attempt"
)

// Authority is what the relay stamps on every event: the run's tenant,
// the time the outbox row was created (UTC, RFC 3339 with nanoseconds),
// and, with a key, the signature over all of it ([signing.Sign]), made
// last, over the event exactly as it goes on the wire.
type Authority struct {
	Tenant string `json:"tenant,omitempty"`
	Key    []byte `json:"key,omitempty"`
}

// stamp puts the authority's tenant and the row's creation time on ev.
func (a *Authority) stamp(ev *broker.Event, created time.Time) {
	if a == nil {
		return
	}
	ev.Tenant = a.Tenant
	ev.Time = created.UTC().Format(time.RFC3339Nano)
}

// sign signs ev, once every other field is final.
func (a *Authority) sign(ev *broker.Event) {
	if a == nil || len(a.Key) == 0 {
		return
	}
	ev.Signature = signing.Sign(a.Key, *ev)
}

// Relay publishes outbox rows for one process.
type Relay struct {
	cfg      Config
	db       *pgxpool.Pool
	pub      broker.Publisher
	rec      *history.Recorder
	fp       *failpoint.Set
	lastIdle time.Time
	lastSeen int64 // high-water-mark only
	hwmInit  bool
	attempts map[[2]string]int64 // by (source, id): publish attempts so far
}

// New returns a relay over db publishing with pub.
func New(cfg Config, db *pgxpool.Pool, pub broker.Publisher, rec *history.Recorder, fp *failpoint.Set) (*Relay, error) {
	if _, err := ParseVariant(string(cfg.Variant)); err != nil {
		return nil, err
	}
	if cfg.Variant == Debezium {
		return nil, errors.New("relay: the debezium relay runs in Kafka Connect (pipeline/debezium), not in a worker")
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 100
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 50 * time.Millisecond
	}
	if cfg.PublishTimeout <= 0 {
		cfg.PublishTimeout = 10 * time.Second
	}
	return &Relay{cfg: cfg, db: db, pub: pub, rec: rec, fp: fp, attempts: map[[2]string]int64{}}, nil
}

// Run relays until ctx ends. Transient errors (database or broker down)
// are retried with capped exponential backoff; only a failure to write the
// history is returned.
func (r *Relay) Run(ctx context.Context) error {
	// Not jittered: one relay's retries do not need spreading, and the
	// scenarios' timings were tuned on these waits.
	retry := backoff.Policy{Base: 10 * time.Millisecond, Cap: time.Second, Jitter: backoff.NoJitter}
	failures := 0 // passes in a row that failed
	for ctx.Err() == nil {
		began := time.Now()
		n, err := r.Once(ctx)
		var herr historyError
		switch {
		case errors.As(err, &herr):
			return err
		case err != nil:
			_ = retry.Wait(ctx, failures)
			failures++
		case n >= r.cfg.Batch:
			failures = 0 // more rows are waiting
		default:
			failures = 0
			_ = backoff.Sleep(ctx, r.cfg.Poll-time.Since(began))
		}
	}
	return nil
}

// historyError marks a failure to record, which must stop the worker.
type historyError struct{ error }

func (e historyError) Unwrap() error { return e.error }

type row struct {
	seq int64
	ev  broker.Event
}

// claimSQL takes the next batch: it marks up to $1 unpublished rows, the
// oldest first, skipping rows another relay holds, and returns them. The
// mark is part of the relay's transaction, so nobody sees it before the
// commit, which comes only after the broker confirmed: a crash anywhere
// before leaves the rows unpublished. Marking while taking the rows costs
// one write per row (a SELECT FOR UPDATE, then an UPDATE, wrote each row
// twice) and one round trip.
const claimSQL = `UPDATE outbox SET published_at = now() WHERE seq IN (
	SELECT seq FROM outbox WHERE published_at IS NULL ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING seq, id, source, aggregateid, version, type, payload, created_at, coalesce(traceparent, '')`

// Once relays one batch and returns how many rows it published.
func (r *Relay) Once(ctx context.Context) (int, error) {
	if r.cfg.Variant != HighWaterMark {
		return r.claimAndPublish(ctx)
	}
	// The known-bad high-water-mark relay: rows after the highest seq it
	// published, marked once confirmed.
	tx, err := r.db.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("relay: begin: %w", err)
	}
	defer tx.Rollback(context.Background())
	if !r.hwmInit {
		// A restarted relay resumes from its persisted mark, as a real
		// one would: the highest seq already published.
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(seq), 0) FROM outbox WHERE published_at IS NOT NULL`).Scan(&r.lastSeen); err != nil {
			return 0, fmt.Errorf("relay: read high-water mark: %w", err)
		}
		r.hwmInit = true
	}
	rows, err := tx.Query(ctx, `SELECT seq, id, source, aggregateid, version, type, payload, created_at, coalesce(traceparent, '') FROM outbox
		WHERE seq > $1 ORDER BY seq LIMIT $2`, r.lastSeen, r.cfg.Batch)
	if err != nil {
		return 0, fmt.Errorf("relay: poll: %w", err)
	}
	var batch []row
	for rows.Next() {
		var b row
		var payload string
		var created time.Time
		if err := rows.Scan(&b.seq, &b.ev.ID, &b.ev.Source, &b.ev.Key, &b.ev.Version, &b.ev.Type, &payload, &created, &b.ev.TraceParent); err != nil {
			rows.Close()
			return 0, fmt.Errorf("relay: scan: %w", err)
		}
		b.ev.Payload = []byte(payload)
		r.cfg.Authority.stamp(&b.ev, created)
		batch = append(batch, b)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("relay: poll: %w", err)
	}
	if len(batch) == 0 {
		return 0, r.noteIdle(ctx, tx, tx.Commit)
	}
	confirmed, err := r.publish(ctx, batch)
	if err != nil {
		return 0, err
	}
	if len(confirmed) > 0 {
		if _, err := tx.Exec(ctx, `UPDATE outbox SET published_at = now() WHERE seq = ANY($1)`, confirmed); err != nil {
			return 0, fmt.Errorf("relay: mark published: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("relay: commit: %w", err)
	}
	if len(confirmed) < len(batch) {
		return len(confirmed), fmt.Errorf("relay: %d of %d publishes not confirmed", len(batch)-len(confirmed), len(batch))
	}
	return len(batch), nil
}

// claimAndPublish is Once for every variant but high-water-mark: BEGIN
// and [claimSQL] in one round trip, publish in seq order, then unmark
// what the broker did not confirm and COMMIT in one more.
func (r *Relay) claimAndPublish(ctx context.Context) (int, error) {
	conn, err := r.db.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("relay: begin: %w", err)
	}
	// On an error the connection is still in its transaction, so the
	// pool closes it, which rolls the marks back.
	defer conn.Release()
	var batch []row
	var b pgx.Batch
	b.Queue("BEGIN")
	b.Queue(claimSQL, r.cfg.Batch).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var x row
			var payload string
			var created time.Time
			if err := rows.Scan(&x.seq, &x.ev.ID, &x.ev.Source, &x.ev.Key, &x.ev.Version, &x.ev.Type, &payload, &created, &x.ev.TraceParent); err != nil {
				return err
			}
			x.ev.Payload = []byte(payload)
			r.cfg.Authority.stamp(&x.ev, created)
			batch = append(batch, x)
		}
		return rows.Err()
	})
	if err := conn.SendBatch(ctx, &b).Close(); err != nil {
		return 0, fmt.Errorf("relay: poll: %w", err)
	}
	if len(batch) == 0 {
		return 0, r.noteIdle(ctx, conn, func(ctx context.Context) error {
			_, err := conn.Exec(ctx, "COMMIT")
			return err
		})
	}
	// RETURNING has no order; per-key order needs seq order.
	slices.SortFunc(batch, func(a, b row) int { return cmp.Compare(a.seq, b.seq) })
	confirmed, err := r.publish(ctx, batch)
	if err != nil {
		return 0, err
	}
	b = pgx.Batch{}
	if len(confirmed) < len(batch) {
		var unconfirmed []int64
		for _, x := range batch {
			if !slices.Contains(confirmed, x.seq) {
				unconfirmed = append(unconfirmed, x.seq)
			}
		}
		b.Queue(`UPDATE outbox SET published_at = NULL WHERE seq = ANY($1)`, unconfirmed)
	}
	b.Queue("COMMIT")
	if err := conn.SendBatch(ctx, &b).Close(); err != nil {
		return 0, fmt.Errorf("relay: mark published: %w", err)
	}
	if len(confirmed) < len(batch) {
		return len(confirmed), fmt.Errorf("relay: %d of %d publishes not confirmed", len(batch)-len(confirmed), len(batch))
	}
	return len(batch), nil
}

// publish hits the before-publish failpoint, publishes batch recording
// each publish, hits the after-publish failpoint, and returns the seqs
// the broker confirmed. Its error is only a failure to record.
func (r *Relay) publish(ctx context.Context, batch []row) ([]int64, error) {
	r.fp.Hit(failpoint.RelayBeforePublish, value(batch[0].ev, 0))
	evs := make([]broker.Event, len(batch))
	es := make([]history.Entry, len(batch))
	vs := make([]history.Value, len(batch))
	for i, b := range batch {
		id := [2]string{b.ev.Source, b.ev.ID}
		r.attempts[id]++
		evs[i], vs[i] = r.attempt(b.ev, r.attempts[id])
		es[i] = history.Entry{Type: history.Invoke, F: history.Publish, Value: vs[i]}
	}
	if err := r.rec.RecordAll(es); err != nil {
		return nil, historyError{err}
	}
	pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
	results := r.pub.Publish(pctx, evs)
	cancel()
	var confirmed []int64
	for i, b := range batch {
		v := vs[i]
		t := history.OK
		if err := results[i]; err != nil {
			v.Error = err.Error()
			t = history.Fail
			if errors.Is(err, broker.ErrUnconfirmed) {
				t = history.Info
			}
		} else {
			confirmed = append(confirmed, b.seq)
			delete(r.attempts, [2]string{b.ev.Source, b.ev.ID})
		}
		es[i] = history.Entry{Type: t, F: history.Publish, Value: v}
		if r.cfg.Variant == HighWaterMark {
			r.lastSeen = max(r.lastSeen, b.seq)
		}
	}
	if err := r.rec.RecordAll(es); err != nil {
		return nil, historyError{err}
	}
	r.fp.Hit(failpoint.RelayAfterPublishBeforeMark, value(batch[0].ev, 0))
	return confirmed, nil
}

// noteIdle ends the transaction of a poll that found nothing with commit,
// recording in it first, at most every 100ms, that the relay was idle:
// unless its publisher still holds events it said were published.
func (r *Relay) noteIdle(ctx context.Context, ex interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, commit func(context.Context) error) error {
	due := r.cfg.Name != "" && time.Since(r.lastIdle) >= 100*time.Millisecond && r.held() == 0
	if due {
		if _, err := ex.Exec(ctx, `INSERT INTO relay_idle (process, polled_at) VALUES ($1, now())
			ON CONFLICT (process) DO UPDATE SET polled_at = now()`, r.cfg.Name); err != nil {
			return fmt.Errorf("relay: note idle: %w", err)
		}
	}
	if err := commit(ctx); err != nil {
		return fmt.Errorf("relay: note idle: %w", err)
	}
	if due {
		r.lastIdle = time.Now()
	}
	return nil
}

// held counts the events the relay has recorded published that its
// publisher still holds unsent (broker.Holder): while there are any,
// the relay is not idle.
func (r *Relay) held() int64 {
	if h, ok := r.pub.(broker.Holder); ok {
		return h.Held()
	}
	return 0
}

// attempt returns the event as publish attempt n of ev sends it, and the
// value its publish ops record. ev.TraceParent is the outbox row's (the
// producer's span, "" for none). Every attempt is a span of its own: with
// Traces "propagate" (the default) a child of the row's, in the
// producer's trace, so one event keeps one trace id from the producer to
// the consumer; with "per-attempt", or a row without one, a new trace,
// as a tracing library with no context stored in the outbox starts one
// per publish. Either way a trace id is no event identity. The
// new-id-per-attempt relay also sends a new event id, recorded as
// published_as beside the committed event's. With a signing key the
// attempt is signed as it is sent (the new id included).
func (r *Relay) attempt(ev broker.Event, n int64) (broker.Event, history.Value) {
	v := value(ev, n)
	if r.cfg.Traces == TracesPerAttempt {
		ev.TraceParent = trace.New()
	} else {
		ev.TraceParent = trace.Child(ev.TraceParent)
	}
	v.Trace = ev.TraceParent
	if r.cfg.Variant == NewIDPerAttempt {
		ev.ID = producer.NewEventID()
		v.PublishedAs = ev.ID
	}
	r.cfg.Authority.sign(&ev)
	return ev, v
}

func value(ev broker.Event, attempt int64) history.Value {
	return history.Value{Event: ev.ID, Source: ev.Source, Key: ev.Key, Version: ev.Version, Attempt: attempt}
}
