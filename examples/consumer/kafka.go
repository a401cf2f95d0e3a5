package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/failpoint"
	"github.com/deliverycheck/deliverycheck/history"
)

// consumeKafka handles the topic's records in order, committing each
// record's offset after its transaction.
func consumeKafka(ctx context.Context, log *slog.Logger, cfg config, db *pgxpool.Pool, record func(history.F, history.Value)) error {
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.brokers),
		kgo.ConsumerGroup(cfg.group),
		kgo.ConsumeTopics(cfg.topic),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// A crashed member keeps its partitions until its session times
		// out; the default 45s would stall every restart that long.
		kgo.SessionTimeout(6 * time.Second),
		kgo.HeartbeatInterval(time.Second),
	}
	if cfg.instance != "" {
		// Static membership (KIP-345): the process's name outlives a
		// restart, so the restarted process takes its partitions back
		// at once, fencing its dead self, instead of waiting out the
		// dead member's session (6 s each crash).
		opts = append(opts, kgo.InstanceID(cfg.instance))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	defer cl.Close()
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
			m := kafkaMessage(r)
			v := history.Value{Event: broker.SafeText(m.id), Partition: int64(r.Partition), Offset: r.Offset}
			record(history.Deliver, v)
			ev, reason, err := apply(ctx, db, cfg, m)
			if u, ok := errors.AsType[*unsupported](err); ok {
				// This example has no retries on Kafka: an unknown
				// schema version is turned away at once, like any
				// other reason (Kafka's redrive is not yet written).
				reason, err = u.reason, reject(ctx, db, cfg.subscription, ev, u.reason)
			}
			if err != nil {
				failed = fmt.Errorf("record at offset %d: %w", r.Offset, err)
				return
			}
			failpoint.InjectEvent("after-commit-before-ack", ev.id)
			if err := cl.CommitRecords(ctx, r); err != nil {
				failed = fmt.Errorf("commit offset: %w", err)
				return
			}
			if reason != "" {
				v.Reason = reason
				record(history.DLQ, v) // optional: the rejection in the history, with its reason
				return
			}
			record(history.Ack, v)
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

// kafkaMessage is r as the limits see it: every header, a repeated name
// each time (a record may repeat one), every value text; the event id from
// the event-id header, the aggregate id from the record's key.
func kafkaMessage(r *kgo.Record) message {
	m := message{order: string(r.Key), payload: r.Value, headers: make([]header, len(r.Headers))}
	for i, h := range r.Headers {
		m.headers[i] = header{name: h.Key, value: string(h.Value), text: true}
	}
	m.id = m.header("event-id")
	return m
}
