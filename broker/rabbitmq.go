package broker

// RabbitMQ adapter: a Publisher and a Subscriber over amqp091-go.
//
// # Topology
//
// One durable fanout exchange (RabbitConfig.Exchange) receives every event.
// Each subscription is a durable quorum queue of the same name, bound to
// the exchange, so each gets every event. Fanout because every
// subscription wants every event, and because RabbitMQ 3.10's topic
// exchange, bound with "#", cost the broker about 30µs more CPU per
// message than a fanout (a fifth of its cost per event). The routing key
// stays the aggregate id, for whoever reads it. A quorum queue because it
// is the queue type that fsyncs a message on a majority before the
// publisher confirm, counts redeliveries (x-delivery-count) and enforces a
// delivery limit, which is what the checker's lost/duplicate/dlq verdicts
// rest on.
// Dead letters go through "<exchange>.dlx" (direct) to "<subscription>.dlq",
// also a quorum queue, with at-least-once dead-lettering so a poison event
// is not dropped if the DLQ is briefly unavailable.
//
// # Reconnection
//
// amqp091-go v1.16.0 can recover connections itself, but only when
// Config.Recovery is set (it is nil by default and marked experimental),
// and it then reuses the same *Channel, whose delivery tags and publish
// sequence numbers restart from 1 underneath the caller. This adapter does
// not enable it: it redials itself with capped, jittered backoff, and
// every connection is a new generation with its own channel. A publish
// confirm outstanding when its generation died is reported as unknown
// ([ErrUnconfirmed]), and a delivery from a dead generation cannot be
// acked, retried or dead-lettered ([ErrStaleDelivery]), so an old tag can
// never settle a different message on a newer channel.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ErrStaleDelivery means a delivery came from a channel that has since
// closed (the connection dropped and the subscriber reconnected). Its
// delivery tag means nothing on the new channel, so Ack, Retry and
// DeadLetter do nothing: the broker has already put the message back and
// will deliver it again (with a higher Attempt).
var ErrStaleDelivery = errors.New("broker: rabbitmq delivery is from a closed channel")

// ErrNacked means the broker answered a publish with basic.nack. It is
// always returned wrapped together with [ErrUnconfirmed]: RabbitMQ nacks a
// message routed to several queues when any one of them refuses it, while
// the others may keep it, so a nack does not prove the event is absent.
var ErrNacked = errors.New("broker: rabbitmq nacked the publish")

// errRabbitClosed is returned by a Publisher or Subscriber after Close.
var errRabbitClosed = errors.New("broker: rabbitmq client closed")

// RabbitPublishMode selects how a RabbitPublisher publishes. The values
// are the relay variant names, so a scenario's variant maps onto a mode.
type RabbitPublishMode string

const (
	// RabbitConfirmed is the correct mode: publisher confirms, mandatory
	// publishes with returns handled, persistent messages.
	RabbitConfirmed RabbitPublishMode = "confirmed"
	// RabbitUnconfirmed is known-bad: no confirm mode; Publish reports
	// success once the message is handed to the connection, so a broker
	// crash loses what it had not yet stored.
	RabbitUnconfirmed RabbitPublishMode = "unconfirmed"
	// RabbitUnroutable is known-bad: confirms but no mandatory flag. A
	// message no queue is bound for is acked by the broker and dropped,
	// and Publish reports success.
	RabbitUnroutable RabbitPublishMode = "unroutable"
)

// ParseRabbitPublishMode checks a mode name.
func ParseRabbitPublishMode(s string) (RabbitPublishMode, error) {
	switch m := RabbitPublishMode(s); m {
	case RabbitConfirmed, RabbitUnconfirmed, RabbitUnroutable:
		return m, nil
	}
	return "", fmt.Errorf("broker: unknown rabbitmq publish mode %q (valid: confirmed, unconfirmed, unroutable)", s)
}

