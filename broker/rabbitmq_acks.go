package broker

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// settle settles d with op on its session's acks (see [rabbitAcks]), at
// most once per delivery, and only on the channel d came from while that
// channel is still the current one.
//
// AMQP acks have no reply: success means the frame was written, not that
// the broker processed it. If the connection drops right after, the
// broker redelivers, which the consumer's inbox dedupes.
//
// The frame is small and normally written at once; only a broker that
// stopped reading can block it, and then ctx ending closes the connection
// (the message is redelivered). A frame that cannot be written means the
// socket is gone (the library may not have noticed yet): the broker will
// redeliver everything unsettled on this channel, so this delivery and its
// siblings are stale, and the session is killed so that later settles of
// the siblings say so at once.
func (r *RabbitSubscriber) settle(ctx context.Context, what string, d *Delivery, op func(a *rabbitAcks, tag uint64) error) error {
	h, err := r.claim(ctx, what, d)
	if err != nil {
		return err
	}
	// The acks are this generation's own: if its channel died since the
	// claim, the frame fails instead of reaching a newer channel.
	stop := context.AfterFunc(ctx, h.sess.kill)
	defer stop()
	if err := op(h.sess.acks, h.tag); err != nil {
		// The tracker's error already starts "rabbitmq settle tag N",
		// as held acks report it with no caller to add context.
		return fmt.Errorf("%s %s: %w", what, d.ID, err)
	}
	return nil
}

// claim checks that d can be settled, on the current channel, and marks
// it settled so that it never is twice: a second ack of one tag makes
// RabbitMQ close the channel (PRECONDITION_FAILED), which would strand
// every other delivery on it.
func (r *RabbitSubscriber) claim(ctx context.Context, what string, d *Delivery) (*rabbitHandle, error) {
	h, ok := d.Handle().(*rabbitHandle)
	if !ok || h.owner != r {
		return nil, fmt.Errorf("rabbitmq %s: delivery of %q is not from this subscriber (%s)", what, d.ID, r.sub)
	}
	r.mu.Lock()
	cur := r.sess
	r.mu.Unlock()
	if cur != h.sess || h.sess.broken(h.sess.ch) {
		return nil, fmt.Errorf("rabbitmq %s %s tag %d (gen %d): %w", what, d.ID, h.tag, h.sess.gen, ErrStaleDelivery)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("rabbitmq %s %s tag %d: %w", what, d.ID, h.tag, err)
	}
	if !h.settled.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("rabbitmq %s %s tag %d: already acked, retried or dead-lettered", what, d.ID, h.tag)
	}
	return h, nil
}

// Ack implements [Subscriber]: d's tag is acked at once, covering the
// acks held below it if it is the lowest outstanding one.
func (r *RabbitSubscriber) Ack(ctx context.Context, d *Delivery) error {
	return r.settle(ctx, "ack", d, (*rabbitAcks).now)
}

// AckAsync implements [AsyncAcker]: the batch's acks are held together
// until every delivery before them on the channel is settled (at most
// rabbitAckHold), then go out with the acks they cover as one multiple
// ack. A channel receives nil once the frame covering its delivery is
// written.
func (r *RabbitSubscriber) AckAsync(ctx context.Context, ds []*Delivery) []<-chan error {
	outs := make([]<-chan error, len(ds))
	var sess *rabbitChannel
	var tags []uint64
	var at []int
	flush := func() {
		if len(tags) == 0 {
			return
		}
		stop := context.AfterFunc(ctx, sess.kill)
		for i, c := range sess.acks.later(tags...) {
			outs[at[i]] = c
		}
		stop()
		tags, at = tags[:0], at[:0]
	}
	for i, d := range ds {
		h, err := r.claim(ctx, "ack", d)
		if err != nil {
			c := make(chan error, 1)
			c <- err
			outs[i] = c
			continue
		}
		if h.sess != sess {
			flush()
			sess = h.sess
		}
		tags, at = append(tags, h.tag), append(at, i)
	}
	flush()
	return outs
}

// Retry implements [Subscriber]: basic.nack with requeue. The quorum queue
// counts it in x-delivery-count; past RabbitConfig.DeliveryLimit the broker
// dead-letters the message to the DLQ itself (x-death reason
// "delivery_limit") instead of delivering it again.
func (r *RabbitSubscriber) Retry(ctx context.Context, d *Delivery) error {
	return r.settle(ctx, "retry", d, func(a *rabbitAcks, tag uint64) error { return a.nack(tag, true) })
}

// DeadLetter implements [Subscriber]: basic.nack without requeue, which
// the queue dead-letters through the DLX to RabbitDeadLetterQueue(sub)
// (x-death reason "rejected").
//
// AMQP cannot attach headers to a nack, so reason does not travel with
// the message: the consumer records it with its own dead-letter row, and
// here it is only logged. The DLQ copy carries the original headers and
// x-death (queue, reason, count, time).
func (r *RabbitSubscriber) DeadLetter(ctx context.Context, d *Delivery, reason string) error {
	err := r.settle(ctx, "dead-letter", d, func(a *rabbitAcks, tag uint64) error { return a.nack(tag, false) })
	if err == nil {
		r.log.Debug("dead-lettered", "event", d.ID, "attempt", d.Attempt, "reason", reason)
	}
	return err
}

