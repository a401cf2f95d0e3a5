package processor

// The processor's database effect (issue 23, the seeds' boundary): an
// effect the processor writes to PostgreSQL inside its loop, for each
// input, before its Kafka transaction ends. Kafka's transaction covers
// the output topics and the input offsets, not the database: an input
// read again (its transaction aborted on purpose, or a crash left it
// open and the restart fenced it) has its effect written again, unless
// the database itself turns the second one away. The effect goes to the
// consumers' tables (pipeline/schema: effects, inbox) under its own
// consumer name, so the checker judges it like any subscription's and
// sets it beside the topics' delivery ("exactly once on Kafka's topics;
// at least once on the database").

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/internal/backoff"
)

// Effect is what the processor writes to the database per input.
type Effect string

const (
	// NoEffect writes nothing to the database: the stage is Kafka's
	// topics alone.
	NoEffect Effect = "none"
	// PlainEffect is known-bad for the database: one effects row per
	// input, in a database transaction per batch committed before the
	// Kafka transaction ends. Every input read again (after an abort on
	// purpose, a failed produce, or a crash with the transaction open)
	// writes its effect again: exactly once on the topics, at least once
	// on the database.
	PlainEffect Effect = "plain"
	// InboxEffect is the fix: in the same database transaction, an inbox
	// mark keyed by the input's event (consumer, source, event id;
	// INSERT ... ON CONFLICT DO NOTHING) and the effects row only if the
	// mark was new. An input read again finds its mark and writes
	// nothing. Keyed by the event, not the input offset, an event the
	// relay published twice is one effect too, as it is for the
	// consumers.
	InboxEffect Effect = "inbox"
)

// Effects lists the database effects, none first, then the known-bad
// one, then its fix.
func Effects() []Effect { return []Effect{NoEffect, PlainEffect, InboxEffect} }

// EffectNames lists the effects for an error message.
func EffectNames() string {
	names := make([]string, 0, len(Effects()))
	for _, e := range Effects() {
		names = append(names, string(e))
	}
	return strings.Join(names, ", ")
}

// Writes reports whether e writes to the database.
func (e Effect) Writes() bool { return e != "" && e != NoEffect }

// checkEffect checks the effect settings of c.
func (c *Config) checkEffect() error {
	if c.Effect == "" {
		c.Effect = NoEffect
	}
	if !slices.Contains(Effects(), c.Effect) {
		return fmt.Errorf("processor: unknown effect %q (valid: %s)", c.Effect, EffectNames())
	}
	if c.Effect.Writes() && c.Subscription == "" {
		return fmt.Errorf("processor: effect %s needs a subscription to name its rows", c.Effect)
	}
	return nil
}

// SetDatabase gives the processor the database its Config.Effect writes
// to. Run refuses an effect without one.
func (p *Processor) SetDatabase(db *pgxpool.Pool) { p.db = db }

// effectSQL is the effect of one input ($1 the subscription, $2 its
// source, $3 its event id, $4 its aggregate, $5 its version); it returns
// how many effects rows it wrote.
func effectSQL(e Effect) string {
	if e == InboxEffect {
		return `WITH i AS (INSERT INTO inbox (consumer, source, event_id) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING RETURNING 1),
e AS (INSERT INTO effects (consumer, source, event_id, aggregateid, version) SELECT $1, $2, $3, $4, $5 FROM i RETURNING 1)
SELECT count(*) FROM e`
	}
	return `WITH e AS (INSERT INTO effects (consumer, source, event_id, aggregateid, version) VALUES ($1, $2, $3, $4, $5) RETURNING 1)
SELECT count(*) FROM e`
}

// errCommitUnknown marks a database commit whose outcome is unknown.
var errCommitUnknown = errors.New("commit outcome unknown")