// RabbitConfig says where the broker is and how the topology looks. The
// zero value of every field but URL and Subscriptions has a default.
type RabbitConfig struct {
	// URL is the amqp:// URL, with credentials and vhost.
	URL string
	// Exchange is the fanout exchange events are published to, overriding
	// the default "events". Its dead-letter exchange is Exchange+".dlx".
	Exchange string
	// Subscriptions names one quorum queue each; each gets every event.
	Subscriptions []string
	// Unbound lists subscriptions whose queue (and DLQ) is declared but
	// NOT bound to the exchange: the misconfiguration the known-bad
	// `unroutable` relay is exposed by. Must be a subset of Subscriptions.
	//
	// Note that mandatory publishing only detects a message that reaches
	// no queue at all; with one subscription unbound and another bound,
	// even the confirmed publisher cannot tell (AMQP does not say how many
	// queues a message reached), and only the checker sees the loss.
	Unbound []string
	// DeliveryLimit is each subscription queue's x-delivery-limit,
	// overriding the default 5. RabbitMQ dead-letters a message once it has
	// been returned (nack with requeue, or a consumer channel closing with
	// it unacked) more than DeliveryLimit times, so it is delivered at most
	// DeliveryLimit+1 times.
	DeliveryLimit int
	// Prefetch is the subscriber's QoS prefetch count (unacked deliveries
	// in flight per subscriber), overriding the default 32.
	Prefetch int
	// Heartbeat is the AMQP heartbeat interval, overriding the default 5s.
	// A peer that goes silent (partition, paused broker) is declared dead
	// after about two intervals, which bounds how long a confirm can hang.
	Heartbeat time.Duration
	// DialTimeout bounds one connection attempt (TCP, AMQP handshake and
	// channel setup), overriding the default 5s.
	DialTimeout time.Duration
	// ReconnectMin and ReconnectMax bound the backoff between connection
	// attempts (full jitter, doubling), overriding the defaults 50ms and 2s.
	ReconnectMin, ReconnectMax time.Duration
	// Logger receives connection events, overriding slog.Default().
	Logger *slog.Logger
}

// RabbitDeadLetterQueue is the name of sub's dead-letter queue. A
// subscriber on it reads what was dead-lettered; each message there
// carries RabbitMQ's x-death header, whose reason is "rejected" (the
// consumer called DeadLetter) or "delivery_limit" (Retry ran out).
func RabbitDeadLetterQueue(sub string) string { return sub + ".dlq" }

// rabbitDLX is the dead-letter exchange of exchange.
func rabbitDLX(exchange string) string { return exchange + ".dlx" }

