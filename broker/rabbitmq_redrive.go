package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// RabbitMQ dead-letter redrive (issue 25, docs/contract.md "Dead letters
// and redrive"): a subscription's dead-letter queue is read with manual
// acks and each message republished, unchanged, to the subscription's
// own queue, then acked in the dead-letter queue once the broker
// confirmed the republish. A crash between the two leaves the dead letter
// in place to be redriven again: at least once, which the consumer's
// inbox dedupes.
//
// The republish goes through the default exchange ("") with the
// subscription's queue as routing key: the events exchange is a fanout,
// and would hand the event again to every other subscription and to the
// witness queue.

// rabbitDeathHeader reports whether name is one of the headers RabbitMQ
// adds to a message it dead-letters or counts: a redriven message leaves
// them behind, so its new life in the subscription's queue starts from
// zero deliveries.
func rabbitDeathHeader(name string) bool {
	return name == "x-death" || name == "x-delivery-count" ||
		strings.HasPrefix(name, "x-first-death-") || strings.HasPrefix(name, "x-last-death-")
}

// RedriveMessage is one dead letter taken from a dead-letter queue, not
// yet acked there.
type RedriveMessage struct {
	// Event is the message's event as its headers and body say.
	Event Event
	// Headers are its headers as strings, RabbitMQ's death headers
	// included, for whoever classifies it.
	Headers map[string]string

	msg amqp.Delivery
}

// RabbitRedrive reads one subscription's dead-letter queue and republishes
// to its queue, over one connection of its own (no reconnection: a
// redriver that loses its connection exits and is started again, and
// every dead letter it had not acked is back in the queue). The caller
// should call Close.
type RabbitRedrive struct {
	conn    *rabbitConn
	ch      *amqp.Channel
	queue   string // the subscription's queue, qualified
	dlq     string
	returns chan amqp.Return
}

// OpenRabbitRedrive connects for a redrive of queue (a subscription's
// qualified queue, one of cfg.Subscriptions).
func OpenRabbitRedrive(ctx context.Context, cfg RabbitConfig, queue string) (*RabbitRedrive, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	conn, err := dialRabbit(ctx, cfg, "redrive", 0)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq redrive %s: %w", queue, err)
	}
	r := &RabbitRedrive{conn: conn, queue: queue, dlq: RabbitDeadLetterQueue(queue)}
	if r.ch, err = conn.conn.Channel(); err != nil {
		conn.close()
		return nil, fmt.Errorf("rabbitmq redrive %s: open channel: %w", queue, err)
	}
	if err := r.ch.Confirm(false); err != nil {
		conn.close()
		return nil, fmt.Errorf("rabbitmq redrive %s: confirm mode: %w", queue, err)
	}
	r.returns = r.ch.NotifyReturn(make(chan amqp.Return, 16))
	return r, nil
}

// Close closes the connection: every dead letter taken and not acked goes
// back to the dead-letter queue.
func (r *RabbitRedrive) Close() { r.conn.close() }

// rpc runs a synchronous channel call bounded by ctx: the library's calls
// take no context, so ctx ending closes the socket under them.
func (r *RabbitRedrive) rpc(ctx context.Context, f func() error) error {
	stop := context.AfterFunc(ctx, r.conn.kill)
	err := f()
	if !stop() {
		return errors.Join(err, ctx.Err())
	}
	return err
}

