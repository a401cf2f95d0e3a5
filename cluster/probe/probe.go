// Package probe holds the readiness checks every runtime uses: a server is
// ready when a real client call succeeds, never when a log line appears.
// The same checks serve the local runtime (child processes) and the
// containers runtime, so "ready" means the same thing on both.
package probe

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Postgres connects to dsn and returns the server's version, shortened to
// e.g. "PostgreSQL 15.18 (Debian 15.18-0+deb12u1)".
func Postgres(ctx context.Context, dsn string) (string, error) {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", err
	}
	defer c.Close(context.Background())
	var v string
	if err := c.QueryRow(ctx, "SELECT version()").Scan(&v); err != nil {
		return "", err
	}
	return ShortPostgresVersion(v), nil
}

// ShortPostgresVersion turns "PostgreSQL 15.18 (Debian 15.18-0+deb12u1) on
// x86_64-pc-linux-gnu, compiled by ..." into "PostgreSQL 15.18 (Debian
// 15.18-0+deb12u1)".
func ShortPostgresVersion(v string) string {
	if i := strings.Index(v, " on "); i > 0 {
		v = v[:i]
	}
	return v
}

// Kafka sends a metadata request to cl's seed broker itself (not to the
// address it advertises) and checks that the broker lists node: a broker
// answers metadata only once it is registered and unfenced. Readiness so
// does not depend on the advertised address being reachable (its proxy
// may not be up yet).
func Kafka(ctx context.Context, cl *kgo.Client, node int32) error {
	seeds := cl.SeedBrokers()
	if len(seeds) == 0 {
		return fmt.Errorf("no seed broker")
	}
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{} // no topics, only brokers
	resp, err := seeds[0].Request(ctx, req)
	if err != nil {
		return err
	}
	for _, b := range resp.(*kmsg.MetadataResponse).Brokers {
		if b.NodeID == node {
			return nil
		}
	}
	return fmt.Errorf("broker %d not yet in its own metadata", node)
}

// ReadyQueue is the quorum queue RabbitMQ's readiness check declares.
const ReadyQueue = "deliverycheck.ready"

// RabbitMQ connects to url, declares a quorum queue and returns the
// server's version, e.g. "RabbitMQ 3.10.8". A node that accepts
// connections but has not started its quorum queue machinery fails.
//
// The queue is kept, not deleted: on RabbitMQ 3.10 a quorum queue deleted
// shortly before a kill -9 leaves a WAL entry whose segment file is gone,
// and on restart the segment writer's failure on it leaves other quorum
// queues without a leader for good. Redeclaring an existing queue is the
// same readiness proof.
func RabbitMQ(ctx context.Context, url string) (string, error) {
	conn, err := DialAMQP(ctx, url)
	if err != nil {
		return "", err
	}
	defer conn.CloseDeadline(time.Now().Add(time.Second))
	ch, err := conn.Channel()
	if err != nil {
		return "", fmt.Errorf("open channel: %w", err)
	}
	if _, err := ch.QueueDeclare(ReadyQueue, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}); err != nil {
		return "", fmt.Errorf("declare quorum queue: %w", err)
	}
	v, _ := conn.Properties["version"].(string)
	return "RabbitMQ " + v, nil
}

// DialAMQP opens an AMQP connection that honours ctx: the dial and the
// handshake give up when ctx ends, and so does every call on the
// connection made before ctx ends (the socket is closed under them, so a
// call to a paused or partitioned server returns instead of hanging).
// amqp091-go's calls take no context; this is how a bounded probe gets one.
// Pass context.Background() for a connection that lives on its own.
func DialAMQP(ctx context.Context, url string) (*amqp.Connection, error) {
	var raw net.Conn
	cfg := amqp.Config{
		Properties: amqp.NewConnectionProperties(),
		Dial: func(network, addr string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			if dl, ok := ctx.Deadline(); ok {
				// Cleared by amqp091-go once the handshake is done.
				_ = c.SetDeadline(dl)
			}
			raw = c
			return c, nil
		},
	}
	cfg.Properties.SetClientConnectionName("deliverycheck")
	conn, err := amqp.DialConfig(url, cfg)
	if err != nil {
		return nil, fmt.Errorf("amqp dial: %w", err)
	}
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { raw.Close() })
		go func() {
			<-conn.NotifyClose(make(chan *amqp.Error, 1))
			stop()
		}()
	}
	return conn, nil
}
