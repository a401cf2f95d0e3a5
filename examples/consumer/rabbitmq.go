package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/failpoint"
	"github.com/deliverycheck/deliverycheck/history"
)

// dialAny connects to the first of a cluster's node URLs that answers,
// as a client library with an address list does: after a node is lost
// (and this process restarted) it goes to one that is up.
func dialAny(urls []string) (*amqp.Connection, error) {
	var errs []error
	for _, u := range urls {
		conn, err := amqp.DialConfig(u, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// consumeRabbitMQ handles the queue's deliveries one at a time, acking
// each after its transaction. Anything unacked when the process dies (or
// its connection drops) goes back to the queue, so it exits on any broker
// error and lets the supervisor start it again: a delivery tag belongs to
// its channel, and acking an old tag on a new one could ack another
// message.
func consumeRabbitMQ(ctx context.Context, log *slog.Logger, cfg config, db *pgxpool.Pool, record func(history.F, history.Value)) error {
	conn, err := dialAny(cfg.amqpURLs)
	if err != nil {
		return fmt.Errorf("rabbitmq: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq channel: %w", err)
	}
	if err := ch.Qos(16, 0, false); err != nil {
		return fmt.Errorf("rabbitmq qos: %w", err)
	}
	deliveries, err := ch.ConsumeWithContext(ctx, cfg.queue, "", false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("rabbitmq consume %s: %w", cfg.queue, err)
	}
	log.Info("consuming", "queue", cfg.queue)
	for {
		var d amqp.Delivery
		var ok bool
		select {
		case <-ctx.Done():
			return ctx.Err()
		case d, ok = <-deliveries:
		}
		if !ok {
			return errors.New("rabbitmq: deliveries stopped (channel or connection closed)")
		}
		m := rabbitMessage(d)
		v := history.Value{Event: broker.SafeText(m.id), Tag: int64(d.DeliveryTag), Attempt: attempt(d.Headers)}
		record(history.Deliver, v)
		ev, reason, err := apply(ctx, db, cfg, m)
		if u, ok := errors.AsType[*unsupported](err); ok {
			// Not yet: given back until its last delivery, then
			// dead-lettered (to <queue>.dlq) and listed for
			// dead_letters_query, for a redrive once the fix is
			// deployed.
			v.Reason = u.reason
			if v.Attempt < cfg.maxAttempts {
				if err := d.Nack(false, true); err != nil {
					return fmt.Errorf("rabbitmq nack %d: %w", d.DeliveryTag, err)
				}
				continue
			}
			if err := reject(ctx, db, cfg.subscription, ev, u.reason); err != nil {
				return fmt.Errorf("delivery %d (%s): %w", d.DeliveryTag, ev.id, err)
			}
			if err := d.Nack(false, false); err != nil {
				return fmt.Errorf("rabbitmq dead-letter %d: %w", d.DeliveryTag, err)
			}
			record(history.DLQ, v)
			continue
		}
		if err != nil {
			// Unacked, it is redelivered to the next process (and
			// dead-lettered by the queue's delivery limit if it never
			// goes through).
			return fmt.Errorf("delivery %d (%s): %w", d.DeliveryTag, ev.id, err)
		}
		failpoint.InjectEvent("after-commit-before-ack", ev.id)
		if err := d.Ack(false); err != nil {
			return fmt.Errorf("rabbitmq ack %d: %w", d.DeliveryTag, err)
		}
		if reason != "" {
			v.Reason = reason
			record(history.DLQ, v) // optional: the rejection in the history, with its reason
			continue
		}
		record(history.Ack, v)
	}
}

// rabbitMessage is d as the limits see it: every header of its table, a
// string or bytes value as text, any other (x-delivery-count, an
// integer) counted but not read; the event id from the message_id
// property, the aggregate id from the aggregate-id header.
func rabbitMessage(d amqp.Delivery) message {
	m := message{id: d.MessageId, payload: d.Body, headers: make([]header, 0, len(d.Headers))}
	for k, v := range d.Headers {
		h := header{name: k}
		switch v := v.(type) {
		case string:
			h.value, h.text = v, true
		case []byte:
			h.value, h.text = string(v), true
		}
		m.headers = append(m.headers, h)
	}
	m.order = m.header("aggregate-id")
	return m
}

// attempt is which delivery of its message d is, from 1. A quorum queue
// adds an integer x-delivery-count header to every redelivery (absent on
// the first delivery): read it as the integer it is, and never refuse a
// message for carrying it (a header marshaler that accepts only strings
// would refuse every redelivery, and past the delivery limit the broker
// dead-letters the message instead of redelivering it).
func attempt(h amqp.Table) int64 {
	switch n := h["x-delivery-count"].(type) {
	case int64:
		return n + 1
	case int32:
		return int64(n) + 1
	case int:
		return int64(n) + 1
	}
	return 1
}
