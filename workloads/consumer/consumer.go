// Package consumer is the pipeline's read side: it receives an event,
// validates it, and in one transaction records it in the inbox and, only
// if it is new, applies its effect; then it acks. Several independent
// subscriptions each run their own consumers with their own inbox scope.
//
// Transient errors (the database is down) are retried in-process with
// exponential backoff and full jitter, so they never count as delivery
// attempts; permanent ones (a poison event) are given back to the broker
// and dead-lettered after MaxAttempts, with the reason.
package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliverycheck/deliverycheck/failpoint"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/workloads/broker"
	"github.com/deliverycheck/deliverycheck/workloads/producer"
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
)

// Variants lists every consumer variant.
func Variants() []Variant { return []Variant{Inbox, AckFirst, NoInbox, CheckThenAct, NoVersionGuard} }

// ParseVariant checks a variant name.
func ParseVariant(s string) (Variant, error) {
	if slices.Contains(Variants(), Variant(s)) {
		return Variant(s), nil
	}
	return "", fmt.Errorf("consumer: unknown variant %q (valid: inbox, ack-first, no-inbox, check-then-act, no-version-guard)", s)
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
}

// Consumer handles one subscription's deliveries for one process.
type Consumer struct {
	cfg Config
	db  *pgxpool.Pool
	sub broker.Subscriber
	rec *history.Recorder
	fp  *failpoint.Set

	mu  sync.Mutex
	rng *rand.Rand
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
	return &Consumer{cfg: cfg, db: db, sub: sub, rec: rec, fp: fp, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))}, nil
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
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (c *Consumer) loop(ctx context.Context) error {
	for ctx.Err() == nil {
		d, err := c.sub.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			c.sleep(ctx, 0)
			continue
		}
		if err := c.Handle(ctx, d); err != nil {
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
		Event: d.ID, Source: d.Source, Key: d.Key, Version: d.Version,
		Partition: d.Partition, Offset: d.Offset, Tag: int64(d.Tag), Attempt: d.Attempt,
		Consumer: c.cfg.Subscription,
	}
}

