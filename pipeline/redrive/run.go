package redrive

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/failpoint"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/pipeline/consumer"
	"github.com/deliverycheck/deliverycheck/pipeline/producer"
)

// DeadLetters is one subscription's dead-letter queue as the redriver
// works it (broker.RabbitRedrive): dead letters taken one at a time and
// left unacked, republished to the subscription, acked once the broker
// confirmed the republish. What is taken and not acked goes back at Close.
type DeadLetters interface {
	// Next takes the next ready one; ok is false when none is.
	Next(ctx context.Context) (m *broker.RedriveMessage, ok bool, err error)
	// Republish sends m to the subscription under id, its attempt-th
	// redrive, and returns once the broker confirmed it.
	Republish(ctx context.Context, m *broker.RedriveMessage, id string, attempt int64) error
	// Ack removes m from the dead-letter queue.
	Ack(m *broker.RedriveMessage) error
}

// Outcome lines: the redriver ends by telling the harness how its redrive
// went, with a note (failpoint.Note) starting with one of these, and
// exits 0 either way: a redrive that found nothing to do, or stopped at
// its canary, is over, not crashed. A crash (a failpoint, a kill, a lost
// connection) exits otherwise, and the supervisor starts it again.
const (
	NoteDone   = "redrive done: "
	NoteFailed = "redrive failed: "
)

// Outcome is how a redrive ended: done, with what it did, or failed,
// with why it redrove nothing (or stopped at its canary).
type Outcome struct {
	Done bool
	Text string
}

// Note tells the harness o (see NoteDone).
func (o Outcome) Note() {
	if o.Done {
		failpoint.Note(NoteDone + o.Text)
		return
	}
	failpoint.Note(NoteFailed + o.Text)
}

// canaryWait bounds the wait for the canary's outcome.
const canaryWait = 10 * time.Second

// Redriver redrives one subscription's dead letters, once.
type Redriver struct {
	cfg Config
	dl  DeadLetters
	db  *pgxpool.Pool
	rec *history.Recorder
	fp  *failpoint.Set
	// t is what this redrive did so far, its earlier incarnations'
	// included.
	t tally
	// next is when the next republish may go: one per 1/Rate.
	next time.Time
}

// tally is what a redrive did, over its incarnations.
type tally struct {
	// attempts counts, per event, the redrives sent: a crash between a
	// republish and its ack sends that dead letter again, as attempt 2.
	attempts map[string]int64
	redriven map[string]bool // events with a confirmed redrive
	sent     int             // confirmed redrives
	kept     int             // left in the queue as incompatible, by this incarnation
	canary   string          // the canary's event, once applied
}

// New returns a redriver. prior is this worker's history so far: what
// its earlier incarnations did for this redrive (ops from cfg.Since on)
// counts towards its attempts, its total and its limit.
func New(cfg Config, dl DeadLetters, db *pgxpool.Pool, rec *history.Recorder, fp *failpoint.Set, prior history.History) (*Redriver, error) {
	if cfg.Variant == "" {
		cfg.Variant = Canary
	}
	if _, err := ParseVariant(string(cfg.Variant)); err != nil {
		return nil, err
	}
	if cfg.Subscription == "" {
		return nil, errors.New("redrive: no subscription")
	}
	if cfg.Rate < 1 {
		return nil, fmt.Errorf("redrive: rate %d per second, want at least 1", cfg.Rate)
	}
	r := &Redriver{cfg: cfg, dl: dl, db: db, rec: rec, fp: fp,
		t: tally{attempts: map[string]int64{}, redriven: map[string]bool{}}}
	for _, op := range prior {
		if op.F != history.Redrive || op.Time < cfg.Since {
			continue
		}
		switch op.Type {
		case history.Invoke:
			r.t.attempts[op.Value.Event]++
		case history.OK:
			r.t.sent++
			r.t.redriven[op.Value.Event] = true
		}
	}
	return r, nil
}

