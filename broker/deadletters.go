package broker

import (
	"context"
	"fmt"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// DeadLetter is one message found in a dead-letter queue or topic the
// harness set up. The final read records each as a broker-dlq row, so an
// event a consumer never applied, because the broker gave up on it, is
// explained as such rather than only counted as lost.
type DeadLetter struct {
	Event, Source string
	// Queue is the queue (RabbitMQ) or consumer group (Kafka) it was
	// dead-lettered from, as the broker names it.
	Queue string
	// Reason is the broker's (RabbitMQ x-death: "delivery_limit",
	// "rejected") or the consumer's (Kafka's dlq-reason header).
	Reason string
	// Deliveries is how many times it was delivered before, 0 unknown.
	Deliveries int64
}

// RabbitDeadLetters reads, without removing anything, every message in
// the dead-letter queue of each of cfg's subscriptions: it takes them
// unacked and closes the channel, which puts them back.
func RabbitDeadLetters(ctx context.Context, cfg RabbitConfig) ([]DeadLetter, error) {
	ctx, cancel := context.WithTimeout(ctx, deadLettersTimeout)
	defer cancel()
	cfg = cfg.withDefaults()
	conn, err := dialRabbit(ctx, cfg, "dead-letters", 0)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq dead letters: %w", err)
	}
	defer conn.close()
	stop := context.AfterFunc(ctx, conn.kill)
	defer stop()
	ch, err := conn.conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("rabbitmq dead letters: %w", err)
	}
	defer ch.Close()
	var out []DeadLetter
	for _, sub := range cfg.Subscriptions {
		q := RabbitDeadLetterQueue(sub)
		for {
			m, ok, err := ch.Get(q, false)
			if err != nil {
				return out, fmt.Errorf("rabbitmq dead letters: get from %s: %w", q, err)
			}
			if !ok {
				break
			}
			out = append(out, rabbitDeadLetter(sub, cfg.DeliveryLimit, m))
		}
	}
	return out, ctx.Err()
}

// rabbitDeadLetter reads a dead-lettered message: its id (message_id, or
// the event-id header), its source and x-death's reason. One the queue's
// delivery limit dead-lettered was delivered limit+1 times, by the
// definition of x-delivery-limit; RabbitMQ 3.10 does not carry an exact
// count on the dead-lettered copy (x-delivery-count lags it).
func rabbitDeadLetter(sub string, limit int, m amqp.Delivery) DeadLetter {
	d := DeadLetter{Event: SafeText(m.MessageId), Queue: sub}
	if id, ok := m.Headers[HeaderEventID].(string); ok && d.Event == "" {
		d.Event = SafeText(id)
	}
	source, _ := m.Headers[HeaderSource].(string)
	d.Source = SafeText(source)
	if deaths, ok := m.Headers["x-death"].([]any); ok && len(deaths) > 0 {
		if t, ok := deaths[0].(amqp.Table); ok {
			d.Reason, _ = t["reason"].(string)
		}
	}
	if d.Reason == "delivery_limit" && limit > 0 {
		d.Deliveries = int64(limit) + 1
	}
	return d
}

// KafkaDeadLetters reads what cfg's dead-letter topic still holds, from
// its start to its end as of now: the event id and the subscription from
// the headers the dead-lettering consumer wrote (dlq-subscription, or
// the consumer group), the reason and the attempts. A dead letter of one
// of subs (qualified consumer groups) that its redrive group
// (KafkaRedriveGroup) went past, redriven or purged, is no longer there,
// unless that group kept it (kafka_redrive.go).
func KafkaDeadLetters(ctx context.Context, cfg KafkaConfig, subs []string) ([]DeadLetter, error) {
	ctx, cancel := context.WithTimeout(ctx, deadLettersTimeout)
	defer cancel()
	out, _, err := kafkaDeadLetters(ctx, cfg.withDefaults(), subs)
	return out, err
}

// kafkaDeadLetters is KafkaDeadLetters, which also returns the topic's
// end offsets it read up to, per partition.
func kafkaDeadLetters(ctx context.Context, cfg KafkaConfig, subs []string) ([]DeadLetter, map[int32]int64, error) {
	topic := cfg.DLQTopic()
	admCl, err := kgo.NewClient(cfg.clientOpts("dead-letters")...)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka dead letters: %w", err)
	}
	adm := kadm.NewClient(admCl)
	redriven := map[string]map[int32]kafkaRedrivePos{}
	for _, sub := range subs {
		pos, err := fetchRedrivePos(ctx, adm, KafkaRedriveGroup(sub), topic)
		if err != nil {
			admCl.Close()
			return nil, nil, fmt.Errorf("kafka dead letters: %w", err)
		}
		redriven[sub] = pos
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	admCl.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("kafka dead letters: end offsets of %s: %w", topic, err)
	}
	all := map[int32]int64{}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			all[o.Partition] = o.Offset
		}
		if o.Err == nil && o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	if err := ends.Error(); err != nil {
		return nil, nil, fmt.Errorf("kafka dead letters: end offsets of %s: %w", topic, err)
	}
	if len(want) == 0 {
		return nil, all, nil
	}
	start := map[string]map[int32]kgo.Offset{topic: {}}
	for p := range want {
		start[topic][p] = kgo.NewOffset().AtStart()
	}
	cl, err := kgo.NewClient(append(cfg.clientOpts("dead-letters"), kgo.ConsumePartitions(start))...)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka dead letters: %w", err)
	}
	defer cl.Close()
	var out []DeadLetter
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return out, all, fmt.Errorf("kafka dead letters: %w", err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if !ok || r.Offset >= end {
				return // past the end taken at the start
			}
			if r.Offset+1 >= end {
				delete(want, r.Partition)
			}
			d := kafkaDeadLetter(r)
			if pos, ok := redriven[d.Queue][r.Partition]; ok && pos.gone(r.Offset) {
				return
			}
			out = append(out, d)
		})
	}
	return out, all, nil
}

// kafkaDeadLetter reads a dead-letter record's headers.
func kafkaDeadLetter(r *kgo.Record) DeadLetter {
	d := DeadLetter{}
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderEventID:
			d.Event = SafeText(string(h.Value))
		case HeaderSource:
			d.Source = SafeText(string(h.Value))
		case HeaderDLQSubscription:
			d.Queue = SafeText(string(h.Value))
		case HeaderReason:
			d.Reason = SafeText(string(h.Value))
		case HeaderAttempt:
			d.Deliveries, _ = strconv.ParseInt(string(h.Value), 10, 64)
		}
	}
	return d
}

// deadLettersTimeout bounds a dead-letter read: it runs after the drain,
// when a broker that does not answer must not hold the final read.
const deadLettersTimeout = 30 * time.Second
