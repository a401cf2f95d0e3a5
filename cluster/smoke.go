package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// SmokeResult is what one service's smoke test did.
type SmokeResult struct {
	Service string
	Took    time.Duration
	Err     error
}

// Smoke writes one acknowledged item to every service of c through its
// link and reads it back: a committed row, a record produced with
// acks=all, a confirmed persistent message in a quorum queue. It proves a
// cluster is usable end to end, proxies included.
func Smoke(ctx context.Context, c *Cluster) []SmokeResult {
	var out []SmokeResult
	for _, s := range c.Services() {
		start := time.Now()
		var err error
		switch s.Name() {
		case Postgres:
			err = smokePostgres(ctx, c.ClientURL(Postgres))
		case Kafka:
			err = smokeKafka(ctx, c.ClientURL(Kafka))
		case RabbitMQ:
			// A cluster's first node: a quorum queue declared there
			// has a member on every node.
			first, _, _ := strings.Cut(c.ClientURL(RabbitMQ), ",")
			err = smokeRabbitMQ(ctx, first)
		}
		out = append(out, SmokeResult{Service: s.Name(), Took: time.Since(start), Err: err})
	}
	return out
}

func smokePostgres(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("smoke postgres: %w", err)
	}
	defer conn.Close(context.Background())
	var got int
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS smoke (id serial PRIMARY KEY, v int)"); err != nil {
			return err
		}
		return tx.QueryRow(ctx, "INSERT INTO smoke (v) VALUES (42) RETURNING v").Scan(&got)
	})
	if err != nil || got != 42 {
		return fmt.Errorf("smoke postgres: got %d: %w", got, err)
	}
	return nil
}

func smokeKafka(ctx context.Context, seed string) error {
	topic := fmt.Sprintf("smoke-%d", time.Now().UnixNano())
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(seed),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.AllowAutoTopicCreation(),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		return fmt.Errorf("smoke kafka: %w", err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("42")}).FirstErr(); err != nil {
		return fmt.Errorf("smoke kafka: produce: %w", err)
	}
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("smoke kafka: consume: %w", err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = errors.Join(ferr, err) })
		if ferr != nil {
			return fmt.Errorf("smoke kafka: consume: %w", ferr)
		}
		got := false
		fs.EachRecord(func(r *kgo.Record) { got = got || string(r.Value) == "42" })
		if got {
			return nil
		}
	}
}

func smokeRabbitMQ(ctx context.Context, url string) error {
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		return fmt.Errorf("smoke rabbitmq: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("smoke rabbitmq: %w", err)
	}
	q := fmt.Sprintf("smoke-%d", time.Now().UnixNano())
	if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		return fmt.Errorf("smoke rabbitmq: declare: %w", err)
	}
	defer ch.QueueDelete(q, false, false, false)
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("smoke rabbitmq: confirm mode: %w", err)
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, true, false,
		amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte("42")})
	if err != nil {
		return fmt.Errorf("smoke rabbitmq: publish: %w", err)
	}
	if ok, err := dc.WaitContext(ctx); err != nil || !ok {
		return fmt.Errorf("smoke rabbitmq: not confirmed (ack=%v): %w", ok, err)
	}
	for {
		m, ok, err := ch.Get(q, true)
		if err != nil {
			return fmt.Errorf("smoke rabbitmq: get: %w", err)
		}
		if ok && string(m.Body) == "42" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("smoke rabbitmq: message not back: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
