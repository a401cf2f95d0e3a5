package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// RabbitPublisher is a [Publisher] over one AMQP connection and channel,
// redialed when it drops (see [rabbitSession]). Publish calls are
// serialized.
type RabbitPublisher struct {
	*rabbitSession
	mode RabbitPublishMode

	pubMu sync.Mutex // serializes Publish
	seq   uint64     // publish ids, under pubMu
}

// NewRabbitPublisher returns a publisher in the given mode. It connects on
// the first Publish, so it can be made before the broker is up. The caller
// should call Close when finished.
func NewRabbitPublisher(cfg RabbitConfig, mode RabbitPublishMode) (*RabbitPublisher, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if _, err := ParseRabbitPublishMode(string(mode)); err != nil {
		return nil, err
	}
	p := &RabbitPublisher{mode: mode}
	p.rabbitSession = newRabbitSession(cfg, cfg.Logger.With("broker", "rabbitmq", "publisher", string(mode)),
		rabbitRole{name: "publisher", setup: p.setup, replaceDead: true})
	return p, nil
}

// setup readies a new connection's channel for publishing.
func (p *RabbitPublisher) setup(s *rabbitChannel) error {
	if p.mode != RabbitUnconfirmed {
		if err := s.ch.Confirm(false); err != nil {
			return fmt.Errorf("confirm mode: %w", err)
		}
	}
	// Buffered, and drained while Publish waits for confirms: amqp091-go
	// drops a return its listener does not take within 5s.
	s.returns = s.ch.NotifyReturn(make(chan amqp.Return, 256))
	s.chanClosed = s.ch.NotifyClose(make(chan *amqp.Error, 1))
	return nil
}

// Publish implements [Publisher].
//
// In confirmed mode each event's result is nil once the broker confirmed
// it and did not return it; [ErrUnroutable] when it came back with
// basic.return (no queue bound; the broker still acks such a message);
// [ErrUnconfirmed] when the answer is unknown: the connection dropped
// with the confirm outstanding, ctx ended while waiting, or a nack
// ([ErrNacked]). Any other error means the event was not handed to the
// broker at all (no connection, ctx ended before it was sent, a routing
// key or id too long for AMQP).
//
// Publish does not retry: a dropped connection is redialed (with backoff,
// bounded by ctx) at the start of the next call, and the relay decides
// what to publish again.
func (p *RabbitPublisher) Publish(ctx context.Context, evs []Event) []error {
	res := make([]error, len(evs))
	if len(evs) == 0 {
		return res
	}
	p.pubMu.Lock()
	defer p.pubMu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(p.life, cancel)()
	s, err := p.session(ctx)
	if err != nil {
		for i, ev := range evs {
			res[i] = fmt.Errorf("rabbitmq publish %s: not sent: %w", ev.ID, err)
		}
		return res
	}
	// A write to a broker that stopped reading (paused, partitioned) blocks
	// in the kernel; only closing the socket frees it, so do that if ctx
	// ends while writing. Once every message is written, ctx only bounds
	// the wait for confirms and the connection is kept.
	var writing atomic.Bool
	writing.Store(true)
	stop := context.AfterFunc(ctx, func() {
		if writing.Load() {
			s.kill()
		}
	})
	defer stop()
	returned := map[string]amqp.Return{}
	drainReturns(s.returns, returned)
	dcs := make([]*amqp.DeferredConfirmation, len(evs))
	ids := make([]string, len(evs))
	// The batch leaves in one write (see corkConn).
	s.raw.Cork()
	for i, ev := range evs {
		if err := ctx.Err(); err != nil {
			res[i] = fmt.Errorf("rabbitmq publish %s: not sent: %w", ev.ID, err)
			continue
		}
		key := ev.Key
		if key == "" {
			key = ev.Type
		}
		if len(key) > 255 || len(ev.ID) > 255 {
			res[i] = fmt.Errorf("rabbitmq publish %s: routing key (%d bytes) or id (%d bytes) over AMQP's 255: not sent", ev.ID, len(key), len(ev.ID))
			continue
		}
		if s.dead() {
			res[i] = fmt.Errorf("rabbitmq publish %s: not sent: connection closed (gen %d)", ev.ID, s.gen)
			continue
		}
		// correlation_id carries the publisher's sequence number, so a
		// basic.return is matched to the exact publish it answers (two
		// publishes of one event id must not be confused). A property
		// rather than a header: every header is one more table entry the
		// broker and each consumer decode per message, and only the
		// publisher reads this one.
		p.seq++
		ids[i] = strconv.FormatUint(p.seq, 10)
		hs := ev.Headers()
		h := make(amqp.Table, len(hs)+len(ev.Extra))
		for k, v := range hs {
			h[k] = v
		}
		// Extra headers go as they are: a Go string is a long string
		// in the table, whose bytes AMQP does not check, so invalid
		// UTF-8 arrives as sent.
		for k, v := range ev.Extra {
			h[k] = v
		}
		mode := amqp.Persistent
		if p.mode == RabbitTransient {
			mode = amqp.Transient
		}
		mandatory := p.mode == RabbitConfirmed || p.mode == RabbitTransient
		dc, err := s.ch.PublishWithDeferredConfirm(p.cfg.Exchange, key, mandatory, false, amqp.Publishing{
			Headers:       h,
			DeliveryMode:  mode,
			MessageId:     ev.ID,
			CorrelationId: ids[i],
			Type:          ev.Type,
			AppId:         "deliverycheck",
			Timestamp:     time.Now(),
			Body:          ev.Payload,
		})
		if err != nil {
			// Frames may have reached the socket before the error: unknown.
			res[i] = fmt.Errorf("rabbitmq publish %s (gen %d): %w: %w", ev.ID, s.gen, ErrUnconfirmed, err)
			s.kill()
			continue
		}
		dcs[i] = dc // nil in unconfirmed mode: written is all it promises
	}
	if err := s.raw.Uncork(); err != nil {
		// Some of the batch may have reached the broker: unknown. The
		// confirms still awaited fail as the connection goes.
		for i, ev := range evs {
			if res[i] == nil && dcs[i] == nil {
				res[i] = fmt.Errorf("rabbitmq publish %s (gen %d): %w: %w", ev.ID, s.gen, ErrUnconfirmed, err)
			}
		}
		s.kill()
	}
	writing.Store(false)
	nacked := false
	for i, dc := range dcs {
		if dc != nil {
			res[i] = p.await(ctx, s, dc, ids[i], evs[i].ID, returned)
			nacked = nacked || errors.Is(res[i], ErrNacked)
		}
	}
	switch {
	case s.dead():
		p.drop(s)
	case nacked:
		// A nack is the queue refusing the message, and what a channel
		// gets when its client of a quorum queue is stuck: RabbitMQ
		// 3.10.8 nacks every publish, for a minute and more, on a
		// channel that first published to a quorum queue while its
		// leader's node was down (it keeps sending to the dead leader),
		// although a new leader was elected within a second. A new
		// connection finds the new leader.
		p.log.Info("publishes nacked; reconnecting", "gen", s.gen)
		p.drop(s)
	}
	return res
}

