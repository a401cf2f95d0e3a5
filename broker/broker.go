// Package broker is the pipeline's client of a message broker: adapters
// over Kafka (franz-go) and RabbitMQ (amqp091-go) that set up the topology,
// publish events and take deliveries.
//
// A [Publisher] is what the relay (and the dual-write producer) sends
// events with, a [Subscriber] what a consumer takes deliveries from. The
// kafka_*.go and rabbitmq_*.go files implement both, split by role:
// topology, publisher, subscriber, and offset commits (Kafka) or acks
// (RabbitMQ).
//
// The interfaces carry exactly the facts the checker needs: whether the
// broker confirmed a publish (or whether that is unknown), and for each
// delivery its partition/offset or delivery tag and attempt number.
package broker

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Event is what travels from outbox to inbox. ID and Source together are
// its identity (as in CloudEvents); Key is the aggregate id, which is the
// Kafka record key and the ordering unit; Version is the aggregate version
// the event carries.
type Event struct {
	ID      string
	Source  string
	Key     string
	Version int64
	Type    string
	Payload []byte
	// TraceParent is the W3C trace context of this publish, sent as the
	// traceparent header when set. It says which trace the message
	// belongs to, not which event it is: a relay starts a new span (and,
	// with no stored context, a new trace) for every publish attempt, so
	// a republished event carries a different one.
	TraceParent string
	// Tenant, Time and Signature are the event's authority: whose data it
	// is, when its producer made it (RFC 3339, as carried, so a signature
	// over it survives the trip byte for byte) and the producer's HMAC
	// over the canonical event (package signing). Sent as headers when
	// set; a consumer that checks them can tell an authorized producer's
	// event from a well-formed forgery (docs/security.md).
	Tenant    string
	Time      string
	Signature string
	// Extra are headers sent as they are, after the event's own (a name
	// the event already sets is sent again and wins, as the last of a
	// repeated Kafka header does). Only hostile messages set it
	// (package pipeline/hostile): nothing in it is checked or encoded, so
	// a value may hold any bytes, invalid UTF-8 included.
	Extra map[string]string
}

// Header names carried with every message, so a consumer (ours or not)
// can read the identity without parsing the payload.
const (
	HeaderEventID = "event-id"
	HeaderSource  = "source"
	HeaderKey     = "aggregate-id"
	HeaderVersion = "version"
	HeaderType    = "type"
	// HeaderTraceParent is W3C Trace Context's header.
	HeaderTraceParent = "traceparent"
	// HeaderTenant, HeaderTime and HeaderSignature carry the event's
	// authority (see [Event]).
	HeaderTenant    = "tenant"
	HeaderTime      = "time"
	HeaderSignature = "signature"
	HeaderReason    = "dlq-reason"
	HeaderAttempt   = "dlq-attempts"
)

// Headers a redrive adds to a republished dead letter (issue 25).
const (
	// HeaderRedriveSubscription names, on Kafka, the one subscription a
	// redriven record is for (the events topic carries it to every
	// group; the others settle it without handing it out).
	HeaderRedriveSubscription = "redrive-subscription"
	// HeaderRedriveAttempt is how many times the redriver sent this dead
	// letter, from 1.
	HeaderRedriveAttempt = "redrive-attempt"
)

// Headers renders e's identity as string headers.
func (e Event) Headers() map[string]string {
	h := map[string]string{
		HeaderEventID: e.ID,
		HeaderSource:  e.Source,
		HeaderKey:     e.Key,
		HeaderVersion: strconv.FormatInt(e.Version, 10),
		HeaderType:    e.Type,
	}
	setIf(h, HeaderTraceParent, e.TraceParent)
	setIf(h, HeaderTenant, e.Tenant)
	setIf(h, HeaderTime, e.Time)
	setIf(h, HeaderSignature, e.Signature)
	return h
}