// rabbitAcks settles one channel's deliveries in as few frames as it can.
//
// RabbitMQ numbers a channel's deliveries 1, 2, 3, ... and a basic.ack
// with multiple set settles every outstanding delivery up to its tag: one
// frame through the network and one command to the quorum queue instead
// of one per delivery. It may only be sent once every lower tag is
// settled, or it would ack a delivery still being handled by another
// worker (a loss if that worker then crashes). So an ack waits ("held")
// while a lower tag is outstanding, and goes out, together with the held
// acks it covers, as soon as the lowest outstanding tag is settled.
//
// A held ack waits at most rabbitAckHold; then it is sent on its own.
// So a slow delivery (a transaction retried with backoff, a consumer
// stopping mid-batch) delays the acks above it only that long, and never
// keeps the prefetch window full of deliveries that are done.
//
// Every frame is written under mu, so no tag is ever covered twice (a
// second ack of a tag makes RabbitMQ close the channel).
type rabbitAcks struct {
	mu   sync.Mutex
	ch   acker
	kill func() // closes the socket after a frame could not be written
	gen  uint64 // the session's generation, for errors
	next uint64 // the lowest tag not yet settled
	held map[uint64]chan error
	// done holds tags above next already settled by a frame of their
	// own (a nack, an ack sent alone), which next skips over.
	done  map[uint64]bool
	timer *time.Timer   // sends the held acks alone once they waited hold
	hold  time.Duration // rabbitAckHold but in tests
	err   error         // set once the session can settle nothing more
}

// rabbitAckHold is how long an ack may wait for the deliveries below it.
const rabbitAckHold = 10 * time.Millisecond

// acker is what rabbitAcks sends frames with: an *amqp.Channel.
type acker interface {
	Ack(tag uint64, multiple bool) error
	Nack(tag uint64, multiple, requeue bool) error
}

var _ acker = (*amqp.Channel)(nil)

func newRabbitAcks(ch acker, gen uint64, kill func()) *rabbitAcks {
	return &rabbitAcks{ch: ch, gen: gen, kill: kill, next: 1,
		held: map[uint64]chan error{}, done: map[uint64]bool{}, hold: rabbitAckHold}
}

// later acks tags once every lower tag is settled (or the hold has
// passed); each channel receives nil once a frame covering its tag was
// written. Tags given together go out together when they can.
func (a *rabbitAcks) later(tags ...uint64) []<-chan error {
	outs := make([]<-chan error, len(tags))
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, tag := range tags {
		c := make(chan error, 1)
		outs[i] = c
		if a.err != nil {
			c <- a.stale(tag, a.err)
			continue
		}
		a.held[tag] = c
	}
	a.advance()
	if len(a.held) > 0 && a.timer == nil {
		a.timer = time.AfterFunc(a.hold, a.expire)
	}
	return outs
}

// now acks tag at once: with the held acks below it if it is the lowest
// outstanding tag, else alone.
func (a *rabbitAcks) now(tag uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return a.stale(tag, a.err)
	}
	if tag != a.next {
		return a.alone(tag, func() error { return a.ch.Ack(tag, false) })
	}
	out := make(chan error, 1)
	a.held[tag] = out
	a.advance()
	return <-out
}

// nack settles tag with a nack of its own (requeued or dead-lettered),
// which may release held acks above it.
func (a *rabbitAcks) nack(tag uint64, requeue bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return a.stale(tag, a.err)
	}
	if err := a.alone(tag, func() error { return a.ch.Nack(tag, false, requeue) }); err != nil {
		return err
	}
	a.advance()
	return nil
}

// alone sends tag's own frame and notes it settled.
func (a *rabbitAcks) alone(tag uint64, send func() error) error {
	if err := send(); err != nil {
		a.fail(err)
		return a.stale(tag, err)
	}
	a.done[tag] = true
	return nil
}

// advance moves next past every settled or held tag and sends one
// multiple ack for the held ones it passed.
func (a *rabbitAcks) advance() {
	var covered []chan error
	var upTo uint64
	for {
		if c, ok := a.held[a.next]; ok {
			covered = append(covered, c)
			delete(a.held, a.next)
			upTo = a.next
		} else if a.done[a.next] {
			delete(a.done, a.next)
		} else {
			break
		}
		a.next++
	}
	if len(covered) == 0 {
		return
	}
	var err error
	if err = a.ch.Ack(upTo, true); err != nil {
		a.fail(err)
		err = a.stale(upTo, err)
	}
	for _, c := range covered {
		c <- err
	}
	if len(a.held) == 0 && a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
}

// expire sends every held ack on its own frame.
func (a *rabbitAcks) expire() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.timer = nil
	tags := make([]uint64, 0, len(a.held))
	for t := range a.held {
		tags = append(tags, t)
	}
	slices.Sort(tags)
	for _, t := range tags {
		c := a.held[t]
		delete(a.held, t)
		if a.err != nil {
			c <- a.stale(t, a.err)
			continue
		}
		c <- a.alone(t, func() error { return a.ch.Ack(t, false) })
	}
}

// fail ends the session's settling: a frame could not be written (the
// socket is gone, so the broker redelivers everything unsettled) or the
// session was dropped. Every held ack fails with it.
func (a *rabbitAcks) fail(err error) {
	if a.err == nil {
		a.err = err
		a.kill()
	}
	for t, c := range a.held {
		c <- a.stale(t, err)
		delete(a.held, t)
	}
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
}

// close fails the held acks of a session that ended.
func (a *rabbitAcks) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.fail(errSessionEnded)
}

func (a *rabbitAcks) stale(tag uint64, err error) error {
	return fmt.Errorf("rabbitmq settle tag %d (gen %d): %w: %w", tag, a.gen, ErrStaleDelivery, err)
}

var errSessionEnded = fmt.Errorf("the connection was closed")
