package broker

import (
	"fmt"
	"slices"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

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