// ExtraNames returns the names of e's Extra headers, sorted, so equal
// events give equal messages.
func (e Event) ExtraNames() []string {
	names := make([]string, 0, len(e.Extra))
	for k := range e.Extra {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// setIf sets an optional header: an absent one is not sent empty.
func setIf(h map[string]string, name, v string) {
	if v != "" {
		h[name] = v
	}
}

// EventFromHeaders rebuilds an Event from headers and payload. Missing or
// malformed headers are left zero; validating them is the consumer's job
// (a hostile message must never crash it).
func EventFromHeaders(h map[string]string, payload []byte) Event {
	v, _ := strconv.ParseInt(h[HeaderVersion], 10, 64)
	return Event{
		ID: h[HeaderEventID], Source: h[HeaderSource], Key: h[HeaderKey],
		Version: v, Type: h[HeaderType], Payload: payload,
		TraceParent: h[HeaderTraceParent],
		Tenant:      h[HeaderTenant], Time: h[HeaderTime], Signature: h[HeaderSignature],
	}
}

// SafeText is s as a text column or a history value can hold it: s itself
// if it is valid UTF-8 without NUL bytes (which PostgreSQL refuses in
// text), else s quoted with strconv.QuoteToASCII. A message's identity is
// untrusted input: its event id may hold any bytes, and whoever stores or
// records it (the consumer's dead letter, the harness's reading of a
// dead-letter queue) renders it this one way, so the records agree and a
// hostile id never makes an insert fail forever.
func SafeText(s string) string {
	if utf8.ValidString(s) && !strings.ContainsRune(s, 0) {
		return s
	}
	return strconv.QuoteToASCII(s)
}

// ErrUnconfirmed means the broker's answer to a publish was lost (a
// connection dropped, a confirm came back false after a reconnect, a
// timeout): the event may or may not be in the broker. The relay must treat
// it as not published and try again, which is where duplicates come from.
var ErrUnconfirmed = errors.New("broker: publish outcome unknown")

// ErrUnroutable means the broker returned the message because no queue was
// bound for it (RabbitMQ mandatory publish): definitely not delivered.
var ErrUnroutable = errors.New("broker: message unroutable")

// ErrRefused means the broker refused the publish because the client may
// not write there (RabbitMQ 403 ACCESS_REFUSED; on Kafka the refusal is
// TOPIC_AUTHORIZATION_FAILED, a definite kerr error): definitely not
// stored. It is what least privilege does to a client with the wrong
// credentials (docs/security.md).
var ErrRefused = errors.New("broker: publish refused")

// Publisher sends events to the broker.
type Publisher interface {
	// Publish sends evs and waits for the broker's answer on each. The
	// result has one entry per event: nil means the broker confirmed it
	// (for an unconfirmed publisher: it was handed to the socket),
	// ErrUnconfirmed (wrapped) means the outcome is unknown, any other
	// error means it was not accepted.
	Publish(ctx context.Context, evs []Event) []error
	Close() error
}

// Holder is a Publisher that can hold events it has already reported
// published without having sent them yet: a fire-and-forget client's
// buffer (Kafka acks=0), while the broker is unreachable. Until Held is
// 0 those events may still reach the broker, so a relay whose publisher
// holds any is not idle, however empty its outbox: a drain that ended
// on its word would stop the consumers before the events arrived and
// call them undelivered.
type Holder interface {
	// Held counts the events handed to the client and not yet sent or
	// failed.
	Held() int64
}

// Delivery is one event as a subscription received it.
type Delivery struct {
	Event
	// Subscription is the consumer group (Kafka) or queue (RabbitMQ) name.
	Subscription string
	Partition    int64  // Kafka
	Offset       int64  // Kafka
	Tag          uint64 // RabbitMQ delivery tag, valid on its channel only
	// Attempt counts deliveries of this message to this subscription,
	// from 1, as far as the broker can tell (RabbitMQ quorum queues count
	// redeliveries; Kafka counts in-process retries, and a redelivery
	// after a crash starts again at 1).
	Attempt int64
	// Headers are the message's headers as received, for validation.
	Headers map[string]string
	// opaque broker state for Ack/Retry/DeadLetter
	handle any
}

// SetHandle attaches broker-private state to d; implementations use it.
func (d *Delivery) SetHandle(h any) { d.handle = h }

// Handle returns what SetHandle attached.
func (d *Delivery) Handle() any { return d.handle }

// Subscriber receives one subscription's deliveries.
//
// Ack is the point after which the broker will not deliver the message to
// this subscription again: a RabbitMQ basic.ack, a Kafka offset commit
// covering the record. A correct consumer acks only after its effect is
// durable.
type Subscriber interface {
	// Next blocks until a delivery is available or ctx ends.
	Next(ctx context.Context) (*Delivery, error)
	// Ack acknowledges d.
	Ack(ctx context.Context, d *Delivery) error
	// Retry gives d back to be delivered again (with Attempt+1), after a
	// transient failure or a rejected poison attempt.
	Retry(ctx context.Context, d *Delivery) error
	// DeadLetter sends d to the subscription's dead-letter destination with
	// the reason, and acknowledges it.
	DeadLetter(ctx context.Context, d *Delivery, reason string) error
	Close() error
}

// AsyncAcker is a Subscriber whose ack is worth not waiting for: a Kafka
// offset commit is a round trip, and RabbitMQ acks held back a little go
// out together as one multiple ack. AckAsync settles the deliveries at
// once, so the next delivery of their stream may be handed out while the
// acks travel, and each channel receives its ack's outcome once it is
// durable (for RabbitMQ: written) or has failed.
// Acks still take effect in order: one that lands covers every earlier
// ack of its stream. A consumer that acks only after its effect is
// durable loses nothing by not waiting: a crash before the ack lands
// means a redelivery, which its inbox absorbs.
type AsyncAcker interface {
	// AckAsync acks a batch: the i-th channel receives ds[i]'s outcome.
	// Taking the batch at once lets its acks travel together.
	AckAsync(ctx context.Context, ds []*Delivery) []<-chan error
}

// Batcher is a Subscriber that can hand out several deliveries at once,
// for a consumer that applies them in one transaction.
type Batcher interface {
	// NextBatch blocks like Next, then returns up to max deliveries that
	// can be handled together, in delivery order. The first is always
	// returned; later ones only while accept (if not nil) says yes. So a
	// batch of more than one holds only accepted deliveries, and one that
	// accept refused comes alone. Deliveries must be settled in order.
	NextBatch(ctx context.Context, max int, accept func(*Delivery) bool) ([]*Delivery, error)
}