// Run redrives until the dead-letter queue has nothing ready (what the
// subscription's consumers dead-letter meanwhile included), or twice as
// many were sent as there were at the step's start (a blind redrive
// before the fix gets them all back), and says how it ended. Its error
// is a crash: the broker or the history failed, and a new incarnation
// goes on.
func (r *Redriver) Run(ctx context.Context) (Outcome, error) {
	limit := 2 * max(r.cfg.DeadLetters, 1)
	canaryDone := r.cfg.Variant == Blind // blind sends no canary
	for r.t.sent < limit {
		m, ok, err := r.dl.Next(ctx)
		if err != nil {
			return Outcome{}, err
		}
		if !ok {
			break
		}
		if r.cfg.Variant != Blind && !r.compatible(m) {
			r.t.kept++ // left unacked: back in the queue when this ends
			continue
		}
		id := m.Event.ID
		if r.cfg.Variant == NewIDs {
			id = producer.NewEventID() // "changes the id to force processing"
		}
		if canaryDone {
			if err := r.redrive(ctx, m, id, ""); err != nil {
				return Outcome{}, err
			}
			continue
		}
		refused, err := r.canary(ctx, m, id)
		if err != nil {
			return Outcome{}, err
		}
		if refused != "" {
			return Outcome{Text: refused}, nil
		}
		canaryDone = true
	}
	if r.t.sent == 0 {
		return Outcome{Text: fmt.Sprintf("no dead letter of %s is compatible with its consumers (schema versions %s): %d kept", r.cfg.Subscription, consumer.JoinVersions(r.schemas()), r.t.kept)}, nil
	}
	return Outcome{Done: true, Text: r.t.evidence(r.cfg)}, nil
}

// evidence says what the redrive did: "redrove 15 of email's dead
// letters (17 at the start) at ≤ 50/s (canary <id> applied), 2 kept in
// the dead-letter queue as incompatible". It counts events; those its
// consumers dead-lettered while it ran are redriven too, so it may
// redrive more than there were at the start.
func (t tally) evidence(cfg Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "redrove %d of %s's dead letters (%d at the start) at ≤ %d/s", len(t.redriven), cfg.Subscription, cfg.DeadLetters, cfg.Rate)
	if t.sent != len(t.redriven) {
		fmt.Fprintf(&b, " in %d republishes", t.sent)
	}
	switch {
	case cfg.Variant == Blind:
		b.WriteString(", blind: no canary, nothing classified")
	case t.canary != "":
		fmt.Fprintf(&b, " (canary %s applied)", t.canary)
	}
	if cfg.Variant == NewIDs {
		b.WriteString(", each under a new id")
	}
	if t.kept > 0 {
		fmt.Fprintf(&b, ", %d kept in the dead-letter queue as incompatible", t.kept)
	}
	return b.String()
}

// schemas are the schema versions the subscription's consumers accept.
func (r *Redriver) schemas() []int64 {
	if len(r.cfg.SchemaVersions) == 0 {
		return consumer.DefaultSchemaVersions
	}
	return r.cfg.SchemaVersions
}

// compatible classifies a dead letter: its payload is the event schema,
// in a version the subscription's consumers now accept. Poison (a
// payload no build accepts) and a version no fix covers stay in the
// dead-letter queue.
func (r *Redriver) compatible(m *broker.RedriveMessage) bool {
	p, err := consumer.ParsePayload(m.Event.Payload)
	return err == nil && slices.Contains(r.schemas(), p.SchemaVersion())
}