// Count is how many messages the dead-letter queue holds ready (not
// counting those this redrive took and has not acked).
func (r *RabbitRedrive) Count(ctx context.Context) (int, error) {
	var q amqp.Queue
	err := r.rpc(ctx, func() (err error) {
		q, err = r.ch.QueueDeclarePassive(r.dlq, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("rabbitmq redrive: count %s: %w", r.dlq, err)
	}
	return q.Messages, nil
}

// Next takes the next ready dead letter, unacked; ok is false when the
// queue has none ready.
func (r *RabbitRedrive) Next(ctx context.Context) (m *RedriveMessage, ok bool, err error) {
	var d amqp.Delivery
	err = r.rpc(ctx, func() (err error) {
		d, ok, err = r.ch.Get(r.dlq, false)
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("rabbitmq redrive: get from %s: %w", r.dlq, err)
	}
	if !ok {
		return nil, false, nil
	}
	h := tableStrings(d.Headers)
	ev := EventFromHeaders(h, d.Body)
	if ev.ID == "" {
		ev.ID = d.MessageId
	}
	ev.ID, ev.Source, ev.Key = SafeText(ev.ID), SafeText(ev.Source), SafeText(ev.Key)
	return &RedriveMessage{Event: ev, Headers: h, msg: d}, true, nil
}

// Republish sends m to the subscription's queue as it was published, its
// death headers left out and HeaderRedriveAttempt set to attempt, under
// id (m's own event id, or another: the known-bad redriver's), and waits
// for the broker's confirm. It does not ack m.
func (r *RabbitRedrive) Republish(ctx context.Context, m *RedriveMessage, id string, attempt int64) error {
	h := make(amqp.Table, len(m.msg.Headers)+1)
	for k, v := range m.msg.Headers {
		if !rabbitDeathHeader(k) {
			h[k] = v
		}
	}
	h[HeaderRedriveAttempt] = strconv.FormatInt(attempt, 10)
	msgID := m.msg.MessageId
	if id != m.Event.ID {
		h[HeaderEventID] = id
		msgID = id
	}
	pub := amqp.Publishing{
		Headers:      h,
		DeliveryMode: amqp.Persistent,
		MessageId:    msgID,
		Type:         m.msg.Type,
		AppId:        m.msg.AppId,
		Timestamp:    m.msg.Timestamp,
		ContentType:  m.msg.ContentType,
		Body:         m.msg.Body,
	}
	if len(pub.Headers) == 0 {
		pub.Headers = nil
	}
	var dc *amqp.DeferredConfirmation
	err := r.rpc(ctx, func() (err error) {
		dc, err = r.ch.PublishWithDeferredConfirm("", r.queue, true, false, pub)
		return err
	})
	if err != nil {
		return fmt.Errorf("rabbitmq redrive %s to %s: %w: %w", id, r.queue, ErrUnconfirmed, err)
	}
	return r.await(ctx, dc, id)
}

// await waits for one publish's confirm. RabbitMQ sends basic.return
// before the basic.ack of the same message, so a return is in r.returns
// by the time its confirm is done; publishes are one at a time, so any
// return is this one's.
func (r *RabbitRedrive) await(ctx context.Context, dc *amqp.DeferredConfirmation, id string) error {
	select {
	case <-dc.Done():
	case <-ctx.Done():
		r.conn.kill()
		return fmt.Errorf("rabbitmq redrive %s to %s: %w: no confirm before %w", id, r.queue, ErrUnconfirmed, ctx.Err())
	}
	select {
	case ret := <-r.returns:
		return fmt.Errorf("rabbitmq redrive %s to %s: %w: returned %d %s", id, r.queue, ErrUnroutable, ret.ReplyCode, ret.ReplyText)
	default:
	}
	if !dc.Acked() {
		return fmt.Errorf("rabbitmq redrive %s to %s: %w (%w)", id, r.queue, ErrNacked, ErrUnconfirmed)
	}
	return nil
}

// Ack removes m from the dead-letter queue. Like every AMQP ack it has no
// reply: the frame was written.
func (r *RabbitRedrive) Ack(m *RedriveMessage) error {
	if err := r.ch.Ack(m.msg.DeliveryTag, false); err != nil {
		return fmt.Errorf("rabbitmq redrive: ack %s in %s: %w", m.Event.ID, r.dlq, err)
	}
	return nil
}

// RabbitPurgeDLQ empties queue's dead-letter queue (queue being a
// subscription's qualified queue, one of cfg.Subscriptions) and returns
// how many messages it removed: the operator's purge, which throws away
// whatever failed.
func RabbitPurgeDLQ(ctx context.Context, cfg RabbitConfig, queue string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return 0, err
	}
	conn, err := dialRabbit(ctx, cfg, "purge", 0)
	if err != nil {
		return 0, fmt.Errorf("rabbitmq purge: %w", err)
	}
	defer conn.close()
	stop := context.AfterFunc(ctx, conn.kill)
	defer stop()
	ch, err := conn.conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("rabbitmq purge: %w", err)
	}
	dlq := RabbitDeadLetterQueue(queue)
	n, err := ch.QueuePurge(dlq, false)
	if err != nil {
		return 0, fmt.Errorf("rabbitmq purge %s: %w", dlq, err)
	}
	return n, nil
}