// await waits for one confirm, collecting returns meanwhile.
//
// RabbitMQ sends basic.return before the basic.ack of the same message,
// and amqp091-go hands both over from its one reader goroutine in that
// order: the return is in s.returns before dc is done, so draining after
// done is enough to see it.
func (p *RabbitPublisher) await(ctx context.Context, s *rabbitChannel, dc *amqp.DeferredConfirmation, id, evID string, returned map[string]amqp.Return) error {
	rets := s.returns
	for {
		select {
		case r, ok := <-rets:
			if !ok {
				rets = nil // the channel shut down; dc completes with it
			} else {
				returned[r.CorrelationId] = r
			}
			continue
		case <-dc.Done():
		case <-ctx.Done():
			return fmt.Errorf("rabbitmq publish %s (gen %d): %w: no confirm before %w", evID, s.gen, ErrUnconfirmed, ctx.Err())
		}
		drainReturns(rets, returned)
		if r, ok := returned[id]; ok {
			return fmt.Errorf("rabbitmq publish %s: %w: returned %d %s", evID, ErrUnroutable, r.ReplyCode, r.ReplyText)
		}
		if dc.Acked() {
			return nil
		}
		// amqp091-go completes every outstanding confirm with ack=false
		// when the channel closes, indistinguishable from a nack except
		// that the channel is closed by then.
		if err := refusal(s); err != nil {
			return fmt.Errorf("rabbitmq publish %s (gen %d): %w: %w", evID, s.gen, ErrRefused, err)
		}
		if s.dead() {
			return fmt.Errorf("rabbitmq publish %s (gen %d): %w: connection closed with the confirm outstanding", evID, s.gen, ErrUnconfirmed)
		}
		return fmt.Errorf("rabbitmq publish %s (gen %d): %w (%w)", evID, s.gen, ErrNacked, ErrUnconfirmed)
	}
}

// refusal is the broker's refusal of a publish on s's channel, if the
// channel was closed with one: 403 ACCESS_REFUSED, sent when the user may
// not write to the exchange (least privilege). The broker checks the
// permission before routing, so the message was not stored. amqp091-go
// hands the close to chanClosed before it completes the confirms, so it
// is there once a confirm completed as a nack.
func refusal(s *rabbitChannel) error {
	if s.closeErr == nil && s.chanClosed != nil {
		select {
		case e := <-s.chanClosed:
			s.closeErr = e // nil once the channel closed cleanly
		default:
		}
	}
	if s.closeErr != nil && s.closeErr.Code == amqp.AccessRefused {
		return s.closeErr
	}
	return nil
}

// drainReturns moves every return already buffered into m.
func drainReturns(c chan amqp.Return, m map[string]amqp.Return) {
	for {
		select {
		case r, ok := <-c:
			if !ok {
				return
			}
			m[r.CorrelationId] = r
		default:
			return
		}
	}
}

// Close implements [Publisher]. A Publish in flight returns with its
// outstanding confirms unknown.
func (p *RabbitPublisher) Close() error {
	p.close()
	return nil
}

var _ Publisher = (*RabbitPublisher)(nil)
