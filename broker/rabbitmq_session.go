package broker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// RabbitMQ connections and reconnection.
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
