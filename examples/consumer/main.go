// Command consumer is an example of a team's own consumer tested by
// deliverycheck: the "inventory" service of a shop, which reserves stock
// for every confirmed order exactly once. It reads Kafka or RabbitMQ,
// whichever the run's broker is.
//
// It is written the way a team would write it, not as part of the harness:
// it reads its configuration from the environment deliverycheck gives
// every external component (docs/contract.md), keeps its own tables
// (shop_inbox, shop_stock_moves) and marks its crash windows with
// failpoint.Inject, which is a no-op outside a deliverycheck run.
//
// A message is untrusted input: before it parses one, it bounds what the
// message may claim (limits.go: header count, UTF-8 and length, a known
// type, payload size, gzip inflated through a bounded reader, JSON depth),
// then checks the event's authority (authority.go); a message that fails
// either is turned away at its first delivery with the reason.
//
// In one transaction it records the event in its inbox and, only if the
// event is new, writes the stock move; after the commit it commits the
// Kafka offset or acks the RabbitMQ delivery. A redelivered event finds
// its inbox row and changes nothing. Built with -tags buggy, the inbox
// check is skipped (dedupe_buggy.go), which is the bug
// scenario-buggy.yaml's run must catch.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliverycheck/deliverycheck/failpoint"
	"github.com/deliverycheck/deliverycheck/history"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, log); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("consumer failed", "err", err)
		os.Exit(1)
	}
}

// config is what the service needs, from the environment.
type config struct {
	dsn, broker, subscription string
	brokers, topic, group     string   // Kafka
	instance                  string   // Kafka: the process's name, its static group membership
	amqpURLs                  []string // RabbitMQ: every node's URL
	queue                     string
	authority                 authority // what an event must show before it is applied
	// schemas are the event schema versions this build accepts
	// (DELIVERYCHECK_SCHEMA_VERSIONS, "1" unless a deploy-fix says
	// "1,2"), and maxAttempts the deliveries of a message in another
	// before it is dead-lettered (DELIVERYCHECK_MAX_ATTEMPTS).
	schemas     []int64
	maxAttempts int64
}

func configFromEnv() (config, error) {
	c := config{
		dsn:          os.Getenv("DELIVERYCHECK_POSTGRES_DSN"),
		broker:       os.Getenv("DELIVERYCHECK_BROKER"),
		subscription: os.Getenv("DELIVERYCHECK_SUBSCRIPTION"),
		brokers:      os.Getenv("DELIVERYCHECK_KAFKA_BROKERS"),
		topic:        os.Getenv("DELIVERYCHECK_KAFKA_TOPIC"),
		group:        os.Getenv("DELIVERYCHECK_KAFKA_GROUP"),
		instance:     os.Getenv("DELIVERYCHECK_PROCESS"),
		// Every node's URL when the broker is a cluster; the single URL
		// of an older harness otherwise.
		amqpURLs: strings.Split(cmp.Or(os.Getenv("DELIVERYCHECK_AMQP_URLS"), os.Getenv("DELIVERYCHECK_AMQP_URL")), ","),
		queue:    os.Getenv("DELIVERYCHECK_AMQP_QUEUE"),
	}
	var err error
	if c.authority, err = authorityFromEnv(); err != nil {
		return c, err
	}
	if c.schemas, err = schemaVersionsFromEnv(); err != nil {
		return c, err
	}
	c.maxAttempts = 5
	if v := os.Getenv("DELIVERYCHECK_MAX_ATTEMPTS"); v != "" {
		if c.maxAttempts, err = strconv.ParseInt(v, 10, 64); err != nil || c.maxAttempts < 1 {
			return c, fmt.Errorf("DELIVERYCHECK_MAX_ATTEMPTS=%q: want a positive integer", v)
		}
	}
	if c.dsn == "" || c.subscription == "" {
		return c, errors.New("set DELIVERYCHECK_POSTGRES_DSN and DELIVERYCHECK_SUBSCRIPTION")
	}
	switch c.broker {
	case "kafka", "":
		if c.brokers == "" || c.topic == "" || c.group == "" {
			return c, errors.New("kafka: set DELIVERYCHECK_KAFKA_BROKERS, _KAFKA_TOPIC and _KAFKA_GROUP")
		}
	case "rabbitmq":
		if c.amqpURLs[0] == "" || c.queue == "" {
			return c, errors.New("rabbitmq: set DELIVERYCHECK_AMQP_URL and DELIVERYCHECK_AMQP_QUEUE")
		}
	default:
		return c, fmt.Errorf("DELIVERYCHECK_BROKER=%q: want kafka or rabbitmq", c.broker)
	}
	return c, nil
}

func run(ctx context.Context, log *slog.Logger) error {
	cfg, err := configFromEnv()
	if err != nil {
		return err
	}
	db, err := pgxpool.New(ctx, cfg.dsn)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer db.Close()
	// Optional: appending deliveries and acks to the run's history lets
	// the report count redeliveries. Outside a run rec is nil.
	rec, err := history.OpenFromEnv()
	if err != nil {
		return err
	}
	if rec != nil {
		defer rec.Close()
	}
	record := func(f history.F, v history.Value) {
		if rec != nil {
			v.Consumer = cfg.subscription
			rec.Record(history.OK, f, v)
		}
	}
	if cfg.broker == "rabbitmq" {
		return consumeRabbitMQ(ctx, log, cfg, db, record)
	}
	return consumeKafka(ctx, log, cfg, db, record)
}

// event is what the service needs from a message, whichever the broker.
type event struct {
	id, order string
	version   int64
	schema    int64 // the payload's schema version; 0 is 1
	// What its authority is checked on (authority.go).
	source, typ, tenant, time, signature string
	payload                              []byte
}

// handle applies one event: inbox row and stock move in one transaction.
func handle(ctx context.Context, db *pgxpool.Pool, subscription string, ev event) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		isNew, err := firstDelivery(ctx, tx, subscription, ev.id)
		if err != nil || !isNew {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO shop_stock_moves (consumer, event_id, order_id, version)
			VALUES ($1, $2, $3, $4)`, subscription, ev.id, ev.order, ev.version); err != nil {
			return err
		}
		failpoint.InjectEvent("after-effect-before-commit", ev.id)
		return nil
	})
}