// canary redrives m alone and waits for the subscription's consumers to
// take it: applied (an effect or an inbox mark of it) or refused again
// (one more dead-letter row of it). refused says why the redrive must
// stop, "" when it may go on.
func (r *Redriver) canary(ctx context.Context, m *broker.RedriveMessage, id string) (refused string, err error) {
	before, err := r.deadLetterRows(ctx, id)
	if err != nil {
		return "", err
	}
	if err := r.redrive(ctx, m, id, history.DetailCanary); err != nil {
		return "", err
	}
	wctx, cancel := context.WithTimeout(ctx, canaryWait)
	defer cancel()
	for {
		taken, err := r.taken(wctx, id)
		if err == nil && taken {
			r.t.canary = m.Event.ID
			return "", nil
		}
		rows, derr := r.deadLetterRows(wctx, id)
		if err == nil && derr == nil && rows > before {
			return fmt.Sprintf("canary %s was dead-lettered again: the fix is not deployed", m.Event.ID), nil
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			return fmt.Sprintf("canary %s neither applied nor dead-lettered again within %s", m.Event.ID, canaryWait), nil
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// redrive republishes m under id at the rate and acks it once confirmed,
// recording the redrive op around the republish: invoke, then ok once
// confirmed, fail when refused, info when the answer was lost (either
// ends this incarnation: the dead letter goes back, to be sent again).
func (r *Redriver) redrive(ctx context.Context, m *broker.RedriveMessage, id, detail string) error {
	if err := r.pace(ctx); err != nil {
		return err
	}
	r.t.attempts[m.Event.ID]++
	v := history.Value{
		Event: m.Event.ID, Source: m.Event.Source, Key: m.Event.Key, Version: m.Event.Version,
		Consumer: r.cfg.Subscription, Attempt: r.t.attempts[m.Event.ID], Rate: r.cfg.Rate, Detail: detail,
	}
	if id != m.Event.ID {
		v.PublishedAs = id
	}
	if _, err := r.rec.Record(history.Invoke, history.Redrive, v); err != nil {
		return err
	}
	perr := r.dl.Republish(ctx, m, id, v.Attempt)
	if perr != nil {
		v.Error = perr.Error()
		typ := history.Fail
		if errors.Is(perr, broker.ErrUnconfirmed) {
			typ = history.Info
		}
		_, _ = r.rec.Record(typ, history.Redrive, v)
		return fmt.Errorf("redrive %s: %w", m.Event.ID, perr)
	}
	if _, err := r.rec.Record(history.OK, history.Redrive, v); err != nil {
		return err
	}
	r.t.sent++
	r.t.redriven[m.Event.ID] = true
	r.fp.Hit(failpoint.RedriveAfterPublishBeforeAck, v)
	return r.dl.Ack(m)
}

// pace waits until the next republish may go: at most one per 1/Rate,
// burst 1.
func (r *Redriver) pace(ctx context.Context) error {
	now := time.Now()
	if wait := r.next.Sub(now); wait > 0 {
		tm := time.NewTimer(wait)
		defer tm.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tm.C:
		}
		now = r.next
	}
	r.next = now.Add(time.Second / time.Duration(r.cfg.Rate))
	return nil
}

// taken reports whether the subscription's consumers took event id: an
// effect row or an inbox mark of it (the built-in tables, or the team's
// effects query).
func (r *Redriver) taken(ctx context.Context, id string) (bool, error) {
	q := `SELECT EXISTS (SELECT 1 FROM effects WHERE consumer = $1 AND event_id = $2)
		OR EXISTS (SELECT 1 FROM inbox WHERE consumer = $1 AND event_id = $2)`
	if r.cfg.EffectsQuery != "" {
		q = `SELECT EXISTS (SELECT 1 FROM (` + r.cfg.EffectsQuery + `) AS t WHERE consumer::text = $1 AND event_id::text = $2)`
	}
	var ok bool
	if err := r.db.QueryRow(ctx, q, r.cfg.Subscription, id).Scan(&ok); err != nil {
		return false, fmt.Errorf("redrive: canary: %w", err)
	}
	return ok, nil
}

// deadLetterRows counts the dead-letter rows of event id in the
// subscription (the built-in table, or the team's dead-letters query).
func (r *Redriver) deadLetterRows(ctx context.Context, id string) (int64, error) {
	q := `SELECT count(*) FROM dead_letters WHERE consumer = $1 AND event_id = $2`
	if r.cfg.DeadLettersQuery != "" {
		q = `SELECT count(*) FROM (` + r.cfg.DeadLettersQuery + `) AS t WHERE consumer::text = $1 AND event_id::text = $2`
	}
	var n int64
	if err := r.db.QueryRow(ctx, q, r.cfg.Subscription, id).Scan(&n); err != nil {
		return 0, fmt.Errorf("redrive: canary: %w", err)
	}
	return n, nil
}
