package intruder

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/pipeline/hostile"
	"github.com/deliverycheck/deliverycheck/pipeline/producer"
	"github.com/deliverycheck/deliverycheck/signing"
)

// Process is the intruder's name in the history.
const Process = "intruder"

// The forged events' fixed parts (docs/security.md, "The intruder").
const (
	// ForeignTenant is the tenant the tenant kind's event claims, and the
	// prefix of its aggregate: another customer's data.
	ForeignTenant = "globex"
	// ForbiddenType is the type kind's event type: one the consumer
	// understands, which no workload source may emit.
	ForbiddenType = "AdminGranted"
	// VersionAheadVersion is the version-ahead kind's version.
	VersionAheadVersion = 1000000
	// ReplayAge is how long before the run's start the replayed event was
	// made: older than any freshness window a run can have.
	ReplayAge = time.Hour
	// DefaultPerKind is how many messages of each kind are sent.
	DefaultPerKind = 2
)

// Config is what the intruder sends and as whom. The harness fills it
// from the scenario's security section and the run (the coordinator's
// wiring); the intruder never holds the run's signing key.
type Config struct {
	// Permissions are its broker user's rights on the events exchange or
	// topic: Publish, or None (the broker refuses every message).
	Permissions Permissions
	// Kinds are the kinds sent, in this order; empty: the forged kinds
	// (Kinds()), without the hostile ones.
	Kinds []Kind
	// PerKind is how many messages of each kind, overriding
	// DefaultPerKind.
	PerKind int
	// Tenant is the run's tenant ("" for none): what every kind but
	// tenant claims.
	Tenant string
	// Source is a workload source the events claim to come from, and
	// Key a workload aggregate.
	Source, Key string
	// RunID makes the event ids unique to the run (the pipeline's name).
	RunID string
	// Replays are the replay kind's events, one per message in order:
	// [ReplayEvents] signed by the harness with the run's key
	// (signing.Sign). A replay without one is sent unsigned.
	Replays []broker.Event
}

// WithDefaults fills in the defaults.
func (c Config) WithDefaults() Config {
	if c.Permissions == "" {
		c.Permissions = Publish
	}
	if len(c.Kinds) == 0 {
		c.Kinds = Kinds()
	}
	if c.PerKind <= 0 {
		c.PerKind = DefaultPerKind
	}
	if c.Source == "" {
		c.Source = producer.DefaultSource
	}
	if c.Key == "" {
		c.Key = "order-1"
	}
	return c
}

// EventID is the id of the n-th (from 1) message of kind k.
func (c Config) EventID(k Kind, n int) string {
	return "intruder-" + string(k) + "-" + strconv.Itoa(n) + "-" + c.RunID
}

// Forge crafts the n-th (from 1) event of kind k, made at now: a
// well-formed OrderConfirmed of version 1 for c.Key from c.Source, in
// c.Tenant, made now, unsigned, but for what makes it that kind. A replay
// is c.Replays[n-1] when the harness gave it, else the event made
// ReplayAge before now, unsigned (see [ReplayEvents]).
func Forge(c Config, k Kind, n int, now time.Time) broker.Event {
	c = c.WithDefaults()
	e := broker.Event{
		ID: c.EventID(k, n), Source: c.Source, Key: c.Key, Version: 1,
		Type: producer.EventType, Tenant: c.Tenant, Time: now.UTC().Format(time.RFC3339Nano),
	}
	switch k {
	case Type:
		e.Type = ForbiddenType
	case Tenant:
		e.Tenant, e.Key = ForeignTenant, ForeignTenant+"/"+c.Key
	case Replay:
		if n-1 < len(c.Replays) {
			return c.Replays[n-1]
		}
		e.Time = now.Add(-ReplayAge).UTC().Format(time.RFC3339Nano)
	case VersionAhead:
		e.Version = VersionAheadVersion
	}
	e.Payload = producer.Payload(e.Key, e.Version, false)
	if k == SignatureWrong {
		// Over every other field, as the relay signs, but the key is
		// the intruder's invention.
		e.Signature = signing.Sign(madeUpKey(), e)
	}
	return e
}

// Craft makes the n-th (from 1) message of kind k, made at now: Forge's
// event for a forged kind; for a hostile kind, cr's message of that kind
// (hostile.Crafter.Craft) made from a well-formed, unsigned OrderConfirmed
// of version 1 for c.Key from c.Source in c.Tenant, with the id
// hostile-<kind>-<n>-<c.RunID>.
func Craft(c Config, cr *hostile.Crafter, k Kind, n int, now time.Time) (broker.Event, error) {
	if !k.Hostile() {
		return Forge(c, k, n, now), nil
	}
	base := Forge(c, SignatureMissing, n, now)
	base.ID = c.RunID
	e, err := cr.Craft(hostile.Kind(k), n, base)
	if err != nil {
		return broker.Event{}, fmt.Errorf("intruder: %w", err)
	}
	return e, nil
}

// ReplayEvents are the replay kind's events as c will send them, made
// ReplayAge before the run's start, unsigned: the harness signs each
// with the run's key (as the producer would have then) and puts them in
// c.Replays.
func ReplayEvents(c Config, runStart time.Time) []broker.Event {
	c = c.WithDefaults()
	c.Replays = nil
	out := make([]broker.Event, c.PerKind)
	for i := range out {
		out[i] = Forge(c, Replay, i+1, runStart)
	}
	return out
}

