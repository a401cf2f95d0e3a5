package worker

import (
	"context"

	"github.com/deliverycheck/deliverycheck/broker"
)

// A LagSample is one figure of a subscription's consumer lag: what its
// consumer group has not committed past on one partition of the events
// topic (Kafka), or what waits ready in its queue (RabbitMQ), or, with
// DLQ set, what waits in its dead-letter queue (RabbitMQ).
type LagSample struct {
	Subscription string
	// Target is the consumer group (Kafka) or the queue (RabbitMQ).
	Target string
	// Topic and Partition say where, on Kafka; Topic is "" on RabbitMQ.
	Topic     string
	Partition int32
	Lag       int64
	DLQ       bool
}

// Lags is subscription sub's lag now: one sample per partition of the
// events topic (Kafka), or its queue's ready messages then its
// dead-letter queue's (RabbitMQ). RabbitMQ does not expose unacked
// deliveries, so a queue's figure is what no consumer holds yet.
func (r *BacklogReader) Lags(ctx context.Context, sub string) ([]LagSample, error) {
	target := r.b.Qualify(sub)
	if r.kafka != nil {
		lags, err := r.kafka.Lags(ctx, target)
		if err != nil {
			return nil, err
		}
		out := make([]LagSample, 0, len(lags))
		for _, l := range lags {
			out = append(out, LagSample{Subscription: sub, Target: target, Topic: r.b.Events(), Partition: l.Partition, Lag: l.Lag})
		}
		return out, nil
	}
	ready, err := r.rabbit.Backlog(ctx, target)
	if err != nil {
		return nil, err
	}
	dlq := broker.RabbitDeadLetterQueue(target)
	dead, err := r.rabbit.Backlog(ctx, dlq)
	if err != nil {
		return nil, err
	}
	return []LagSample{
		{Subscription: sub, Target: target, Lag: ready},
		{Subscription: sub, Target: dlq, Lag: dead, DLQ: true},
	}, nil
}