func (c RabbitConfig) withDefaults() RabbitConfig {
	if c.Exchange == "" {
		c.Exchange = "events"
	}
	if c.DeliveryLimit == 0 {
		c.DeliveryLimit = 5
	}
	if c.Prefetch == 0 {
		c.Prefetch = 32
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = 5 * time.Second
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.ReconnectMin == 0 {
		c.ReconnectMin = 50 * time.Millisecond
	}
	if c.ReconnectMax == 0 {
		c.ReconnectMax = 2 * time.Second
	}
	if c.ReconnectMax < c.ReconnectMin {
		c.ReconnectMax = c.ReconnectMin
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c RabbitConfig) validate() error {
	if c.URL == "" {
		return errors.New("broker: rabbitmq config: URL is empty")
	}
	if c.DeliveryLimit < 0 || c.Prefetch < 0 || c.Prefetch > 65535 {
		return fmt.Errorf("broker: rabbitmq config: delivery limit %d and prefetch %d must be positive (prefetch at most 65535)", c.DeliveryLimit, c.Prefetch)
	}
	if err := validName("exchange", c.Exchange); err != nil {
		return err
	}
	for _, s := range c.Subscriptions {
		if err := validName("subscription", RabbitDeadLetterQueue(s)); err != nil {
			return err
		}
	}
	for _, u := range c.Unbound {
		if !slices.Contains(c.Subscriptions, u) {
			return fmt.Errorf("broker: rabbitmq config: unbound %q is not a subscription", u)
		}
	}
	return nil
}

// validName checks an exchange or queue name against AMQP's limits.
func validName(what, name string) error {
	if name == "" || len(name) > 255 {
		return fmt.Errorf("broker: rabbitmq config: %s name %q must be 1 to 255 bytes", what, name)
	}
	return nil
}

// SetupRabbitMQ declares the topology cfg describes (see the file
// comment). It is idempotent for an unchanged cfg; a queue that exists
// with other arguments makes it fail (PRECONDITION_FAILED), never silently
// keep the old ones. A subscription in cfg.Unbound is unbound if an
// earlier setup bound it.
//
// On RabbitMQ 3.10 (Ra 2.2), a quorum queue declared less than a few
// minutes before a kill -9 of its node can come back leaderless under a
// new Raft id, its confirmed messages out of reach: Ra registers the
// queue in a dets file it does not sync (fixed upstream by rabbitmq/ra
// PR 443). A run that kills the node should restart it cleanly once after
// setup, or the checker reports that loss, correctly, as the broker's.
func SetupRabbitMQ(ctx context.Context, cfg RabbitConfig) error {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	conn, err := dialRabbit(ctx, cfg, "setup")
	if err != nil {
		return fmt.Errorf("rabbitmq setup: %w", err)
	}
	defer conn.close()
	// Every call below is a synchronous RPC without a context; closing the
	// socket when ctx ends makes a stuck one return.
	stop := context.AfterFunc(ctx, conn.kill)
	defer stop()
	ch, err := conn.conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq setup: open channel: %w", err)
	}
	dlx := rabbitDLX(cfg.Exchange)
	if err := ch.ExchangeDeclare(cfg.Exchange, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		return fmt.Errorf("rabbitmq setup: declare exchange %s: %w", cfg.Exchange, err)
	}
	if err := ch.ExchangeDeclare(dlx, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
		return fmt.Errorf("rabbitmq setup: declare exchange %s: %w", dlx, err)
	}
	for _, sub := range cfg.Subscriptions {
		dlq := RabbitDeadLetterQueue(sub)
		if _, err := ch.QueueDeclare(dlq, true, false, false, false, amqp.Table{
			amqp.QueueTypeArg: amqp.QueueTypeQuorum,
		}); err != nil {
			return fmt.Errorf("rabbitmq setup: declare queue %s: %w", dlq, err)
		}
		if err := ch.QueueBind(dlq, sub, dlx, false, nil); err != nil {
			return fmt.Errorf("rabbitmq setup: bind %s to %s: %w", dlq, dlx, err)
		}
		if _, err := ch.QueueDeclare(sub, true, false, false, false, amqp.Table{
			amqp.QueueTypeArg:           amqp.QueueTypeQuorum,
			"x-delivery-limit":          int64(cfg.DeliveryLimit),
			"x-dead-letter-exchange":    dlx,
			"x-dead-letter-routing-key": sub,
			// At-least-once dead-lettering (RabbitMQ >= 3.10) keeps a
			// message in the source queue until the DLQ confirmed it;
			// it requires reject-publish overflow, which never triggers
			// here because no length limit is set.
			"x-dead-letter-strategy": "at-least-once",
			amqp.QueueOverflowArg:    amqp.QueueOverflowRejectPublish,
		}); err != nil {
			return fmt.Errorf("rabbitmq setup: declare queue %s: %w", sub, err)
		}
		if slices.Contains(cfg.Unbound, sub) {
			if err := ch.QueueUnbind(sub, "", cfg.Exchange, nil); err != nil {
				return fmt.Errorf("rabbitmq setup: unbind %s: %w", sub, err)
			}
			continue
		}
		if err := ch.QueueBind(sub, "", cfg.Exchange, false, nil); err != nil {
			return fmt.Errorf("rabbitmq setup: bind %s to %s: %w", sub, cfg.Exchange, err)
		}
	}
	if !stop() {
		return fmt.Errorf("rabbitmq setup: %w", ctx.Err())
	}
	return nil
}

// rabbitConn is one AMQP connection and the socket under it.
type rabbitConn struct {
	conn *amqp.Connection
	raw  *corkConn
	// dead is set by kill, before the library notices the socket is
	// gone: from then on nothing may be settled on this connection.
	dead atomic.Bool
}

// kill closes the socket under the connection: every pending call and
// confirm on it returns at once. Used when waiting for a clean close
// could hang (paused broker, partition).
func (c *rabbitConn) kill() {
	c.dead.Store(true)
	_ = c.raw.Close()
}

// broken reports whether the connection was killed or the library has
// seen it or its channel close.
func (c *rabbitConn) broken(ch *amqp.Channel) bool {
	return c.dead.Load() || c.conn.IsClosed() || (ch != nil && ch.IsClosed())
}

// close closes the connection politely but briefly, then the socket.
func (c *rabbitConn) close() {
	_ = c.conn.CloseDeadline(time.Now().Add(time.Second))
	c.kill()
}

// dialRabbit opens a connection; the TCP dial and the AMQP handshake are
// bounded by ctx and cfg.DialTimeout. The connection itself outlives ctx.
func dialRabbit(ctx context.Context, cfg RabbitConfig, name string) (*rabbitConn, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	var raw *corkConn
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName("deliverycheck-" + name)
	acfg := amqp.Config{
		Heartbeat:  cfg.Heartbeat,
		Properties: props,
		Dial: func(network, addr string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			if dl, ok := ctx.Deadline(); ok {
				// amqp091-go clears it once the handshake is done.
				_ = c.SetDeadline(dl)
			}
			raw = &corkConn{Conn: c}
			return raw, nil
		},
		// Recovery stays nil: see the file comment.
	}
	conn, err := amqp.DialConfig(cfg.URL, acfg)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	return &rabbitConn{conn: conn, raw: raw}, nil
}

// backoff sleeps before connection attempt n (from 1): full jitter over
// a doubling cap. It returns ctx's error if ctx ends first.
func backoff(ctx context.Context, cfg RabbitConfig, n int) error {
	if n <= 1 {
		return ctx.Err()
	}
	limit := cfg.ReconnectMin << min(n-2, 20)
	if limit <= 0 || limit > cfg.ReconnectMax {
		limit = cfg.ReconnectMax
	}
	t := time.NewTimer(rand.N(limit) + 1)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// RabbitPublisher is a [Publisher] over one AMQP connection and channel,
// redialed when it drops. Publish calls are serialized.
type RabbitPublisher struct {
	cfg  RabbitConfig
	mode RabbitPublishMode
	log  *slog.Logger

	pubMu sync.Mutex // serializes Publish
	seq   uint64     // publish ids, under pubMu

	// life ends at Close, so a Publish waiting to redial returns then.
	life context.Context
	end  context.CancelFunc

	mu     sync.Mutex // guards sess, gen, closed
	sess   *pubSession
	gen    uint64
	closed bool
}

// pubSession is one connection generation of a publisher.
type pubSession struct {
	*rabbitConn
	gen     uint64
	ch      *amqp.Channel
	returns chan amqp.Return
}

func (s *pubSession) dead() bool { return s.ch.IsClosed() || s.conn.IsClosed() }

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
	p := &RabbitPublisher{cfg: cfg, mode: mode, log: cfg.Logger.With("broker", "rabbitmq", "publisher", string(mode))}
	p.life, p.end = context.WithCancel(context.Background())
	return p, nil
}

// session returns a live session, redialing with backoff until one is up
// or ctx ends.
func (p *RabbitPublisher) session(ctx context.Context) (*pubSession, error) {
	p.mu.Lock()
	s, closed := p.sess, p.closed
	p.mu.Unlock()
	if closed {
		return nil, errRabbitClosed
	}
	if s != nil && !s.dead() {
		return s, nil
	}
	if s != nil {
		p.drop(s)
	}
	var last error
	for n := 1; ; n++ {
		if err := backoff(ctx, p.cfg, n); err != nil {
			return nil, fmt.Errorf("connect (%d attempts, last: %v): %w", n-1, last, err)
		}
		s, err := p.connect(ctx)
		if err == nil {
			return s, nil
		}
		if errors.Is(err, errRabbitClosed) {
			return nil, err
		}
		last = err
		p.log.Debug("connect failed", "attempt", n, "err", err)
	}
}

func (p *RabbitPublisher) connect(ctx context.Context) (*pubSession, error) {
	c, err := dialRabbit(ctx, p.cfg, "publisher")
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, c.kill)
	s := &pubSession{rabbitConn: c}
	err = func() error {
		if s.ch, err = c.conn.Channel(); err != nil {
			return fmt.Errorf("open channel: %w", err)
		}
		if p.mode != RabbitUnconfirmed {
			if err := s.ch.Confirm(false); err != nil {
				return fmt.Errorf("confirm mode: %w", err)
			}
		}
		// Buffered, and drained while Publish waits for confirms: amqp091-go
		// drops a return its listener does not take within 5s.
		s.returns = s.ch.NotifyReturn(make(chan amqp.Return, 256))
		return nil
	}()
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		c.close()
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.close()
		return nil, errRabbitClosed
	}
	p.gen++
	s.gen = p.gen
	p.sess = s
	if s.gen > 1 {
		p.log.Info("reconnected", "gen", s.gen)
	}
	return s, nil
}