// madeUpKey is a signing key of the intruder's own invention.
func madeUpKey() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return k
}

// Outcome is what the broker said to one message.
type Outcome string

const (
	Accepted Outcome = "accepted" // ok: the broker confirmed it
	Refused  Outcome = "refused"  // fail: the broker refused it (broker.ErrRefused)
	NotSent  Outcome = "not-sent" // fail: it never reached the broker (no connection)
	Unknown  Outcome = "unknown"  // info: the answer was lost
)

// Message is one message the intruder sent.
type Message struct {
	Kind    Kind
	Event   broker.Event
	Outcome Outcome
	Err     error // the broker's refusal, or why the answer is unknown
}

// Result is what one intrusion did.
type Result struct {
	Messages []Message
}

// Count is how many messages had outcome o.
func (r Result) Count(o Outcome) int {
	n := 0
	for _, m := range r.Messages {
		if m.Outcome == o {
			n++
		}
	}
	return n
}

// Accepted are the events the broker accepted, which every subscription
// must dead-letter or apply.
func (r Result) Accepted() []broker.Event {
	var out []broker.Event
	for _, m := range r.Messages {
		if m.Outcome == Accepted {
			out = append(out, m.Event)
		}
	}
	return out
}

// Evidence is the fault's evidence: "broker accepted 12 of 12 intruder
// messages" or "broker refused 12 of 12 intruder messages: <first
// error>" (and the unknown ones, if any); an error when the broker
// neither accepted nor refused any message (the fault did not bite).
func (r Result) Evidence() (string, error) {
	total := len(r.Messages)
	acc, ref, unk := r.Count(Accepted), r.Count(Refused), r.Count(Unknown)
	var parts []string
	if acc > 0 {
		parts = append(parts, fmt.Sprintf("broker accepted %d of %d intruder messages", acc, total))
	}
	if ref > 0 {
		parts = append(parts, fmt.Sprintf("broker refused %d of %d intruder messages: %v", ref, total, r.first(Refused)))
	}
	if ns := r.Count(NotSent); ns > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d intruder messages not sent: %v", ns, total, r.first(NotSent)))
	}
	if unk > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d intruder messages unanswered: %v", unk, total, r.first(Unknown)))
	}
	s := strings.Join(parts, "; ")
	if acc+ref == 0 {
		if total == 0 {
			return "", errors.New("the intruder sent nothing")
		}
		return "", fmt.Errorf("the broker neither accepted nor refused any intruder message: %s", s)
	}
	return s, nil
}

// first is the error of the first message with outcome o.
func (r Result) first(o Outcome) error {
	for _, m := range r.Messages {
		if m.Outcome == o {
			return m.Err
		}
	}
	return nil
}

// publishTimeout bounds the wait for the broker's answer to one message.
const publishTimeout = 10 * time.Second

// Run sends c.PerKind messages of each of c's kinds through pub (a
// publisher connected with the intruder's own credentials), one at a
// time, recording each in rec (process "intruder"): an intrude invoke,
// then ok when the broker accepted it, fail with the broker's refusal,
// or info when the answer was lost. The error is only for the harness's
// own failures (the history could not be written, ctx ended); the
// broker's answers are in the result.
func Run(ctx context.Context, c Config, pub broker.Publisher, rec *history.Recorder) (Result, error) {
	c = c.WithDefaults()
	var res Result
	var cr hostile.Crafter // compresses the bomb once, if a kind needs it
	for _, k := range c.Kinds {
		for n := 1; n <= c.PerKind; n++ {
			if err := ctx.Err(); err != nil {
				return res, fmt.Errorf("intruder: %w", err)
			}
			e, err := Craft(c, &cr, k, n, time.Now())
			if err != nil {
				return res, err
			}
			m, err := send(ctx, pub, rec, k, e)
			if err != nil {
				return res, err
			}
			res.Messages = append(res.Messages, m)
		}
	}
	return res, nil
}

// send publishes one forged event and records it, its identity as a
// consumer records it (broker.SafeText: a hostile id may hold invalid
// UTF-8).
func send(ctx context.Context, pub broker.Publisher, rec *history.Recorder, k Kind, e broker.Event) (Message, error) {
	v := history.Value{Event: broker.SafeText(e.ID), Source: broker.SafeText(e.Source), Key: broker.SafeText(e.Key), Version: e.Version, Detail: string(k)}
	if _, err := rec.Record(history.Invoke, history.Intrude, v); err != nil {
		return Message{}, fmt.Errorf("intruder: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, publishTimeout)
	err := pub.Publish(pctx, []broker.Event{e})[0]
	cancel()
	m := Message{Kind: k, Event: e, Err: err}
	t := history.OK
	switch {
	case err == nil:
		m.Outcome = Accepted
	case errors.Is(err, broker.ErrUnconfirmed):
		m.Outcome, t = Unknown, history.Info
	case errors.Is(err, broker.ErrRefused):
		m.Outcome, t = Refused, history.Fail
	default:
		m.Outcome, t = NotSent, history.Fail
	}
	if err != nil {
		v.Error = err.Error()
	}
	if _, err := rec.Record(t, history.Intrude, v); err != nil {
		return m, fmt.Errorf("intruder: %w", err)
	}
	return m, nil
}