// effect writes the database effect of the inputs ins of transaction tv,
// if the processor writes one, recorded as the consumers record theirs:
// an apply invoke per input, then ok (its effects row written), fail
// (reason duplicate: the inbox already had its mark; or the database
// transaction failed) or info (its commit's outcome is unknown).
// effectErr says the effects are not known to be written, so the Kafka
// transaction must not commit; err is a failure to record.
func (p *Processor) effect(ctx context.Context, tv history.Value, ins []*kgo.Record) (effectErr, err error) {
	if !p.cfg.Effect.Writes() {
		return nil, nil
	}
	vs := make([]history.Value, len(ins))
	es := make([]history.Entry, len(ins))
	for i, in := range ins {
		vs[i] = p.applyValue(tv, in)
		es[i] = history.Entry{Type: history.Invoke, F: history.Apply, Value: vs[i]}
	}
	if err := p.rec.RecordAll(es); err != nil {
		return nil, historyError{err}
	}
	written, effectErr := p.writeEffects(ctx, vs)
	for i, v := range vs {
		es[i] = history.Entry{Type: history.OK, F: history.Apply, Value: v}
		switch {
		case effectErr != nil:
			es[i].Type, es[i].Value.Error = history.Fail, effectErr.Error()
			if errors.Is(effectErr, errCommitUnknown) {
				es[i].Type = history.Info
			}
		case !written[i]:
			es[i].Type, es[i].Value.Reason = history.Fail, "duplicate: already in the inbox"
		}
	}
	if err := p.rec.RecordAll(es); err != nil {
		return effectErr, historyError{err}
	}
	return effectErr, nil
}

// applyValue is the value of the apply ops of input in: its event, as
// its headers name it, and its position, in the effect's subscription.
// The event's identity is untrusted header bytes, kept as
// [broker.SafeText] makes them: the effect's rows store it in text
// columns, which refuse invalid UTF-8 and NUL, and the consumers record
// it the same way.
func (p *Processor) applyValue(tv history.Value, in *kgo.Record) history.Value {
	hs := make(map[string]string, len(in.Headers))
	for _, h := range in.Headers {
		hs[h.Key] = string(h.Value)
	}
	e := broker.EventFromHeaders(hs, nil)
	return history.Value{
		Txn: tv.Txn, Event: broker.SafeText(e.ID), Source: broker.SafeText(e.Source), Key: broker.SafeText(e.Key), Version: e.Version,
		Partition: int64(in.Partition), Offset: in.Offset, Consumer: p.cfg.Subscription,
	}
}

// writeEffects writes the effects of vs in one database transaction, a
// statement each in one round trip, and says which wrote an effects row.
func (p *Processor) writeEffects(ctx context.Context, vs []history.Value) ([]bool, error) {
	tx, err := p.db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("effect: begin: %w", err)
	}
	defer tx.Rollback(context.Background())
	sql := effectSQL(p.cfg.Effect)
	counts := make([]int64, len(vs))
	var b pgx.Batch
	for i, v := range vs {
		b.Queue(sql, p.cfg.Subscription, v.Source, v.Event, v.Key, v.Version).QueryRow(func(row pgx.Row) error {
			return row.Scan(&counts[i])
		})
	}
	if err := tx.SendBatch(ctx, &b).Close(); err != nil {
		return nil, fmt.Errorf("effect: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("effect: commit: %w: %w", errCommitUnknown, err)
	}
	written := make([]bool, len(vs))
	for i, n := range counts {
		written[i] = n > 0
	}
	return written, nil
}

// effectBackoff waits before the next poll after a transaction aborted
// because its effect failed (the database down fails every poll at
// once), longer after each failure in a row; a good effect resets it.
func (p *Processor) effectBackoff(ctx context.Context, effectErr error) {
	if effectErr == nil {
		p.effectFailures = 0
		return
	}
	p.log.Warn("processor effect failed, its transaction aborted", "err", effectErr)
	_ = backoff.Policy{Base: 50 * time.Millisecond, Cap: time.Second}.Wait(ctx, p.effectFailures)
	p.effectFailures++
}
