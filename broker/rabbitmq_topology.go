package broker

import (
	"context"
	"fmt"
	"slices"

	amqp "github.com/rabbitmq/amqp091-go"
)

// RabbitMQ topology.
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
// With RabbitConfig.Witness, "<exchange>.witness" is one more quorum queue
// bound to the exchange, with no delivery limit, no dead-lettering and no
// length limit (so no x-overflow ever acts on it), that nothing consumes:
// the harness's record of what the exchange routed, which RabbitLog reads
// after the drain. It is not a subscription: the drain's backlog counts
// only the subscriptions' queues. A quorum queue like theirs, so a
// message confirmed into them was confirmed into it too: the broker
// confirms a message once every queue it was routed to has it.
// When the subscriptions are classic queues (RabbitConfig.QueueType), the
// witness is one too: a quorum queue keeps a transient message a classic
// queue loses on restart, and that loss would read as never delivered,
// not as the broker's.

// RabbitDeadLetterQueue is the name of sub's dead-letter queue. A
// subscriber on it reads what was dead-lettered; each message there
// carries RabbitMQ's x-death header, whose reason is "rejected" (the
// consumer called DeadLetter) or "delivery_limit" (Retry ran out).
func RabbitDeadLetterQueue(sub string) string { return sub + ".dlq" }

// rabbitDLX is the dead-letter exchange of exchange.
func rabbitDLX(exchange string) string { return exchange + ".dlx" }

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
	conn, err := dialRabbit(ctx, cfg, "setup", 0)
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
		args := amqp.Table{
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
		}
		if cfg.classic() {
			// No delivery limit nor dead-letter strategy: classic
			// queues have neither.
			args = amqp.Table{
				amqp.QueueTypeArg:           amqp.QueueTypeClassic,
				"x-dead-letter-exchange":    dlx,
				"x-dead-letter-routing-key": sub,
			}
		}
		if _, err := ch.QueueDeclare(sub, true, false, false, false, args); err != nil {
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
	if cfg.Witness {
		w := RabbitWitnessQueue(cfg.Exchange)
		if _, err := ch.QueueDeclare(w, true, false, false, false, amqp.Table{amqp.QueueTypeArg: cfg.queueType()}); err != nil {
			return fmt.Errorf("rabbitmq setup: declare queue %s: %w", w, err)
		}
		if err := ch.QueueBind(w, "", cfg.Exchange, false, nil); err != nil {
			return fmt.Errorf("rabbitmq setup: bind %s to %s: %w", w, cfg.Exchange, err)
		}
	}
	if !stop() {
		return fmt.Errorf("rabbitmq setup: %w", ctx.Err())
	}
	return nil
}

// classic reports whether the subscriptions' queues are classic queues.
func (c RabbitConfig) classic() bool { return c.QueueType == amqp.QueueTypeClassic }

// queueType is the subscriptions' (and the witness's) queue type.
func (c RabbitConfig) queueType() string {
	if c.classic() {
		return amqp.QueueTypeClassic
	}
	return amqp.QueueTypeQuorum
}
