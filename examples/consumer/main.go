// Command consumer is an example of a team's own Kafka consumer tested by
// deliverycheck: the "inventory" service of a shop, which reserves stock
// for every confirmed order exactly once.
//
// It is written the way a team would write it, not as part of the harness:
// it reads its configuration from the environment deliverycheck gives
// every external component (docs/contract.md), keeps its own tables
// (shop_inbox, shop_stock_moves) and marks its crash windows with
// failpoint.Inject, which is a no-op outside a deliverycheck run.
//
// In one transaction it records the event in its inbox and, only if the
// event is new, writes the stock move; after the commit it commits the
// Kafka offset. A redelivered event finds its inbox row and changes
// nothing. Built with -tags buggy, the inbox check is skipped (dedupe_buggy.go),
// which is the bug scenario.yaml's buggy run must catch.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

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
	dsn, brokers, topic, group, subscription string
}

func configFromEnv() (config, error) {
	c := config{
		dsn:          os.Getenv("DELIVERYCHECK_POSTGRES_DSN"),
		brokers:      os.Getenv("DELIVERYCHECK_KAFKA_BROKERS"),
		topic:        os.Getenv("DELIVERYCHECK_KAFKA_TOPIC"),
		group:        os.Getenv("DELIVERYCHECK_KAFKA_GROUP"),
		subscription: os.Getenv("DELIVERYCHECK_SUBSCRIPTION"),
	}
	if c.dsn == "" || c.brokers == "" || c.topic == "" || c.group == "" || c.subscription == "" {
		return c, errors.New("set DELIVERYCHECK_POSTGRES_DSN, _KAFKA_BROKERS, _KAFKA_TOPIC, _KAFKA_GROUP and _SUBSCRIPTION")
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
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(cfg.brokers),
		kgo.ConsumerGroup(cfg.group),
		kgo.ConsumeTopics(cfg.topic),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// A crashed member keeps its partitions until its session times
		// out; the default 45s would stall every restart that long.
		kgo.SessionTimeout(6*time.Second),
		kgo.HeartbeatInterval(time.Second),
	)
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	defer cl.Close()
	// Optional: appending deliveries and acks to the run's history lets
	// the report count redeliveries. Outside a run rec is nil.
	rec, err := history.OpenFromEnv()
	if err != nil {
		return err
	}
	if rec != nil {
		defer rec.Close()
	}
	record := func(f history.F, r *kgo.Record) {
		if rec != nil {
			rec.Record(history.OK, f, history.Value{Event: header(r, "event-id"), Consumer: cfg.subscription,
				Partition: int64(r.Partition), Offset: r.Offset})
		}
	}
	log.Info("consuming", "topic", cfg.topic, "group", cfg.group)
	for {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			// Polls block rebalances until allowed again, and leaving
			// the group on Close is one.
			cl.AllowRebalance()
			return ctx.Err()
		}
		if errs := fetches.Errors(); len(errs) > 0 {
			log.Warn("fetch", "err", errs[0].Err)
		}
		var failed error
		fetches.EachRecord(func(r *kgo.Record) {
			if failed != nil {
				return
			}
			record(history.Deliver, r)
			if err := handle(ctx, db, cfg.subscription, r); err != nil {
				failed = err
				return
			}
			failpoint.InjectEvent("after-commit-before-ack", header(r, "event-id"))
			if err := cl.CommitRecords(ctx, r); err != nil {
				failed = fmt.Errorf("commit offset: %w", err)
				return
			}
			record(history.Ack, r)
		})
		cl.AllowRebalance()
		if failed != nil {
			// Unsafe to go on from a record we could not finish: exit
			// and let the supervisor start us again from the last
			// committed offset.
			return failed
		}
	}
}

// handle applies one event: inbox row and stock move in one transaction.
func handle(ctx context.Context, db *pgxpool.Pool, subscription string, r *kgo.Record) error {
	event := header(r, "event-id")
	version, err := strconv.ParseInt(header(r, "version"), 10, 64)
	if event == "" || err != nil {
		return fmt.Errorf("record at offset %d: no event-id or version header", r.Offset)
	}
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		isNew, err := firstDelivery(ctx, tx, subscription, event)
		if err != nil || !isNew {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO shop_stock_moves (consumer, event_id, order_id, version)
			VALUES ($1, $2, $3, $4)`, subscription, event, string(r.Key), version); err != nil {
			return err
		}
		failpoint.InjectEvent("after-effect-before-commit", event)
		return nil
	})
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
