package broker

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// RabbitSubscriber is a [Subscriber] consuming one queue with manual acks
// and a prefetch limit, redialing when the connection drops (see
// [rabbitSession]).
type RabbitSubscriber struct {
	*rabbitSession
	sub string

	nextMu sync.Mutex // serializes Next; guards stash
	// stash holds a delivery NextBatch received but did not accept into a
	// batch; the next Next or NextBatch hands it out first.
	stash *Delivery
}

// rabbitHandle is a Delivery's handle: the channel generation and tag it
// can be settled with, and whether it was.
type rabbitHandle struct {
	owner   *RabbitSubscriber
	sess    *rabbitChannel
	tag     uint64
	settled atomic.Bool
}

// NewRabbitSubscriber returns a subscriber on the queue named sub (a
// subscription of cfg, or RabbitDeadLetterQueue of one to read its dead
// letters). It connects on the first Next. The caller should call Close
// when finished; deliveries not acked by then go back to the queue.
func NewRabbitSubscriber(cfg RabbitConfig, sub string) (*RabbitSubscriber, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := validName("subscription", sub); err != nil {
		return nil, err
	}
	r := &RabbitSubscriber{sub: sub}
	r.rabbitSession = newRabbitSession(cfg, cfg.Logger.With("broker", "rabbitmq", "subscription", sub), rabbitRole{
		name:  "subscriber-" + sub,
		setup: r.setup,
		// The tracker names its generation in its errors.
		started: func(s *rabbitChannel) { s.acks = newRabbitAcks(s.ch, s.gen, s.kill) },
	})
	return r, nil
}

// setup readies a new connection's channel for consuming.
func (r *RabbitSubscriber) setup(s *rabbitChannel) error {
	if err := s.ch.Qos(r.cfg.Prefetch, 0, false); err != nil {
		return fmt.Errorf("qos: %w", err)
	}
	var err error
	if s.deliveries, err = s.ch.Consume(r.sub, "", false, false, false, false, nil); err != nil {
		return fmt.Errorf("consume %s: %w", r.sub, err)
	}
	return nil
}

// Next implements [Subscriber]. When the connection drops it redials
// (with backoff, bounded by ctx) and consumes again; deliveries received
// before the drop are then stale (see [ErrStaleDelivery]).
func (r *RabbitSubscriber) Next(ctx context.Context) (*Delivery, error) {
	r.nextMu.Lock()
	defer r.nextMu.Unlock()
	return r.nextLocked(ctx)
}

// NextBatch implements [Batcher]: the next delivery (waiting for it as
// Next does), then whatever more the broker has already sent, up to max
// and while accept takes it. A delivery accept refuses is kept for the
// next call, which hands it out alone. Competing workers' batches never
// settle each other's: an ack covers other deliveries only once they are
// settled themselves (see [rabbitAcks]).
func (r *RabbitSubscriber) NextBatch(ctx context.Context, max int, accept func(*Delivery) bool) ([]*Delivery, error) {
	r.nextMu.Lock()
	defer r.nextMu.Unlock()
	first, err := r.nextLocked(ctx)
	if err != nil {
		return nil, err
	}
	ds := []*Delivery{first}
	if accept != nil && !accept(first) {
		return ds, nil
	}
	h := first.Handle().(*rabbitHandle)
	// amqp091-go hands deliveries over one at a time through an
	// unbuffered channel, so "what is already here" means what arrives
	// within a short gather window.
	gather := time.NewTimer(rabbitGather)
	defer gather.Stop()
	for len(ds) < max {
		var d amqp.Delivery
		var ok bool
		select {
		case d, ok = <-h.sess.deliveries:
		case <-gather.C:
		case <-ctx.Done():
		}
		if !ok {
			break // window over, ctx ended, or the channel closed (Next sees to it)
		}
		next := r.delivery(h.sess, d)
		if accept != nil && !accept(next) {
			r.stash = next
			break
		}
		ds = append(ds, next)
	}
	return ds, nil
}

// rabbitGather is how long NextBatch waits for more deliveries after the
// first: enough for the client library's buffer to hand over what the
// broker already sent, short next to a transaction.
const rabbitGather = 2 * time.Millisecond

func (r *RabbitSubscriber) nextLocked(ctx context.Context) (*Delivery, error) {
	if d := r.stash; d != nil {
		r.stash = nil
		return d, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(r.life, cancel)()
	for {
		s, err := r.session(ctx)
		if err != nil {
			if r.life.Err() != nil {
				err = errRabbitClosed
			}
			return nil, fmt.Errorf("rabbitmq next %s: %w", r.sub, err)
		}
		select {
		case d, ok := <-s.deliveries:
			if !ok {
				// Channel or connection closed, or the broker cancelled
				// the consumer (queue deleted): start a new generation.
				r.log.Info("deliveries stopped; reconnecting", "gen", s.gen)
				r.drop(s)
				continue
			}
			return r.delivery(s, d), nil
		case <-ctx.Done():
			if r.life.Err() != nil {
				return nil, fmt.Errorf("rabbitmq next %s: %w", r.sub, errRabbitClosed)
			}
			return nil, fmt.Errorf("rabbitmq next %s: %w", r.sub, ctx.Err())
		}
	}
}

// delivery converts d. Nothing in d is trusted: headers of any type are
// rendered as strings and a malformed x-delivery-count is ignored.
func (r *RabbitSubscriber) delivery(s *rabbitChannel, d amqp.Delivery) *Delivery {
	h := tableStrings(d.Headers)
	// x-delivery-count is the number of earlier deliveries the quorum
	// queue counted as failed (returned); absent on the first delivery.
	attempt := int64(1)
	if n, ok := tableInt(d.Headers["x-delivery-count"]); ok && n >= 0 && n < 1<<62 {
		attempt = n + 1
	}
	if d.Redelivered && attempt < 2 {
		attempt = 2
	}
	out := &Delivery{
		Event:        EventFromHeaders(h, d.Body),
		Subscription: r.sub,
		Tag:          d.DeliveryTag,
		Attempt:      attempt,
		Headers:      h,
	}
	out.SetHandle(&rabbitHandle{owner: r, sess: s, tag: d.DeliveryTag})
	return out
}

// tableStrings renders an AMQP table's values as strings.
func tableStrings(t amqp.Table) map[string]string {
	out := make(map[string]string, len(t))
	for k, v := range t {
		switch v := v.(type) {
		case string:
			out[k] = v
		case []byte:
			out[k] = string(v)
		case time.Time:
			out[k] = v.UTC().Format(time.RFC3339)
		default:
			if n, ok := tableInt(v); ok {
				out[k] = strconv.FormatInt(n, 10)
			} else {
				out[k] = fmt.Sprint(v)
			}
		}
	}
	return out
}

// tableInt reads any integer type an AMQP table may hold.
func tableInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int8:
		return int64(n), true
	case int16:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case uint8:
		return int64(n), true
	case uint16:
		return int64(n), true
	case uint32:
		return int64(n), true
	case uint64:
		if n > 1<<62 {
			return 0, false
		}
		return int64(n), true
	}
	return 0, false
}

// Close implements [Subscriber]. Unacked deliveries return to the queue
// (the quorum queue counts that as a failed delivery).
func (r *RabbitSubscriber) Close() error {
	r.close()
	return nil
}

var (
	_ Subscriber = (*RabbitSubscriber)(nil)
	_ Batcher    = (*RabbitSubscriber)(nil)
	_ AsyncAcker = (*RabbitSubscriber)(nil)
)