// drop forgets s (if it is still current) and closes it.
func (p *RabbitPublisher) drop(s *pubSession) {
	p.mu.Lock()
	if p.sess == s {
		p.sess = nil
	}
	p.mu.Unlock()
	s.close()
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
		h := make(amqp.Table, len(hs))
		for k, v := range hs {
			h[k] = v
		}
		dc, err := s.ch.PublishWithDeferredConfirm(p.cfg.Exchange, key, p.mode == RabbitConfirmed, false, amqp.Publishing{
			Headers:       h,
			DeliveryMode:  amqp.Persistent,
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
	for i, dc := range dcs {
		if dc != nil {
			res[i] = p.await(ctx, s, dc, ids[i], evs[i].ID, returned)
		}
	}
	if s.dead() {
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
func (p *RabbitPublisher) await(ctx context.Context, s *pubSession, dc *amqp.DeferredConfirmation, id, evID string, returned map[string]amqp.Return) error {
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
		if s.dead() {
			return fmt.Errorf("rabbitmq publish %s (gen %d): %w: connection closed with the confirm outstanding", evID, s.gen, ErrUnconfirmed)
		}
		return fmt.Errorf("rabbitmq publish %s (gen %d): %w (%w)", evID, s.gen, ErrNacked, ErrUnconfirmed)
	}
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
	p.mu.Lock()
	s := p.sess
	p.sess, p.closed = nil, true
	p.mu.Unlock()
	p.end()
	if s != nil {
		s.close()
	}
	return nil
}

// RabbitSubscriber is a [Subscriber] consuming one queue with manual acks
// and a prefetch limit, redialing when the connection drops.
type RabbitSubscriber struct {
	cfg RabbitConfig
	sub string
	log *slog.Logger

	nextMu sync.Mutex // serializes Next; guards stash
	// stash holds a delivery NextBatch received but did not accept into a
	// batch; the next Next or NextBatch hands it out first.
	stash *Delivery

	mu     sync.Mutex // guards sess, gen, closed
	sess   *subSession
	gen    uint64
	closed bool

	// life ends at Close, so a Next waiting (or redialing) returns then.
	life context.Context
	end  context.CancelFunc
}

// subSession is one connection generation of a subscriber.
type subSession struct {
	*rabbitConn
	gen        uint64
	ch         *amqp.Channel
	deliveries <-chan amqp.Delivery
	acks       *rabbitAcks
}

// rabbitHandle is a Delivery's handle: the channel generation and tag it
// can be settled with, and whether it was.
type rabbitHandle struct {
	owner   *RabbitSubscriber
	sess    *subSession
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
	r := &RabbitSubscriber{cfg: cfg, sub: sub, log: cfg.Logger.With("broker", "rabbitmq", "subscription", sub)}
	r.life, r.end = context.WithCancel(context.Background())
	return r, nil
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
func (r *RabbitSubscriber) delivery(s *subSession, d amqp.Delivery) *Delivery {
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

func (r *RabbitSubscriber) session(ctx context.Context) (*subSession, error) {
	r.mu.Lock()
	s, closed := r.sess, r.closed
	r.mu.Unlock()
	if closed {
		return nil, errRabbitClosed
	}
	if s != nil {
		return s, nil // a dead one is noticed when its deliveries close
	}
	var last error
	for n := 1; ; n++ {
		if err := backoff(ctx, r.cfg, n); err != nil {
			return nil, fmt.Errorf("connect (%d attempts, last: %v): %w", n-1, last, err)
		}
		s, err := r.connect(ctx)
		if err == nil {
			return s, nil
		}
		if errors.Is(err, errRabbitClosed) {
			return nil, err
		}
		last = err
		r.log.Debug("connect failed", "attempt", n, "err", err)
	}
}

func (r *RabbitSubscriber) connect(ctx context.Context) (*subSession, error) {
	c, err := dialRabbit(ctx, r.cfg, "subscriber-"+r.sub)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, c.kill)
	s := &subSession{rabbitConn: c}
	err = func() error {
		if s.ch, err = c.conn.Channel(); err != nil {
			return fmt.Errorf("open channel: %w", err)
		}
		if err := s.ch.Qos(r.cfg.Prefetch, 0, false); err != nil {
			return fmt.Errorf("qos: %w", err)
		}
		if s.deliveries, err = s.ch.Consume(r.sub, "", false, false, false, false, nil); err != nil {
			return fmt.Errorf("consume %s: %w", r.sub, err)
		}
		return nil
	}()
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		c.close()
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		c.close()
		return nil, errRabbitClosed
	}
	r.gen++
	s.gen = r.gen
	s.acks = newRabbitAcks(s.ch, s.gen, s.kill)
	r.sess = s
	if s.gen > 1 {
		r.log.Info("reconnected", "gen", s.gen)
	}
	return s, nil
}

func (r *RabbitSubscriber) drop(s *subSession) {
	r.mu.Lock()
	if r.sess == s {
		r.sess = nil
	}
	r.mu.Unlock()
	s.end()
}

// end closes the session, then fails the acks it was holding.
func (s *subSession) end() {
	s.close()
	s.acks.close()
}

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
	var sess *subSession
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

// Close implements [Subscriber]. Unacked deliveries return to the queue
// (the quorum queue counts that as a failed delivery).
func (r *RabbitSubscriber) Close() error {
	r.mu.Lock()
	s := r.sess
	r.sess, r.closed = nil, true
	r.mu.Unlock()
	r.end()
	if s != nil {
		s.end()
	}
	return nil
}

var (
	_ Publisher  = (*RabbitPublisher)(nil)
	_ Subscriber = (*RabbitSubscriber)(nil)
	_ AsyncAcker = (*RabbitSubscriber)(nil)
)
