package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/deliverycheck/deliverycheck/internal/backoff"
)

// RabbitMQ connections and reconnection.
//
// amqp091-go v1.16.0 can recover connections itself, but only when
// Config.Recovery is set (it is nil by default and marked experimental),
// and it then reuses the same *Channel, whose delivery tags and publish
// sequence numbers restart from 1 underneath the caller. This adapter does
// not enable it: a [rabbitSession], which the publisher and the
// subscriber share, redials with capped, jittered backoff, and every
// connection is a new generation with its own channel. A publish
// confirm outstanding when its generation died is reported as unknown
// ([ErrUnconfirmed]), and a delivery from a dead generation cannot be
// acked, retried or dead-lettered ([ErrStaleDelivery]), so an old tag can
// never settle a different message on a newer channel.

// rabbitConn is one AMQP connection and the socket under it.
type rabbitConn struct {
	conn *amqp.Connection
	raw  *corkConn
	// node is the index in RabbitConfig.URLs of the URL it was dialed
	// with; host is that URL's host:port, for logs (no credentials).
	node int
	host string
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

// dialRabbit opens a connection to the first of cfg.URLs that answers,
// trying each once, in order round the list from URLs[from]: one pass
// over a cluster's nodes, as a RabbitMQ client with an address list
// makes. Each attempt (TCP dial and AMQP handshake) is bounded by ctx and
// cfg.DialTimeout, so a node that accepts and then says nothing (paused,
// cut off) costs one DialTimeout before the next is tried. The
// connection itself outlives ctx. The error has every attempt's.
func dialRabbit(ctx context.Context, cfg RabbitConfig, name string, from int) (*rabbitConn, error) {
	var errs dialErrors
	for k := range len(cfg.URLs) {
		i := (from + k) % len(cfg.URLs)
		c, err := dialRabbitURL(ctx, cfg, name, cfg.URLs[i])
		if err == nil {
			c.node = i
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if len(errs) == 1 {
		return nil, errs[0]
	}
	return nil, errs
}

// dialErrors are the failed attempts of one pass over a cluster's nodes.
type dialErrors []error

func (e dialErrors) Error() string {
	parts := make([]string, len(e))
	for i, err := range e {
		parts[i] = err.Error()
	}
	return strings.Join(parts, "; ")
}

func (e dialErrors) Unwrap() []error { return e }

// rabbitHost is the host:port of an AMQP URL, or the URL without its
// credentials if it does not parse (its parse error is the dial's).
func rabbitHost(u string) string {
	if uri, err := amqp.ParseURI(u); err == nil {
		return net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port))
	}
	if p, err := url.Parse(u); err == nil {
		return p.Redacted()
	}
	return "(unparsable URL)"
}

// dialRabbitURL opens a connection to one URL; see dialRabbit.
func dialRabbitURL(ctx context.Context, cfg RabbitConfig, name, u string) (*rabbitConn, error) {
	host := rabbitHost(u)
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
	conn, err := amqp.DialConfig(u, acfg)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", host, err)
	}
	return &rabbitConn{conn: conn, raw: raw, host: host}, nil
}

// rabbitSession is the connection a [RabbitPublisher] or a
// [RabbitSubscriber] works over. It dials on first use, and once a
// connection has dropped it dials again, with backoff (full jitter over a
// ceiling doubling from ReconnectMin to ReconnectMax), until one is up or
// the caller's ctx ends. Each attempt is one pass over the cluster's
// nodes (RabbitConfig.URLs) starting with the one after the node of the
// last connection: the node a connection was lost to is the least likely
// to answer, and is tried last. A rolling restart thus moves a client
// round the nodes, one ahead of the restarts. Each connection is a new generation
// ([rabbitChannel]) with its own channel, which the role's setup readies:
// confirm mode and returns for a publisher, QoS and a consumer for a
// subscriber. Calls of session must not overlap (Publish and Next are
// serialized); the rest is safe for concurrent use.
type rabbitSession struct {
	cfg    RabbitConfig
	log    *slog.Logger
	role   rabbitRole
	redial backoff.Policy

	// life ends at Close, so a call waiting to redial returns then.
	life context.Context
	end  context.CancelFunc

	mu     sync.Mutex // guards sess, gen, next, closed
	sess   *rabbitChannel
	gen    uint64
	next   int // the index in cfg.URLs a dial starts at
	closed bool
}