// Handle processes one delivery. Its error is only a failure to record.
func (c *Consumer) Handle(ctx context.Context, d *broker.Delivery) error {
	v := c.value(d)
	if err := c.record(history.OK, history.Deliver, v); err != nil {
		return err
	}
	if reason := c.validate(d); reason != "" {
		return c.reject(ctx, d, v, reason)
	}
	if c.cfg.Variant == AckFirst {
		if err := c.ack(ctx, d, v); err != nil {
			return err
		}
		c.fp.Hit(failpoint.ConsumerAfterAckBeforeCommit, v)
	}
	// Transient failures retry in-process: they are not the event's fault
	// and must not count towards its dead-letter limit.
	for attempt := 0; ; attempt++ {
		done, err := c.apply(ctx, d, v)
		if err != nil {
			var herr historyError
			if errors.As(err, &herr) || ctx.Err() != nil {
				return herr.error
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

func (c *Consumer) ack(ctx context.Context, d *broker.Delivery, v history.Value) error {
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
	switch outcome {
	case applied:
		err = c.record(history.OK, history.Apply, v)
	case duplicate:
		v.Reason = "duplicate: already in the inbox"
		err = c.record(history.Fail, history.Apply, v)
	case stale:
		v.Reason = "stale: a newer version is already applied"
		if err = c.record(history.Fail, history.Apply, v); err == nil {
			err = c.record(history.OK, history.SkipStale, v)
		}
	}
	return err == nil, err
}

type outcome int

const (
	applied outcome = iota
	duplicate
	stale
)

var errCommitUnknown = errors.New("commit outcome unknown")

// tx is the consumer's one local transaction.
func (c *Consumer) tx(ctx context.Context, d *broker.Delivery, v history.Value) (outcome, error) {
	tx, err := c.db.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.Background())
	sub := c.cfg.Subscription
	switch c.cfg.Variant {
	case Inbox, AckFirst, NoVersionGuard:
		tag, err := tx.Exec(ctx, `INSERT INTO inbox (consumer, source, event_id) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, sub, d.Source, d.ID)
		if err != nil {
			return 0, fmt.Errorf("inbox: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return duplicate, c.commit(ctx, tx)
		}
	case CheckThenAct:
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
	case NoInbox:
	}
	// The guard only orders: it skips an event older than what is applied.
	// An equal version (a redelivery of the applied event) passes, so
	// deduplication is the inbox's job alone and each known-bad variant
	// lacks exactly one mechanism.
	if c.cfg.Variant != NoVersionGuard {
		// Make sure the projection row exists, then lock it, so two
		// workers handling one aggregate serialise here: the second
		// waits for the first to commit and then sees its version.
		if _, err := tx.Exec(ctx, `INSERT INTO projection (consumer, aggregateid, version) VALUES ($1, $2, 0) ON CONFLICT DO NOTHING`, sub, d.Key); err != nil {
			return 0, fmt.Errorf("projection: %w", err)
		}
		var cur int64
		err := tx.QueryRow(ctx, `SELECT version FROM projection WHERE consumer = $1 AND aggregateid = $2 FOR UPDATE`, sub, d.Key).Scan(&cur)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return 0, fmt.Errorf("projection: %w", err)
		}
		if cur > d.Version {
			return stale, c.commit(ctx, tx)
		}
	}
	if c.cfg.Work > 0 {
		t := time.NewTimer(c.cfg.Work)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		case <-t.C:
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO effects (consumer, source, event_id, aggregateid, version) VALUES ($1, $2, $3, $4, $5)`, sub, d.Source, d.ID, d.Key, d.Version); err != nil {
		return 0, fmt.Errorf("effect: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO projection (consumer, aggregateid, version) VALUES ($1, $2, $3)
		ON CONFLICT (consumer, aggregateid) DO UPDATE SET version = EXCLUDED.version`, sub, d.Key, d.Version); err != nil {
		return 0, fmt.Errorf("projection: %w", err)
	}
	c.fp.Hit(failpoint.ConsumerAfterEffectBeforeCommit, v)
	return applied, c.commit(ctx, tx)
}

func (c *Consumer) commit(ctx context.Context, tx pgx.Tx) error {
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w: %w", errCommitUnknown, err)
	}
	return nil
}

// validate returns why d can never be applied, or "" if it can. It must
// not panic on anything a broker hands it.
func (c *Consumer) validate(d *broker.Delivery) string {
	switch {
	case d.ID == "":
		return "missing event id"
	case d.Source == "":
		return "missing source"
	case len(c.cfg.Sources) > 0 && !slices.Contains(c.cfg.Sources, d.Source):
		return "unknown source " + strconv.Quote(d.Source)
	case d.Key == "" || !utf8.ValidString(d.Key):
		return "missing or malformed aggregate id"
	case d.Version <= 0:
		return "missing or malformed version"
	case d.Type != producer.EventType:
		return "unknown type " + strconv.QuoteToASCII(truncate(d.Type, 64))
	case len(d.Payload) > c.cfg.MaxPayload:
		return "payload too large: " + strconv.Itoa(len(d.Payload)) + " bytes"
	}
	var p struct {
		Order   string `json:"order"`
		Version int64  `json:"version"`
		Status  string `json:"status"`
	}
	if err := json.Unmarshal(d.Payload, &p); err != nil {
		return "payload does not match the schema: " + truncate(err.Error(), 120)
	}
	if p.Order != d.Key || p.Version != d.Version || p.Status == "" {
		return "payload disagrees with its headers"
	}
	return ""
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// reject handles a permanently invalid delivery: give it back until it has
// had MaxAttempts, then dead-letter it with the reason.
func (c *Consumer) reject(ctx context.Context, d *broker.Delivery, v history.Value, reason string) error {
	v.Reason = reason
	if d.Attempt < c.cfg.MaxAttempts && d.ID != "" {
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
			c.cfg.Subscription, d.Source, d.ID, d.Key, d.Version, reason, d.Attempt, metadata(d))
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

// metadata keeps the original delivery facts with a dead letter.
func metadata(d *broker.Delivery) string {
	b, _ := json.Marshal(map[string]any{
		"partition": d.Partition, "offset": d.Offset, "tag": d.Tag,
		"attempt": d.Attempt, "headers": d.Headers, "subscription": d.Subscription,
	})
	return string(b)
}

// sleep waits a full-jitter exponential backoff for the given retry.
func (c *Consumer) sleep(ctx context.Context, attempt int) {
	ceil := c.cfg.BackoffBase << min(attempt, 16)
	if ceil > c.cfg.BackoffCap || ceil <= 0 {
		ceil = c.cfg.BackoffCap
	}
	c.mu.Lock()
	d := time.Duration(c.rng.Int64N(int64(ceil) + 1))
	c.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