// rabbitRole is what a publisher's and a subscriber's connections differ
// in.
type rabbitRole struct {
	// name names the connection in the broker: "deliverycheck-" + name.
	name string
	// setup readies a new connection's channel for the role. It runs
	// before the generation is numbered; an error closes the connection
	// and counts as a failed attempt.
	setup func(*rabbitChannel) error
	// started, if set, runs once the generation is numbered, before it
	// becomes the current one, with the session's lock held.
	started func(*rabbitChannel)
	// replaceDead makes session replace a current generation whose
	// channel or connection has closed (a publisher's), instead of
	// handing it out until its caller notices (a subscriber's, when its
	// deliveries stop).
	replaceDead bool
}

// rabbitChannel is one connection generation of a session: the
// connection, its channel and what the role receives on it.
type rabbitChannel struct {
	*rabbitConn
	gen uint64
	ch  *amqp.Channel

	// A publisher's: basic.return messages, buffered.
	returns chan amqp.Return
	// chanClosed receives the channel's close, for a publisher: a publish
	// the broker refuses (403 ACCESS_REFUSED, a user without write
	// permission on the exchange) closes the channel, and the confirms
	// outstanding then complete as nacks.
	chanClosed chan *amqp.Error
	closeErr   *amqp.Error // what chanClosed said, once read (publisher only)
	// A subscriber's: the deliveries, and its tracker of their acks.
	deliveries <-chan amqp.Delivery
	acks       *rabbitAcks
}

// dead reports whether the connection was killed or the library has seen
// the channel or the connection close. A killed one counts at once: the
// library notices its socket is gone only later, and a publish handed the
// generation in between could only end unconfirmed.
func (c *rabbitChannel) dead() bool { return c.broken(c.ch) }

// end closes the generation, then fails the acks it was holding.
func (c *rabbitChannel) end() {
	c.close()
	if c.acks != nil {
		c.acks.close()
	}
}

// newRabbitSession returns a session that has not dialed yet; cfg has
// its defaults.
func newRabbitSession(cfg RabbitConfig, log *slog.Logger, role rabbitRole) *rabbitSession {
	s := &rabbitSession{cfg: cfg, log: log, role: role,
		redial: backoff.Policy{Base: cfg.ReconnectMin, Cap: cfg.ReconnectMax}}
	s.life, s.end = context.WithCancel(context.Background())
	return s
}

// session returns the current generation, or dials a new one, with
// backoff, until one is up or ctx ends.
func (r *rabbitSession) session(ctx context.Context) (*rabbitChannel, error) {
	r.mu.Lock()
	s, closed := r.sess, r.closed
	r.mu.Unlock()
	if closed {
		return nil, errRabbitClosed
	}
	if s != nil && !(r.role.replaceDead && s.dead()) {
		return s, nil
	}
	if s != nil {
		r.drop(s)
	}
	var last error
	for failed := 0; ; failed++ {
		var wait time.Duration
		if failed > 0 {
			wait = r.redial.Delay(failed - 1)
		}
		if err := backoff.Sleep(ctx, wait); err != nil {
			return nil, fmt.Errorf("connect (%d attempts, last: %v): %w", failed, last, err)
		}
		s, err := r.connect(ctx)
		if err == nil {
			return s, nil
		}
		if errors.Is(err, errRabbitClosed) {
			return nil, err
		}
		last = err
		r.log.Debug("connect failed", "attempt", failed+1, "err", err)
	}
}

// connect dials one new generation and makes it the current one.
func (r *rabbitSession) connect(ctx context.Context) (*rabbitChannel, error) {
	r.mu.Lock()
	from := r.next
	r.mu.Unlock()
	c, err := dialRabbit(ctx, r.cfg, r.role.name, from)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, c.kill)
	s := &rabbitChannel{rabbitConn: c}
	err = func() error {
		if s.ch, err = c.conn.Channel(); err != nil {
			return fmt.Errorf("open channel: %w", err)
		}
		return r.role.setup(s)
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
	if r.role.started != nil {
		r.role.started(s)
	}
	r.sess = s
	r.next = (c.node + 1) % len(r.cfg.URLs)
	if s.gen > 1 {
		r.log.Info("reconnected", "gen", s.gen, "node", c.host)
	} else {
		r.log.Debug("connected", "node", c.host)
	}
	return s, nil
}

// drop forgets s (if it is still current) and ends it.
func (r *rabbitSession) drop(s *rabbitChannel) {
	r.mu.Lock()
	if r.sess == s {
		r.sess = nil
	}
	r.mu.Unlock()
	s.end()
}

// close ends the session: a call waiting to redial returns, and the
// current generation ends.
func (r *rabbitSession) close() {
	r.mu.Lock()
	s := r.sess
	r.sess, r.closed = nil, true
	r.mu.Unlock()
	r.end()
	if s != nil {
		s.end()
	}
}
