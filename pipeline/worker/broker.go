package worker

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/pipeline/consumer"
)

// Broker says which broker a run uses and how its topology is named.
type Broker struct {
	Kind string `json:"kind"` // "kafka" or "rabbitmq"
	// URL is where the broker's nodes are, comma-separated, one per node
	// of a cluster: Kafka seeds (host:port) or AMQP URLs (see URLs).
	URL string `json:"url"`
	// Namespace prefixes the topic, exchange, queues and consumer groups,
	// so runs sharing a broker never see each other's events.
	Namespace     string   `json:"namespace"`
	Partitions    int32    `json:"partitions"`
	Subscriptions []string `json:"subscriptions"`
	Unbound       []string `json:"unbound"`
	DeliveryLimit int      `json:"delivery_limit"`
	// Prefetch is a RabbitMQ consumer's prefetch window; 0 keeps
	// RabbitConfig's default.
	Prefetch int `json:"prefetch,omitempty"`
	// QueueType is the RabbitMQ queue type, "" for quorum.
	QueueType string `json:"queue_type,omitempty"`
	// OffsetReset is where a Kafka consumer group with no committed
	// offset starts (broker.OffsetEarliest, the default, or
	// broker.OffsetLatest).
	OffsetReset string `json:"offset_reset,omitempty"`
}

// Qualify names a subscription's consumer group (Kafka) or queue
// (RabbitMQ).
func (b Broker) Qualify(sub string) string { return b.Namespace + "." + sub }

// Events names the topic (Kafka) or exchange (RabbitMQ) every event is
// published to.
func (b Broker) Events() string { return b.Namespace + ".events" }

// KafkaDLQ names the Kafka dead-letter topic.
func (b Broker) KafkaDLQ() string { return b.Kafka().DLQTopic() }

func (b Broker) qualifyAll(subs []string) []string {
	out := make([]string, len(subs))
	for i, s := range subs {
		out[i] = b.Qualify(s)
	}
	return out
}

// URLs are the broker's nodes' addresses, as URL lists them: Kafka seed
// brokers, or AMQP URLs a RabbitMQ client fails over between.
func (b Broker) URLs() []string { return strings.Split(b.URL, ",") }

// Kafka is the client configuration of b's Kafka.
func (b Broker) Kafka() broker.KafkaConfig {
	return broker.KafkaConfig{Seeds: b.URLs(), Topic: b.Events(), Partitions: b.Partitions}
}

func (b Broker) rabbit() broker.RabbitConfig {
	return broker.RabbitConfig{
		URLs: b.URLs(), Exchange: b.Events(),
		Subscriptions: b.qualifyAll(b.Subscriptions), Unbound: b.qualifyAll(b.Unbound),
		DeliveryLimit: b.DeliveryLimit, Prefetch: b.Prefetch, QueueType: b.QueueType,
	}
}

// SetupBroker creates b's topic or exchange and queues.
func SetupBroker(ctx context.Context, b Broker) error {
	switch b.Kind {
	case "kafka":
		return broker.SetupKafka(ctx, b.Kafka())
	case "rabbitmq":
		cfg := b.rabbit()
		cfg.Witness = true // for Log
		return broker.SetupRabbitMQ(ctx, cfg)
	}
	return fmt.Errorf("worker: unknown broker %q (valid: kafka, rabbitmq)", b.Kind)
}

// Witness names the RabbitMQ witness queue SetupBroker declares, which
// Log reads.
func (b Broker) Witness() string { return broker.RabbitWitnessQueue(b.Events()) }

// Log reads what b holds of the run's events for every subscription:
// the whole events topic (Kafka) or the witness queue (RabbitMQ).
func (b Broker) Log(ctx context.Context) (broker.Log, error) {
	switch b.Kind {
	case "kafka":
		return broker.KafkaLog(ctx, b.Kafka())
	case "rabbitmq":
		return broker.RabbitLog(ctx, b.rabbit())
	}
	return broker.Log{}, fmt.Errorf("worker: unknown broker %q (valid: kafka, rabbitmq)", b.Kind)
}

// DeadLetters reads what b's dead-letter queues (RabbitMQ) or topic
// (Kafka) hold, each attributed to the subscription, without the
// namespace, it was dead-lettered from.
func (b Broker) DeadLetters(ctx context.Context) ([]broker.DeadLetter, error) {
	var out []broker.DeadLetter
	var err error
	switch b.Kind {
	case "kafka":
		out, err = broker.KafkaDeadLetters(ctx, b.Kafka())
	case "rabbitmq":
		out, err = broker.RabbitDeadLetters(ctx, b.rabbit())
	default:
		return nil, fmt.Errorf("worker: unknown broker %q (valid: kafka, rabbitmq)", b.Kind)
	}
	for i := range out {
		out[i].Queue = strings.TrimPrefix(out[i].Queue, b.Namespace+".")
	}
	return out, err
}

// DeadLetterCount is how many messages sub's dead-letter queue holds
// ready (RabbitMQ; Kafka's redrive is not yet written).
func (b Broker) DeadLetterCount(ctx context.Context, sub string) (int, error) {
	if b.Kind != "rabbitmq" {
		return 0, fmt.Errorf("worker: dead-letter count on %s is not yet written (RabbitMQ only)", b.Kind)
	}
	r, err := broker.OpenRabbitRedrive(ctx, b.rabbit(), b.Qualify(sub))
	if err != nil {
		return 0, err
	}
	defer r.Close()
	return r.Count(ctx)
}

// PurgeDLQ empties sub's dead-letter queue and returns how many messages
// it removed (RabbitMQ; Kafka's purge is not yet written).
func (b Broker) PurgeDLQ(ctx context.Context, sub string) (int, error) {
	if b.Kind != "rabbitmq" {
		return 0, fmt.Errorf("worker: purge on %s is not yet written (RabbitMQ only)", b.Kind)
	}
	return broker.RabbitPurgeDLQ(ctx, b.rabbit(), b.Qualify(sub))
}

// A BacklogReader sums, over every subscription of a broker, what the
// broker still holds for it, over one connection kept between reads. The
// caller should call Close when finished.
type BacklogReader struct {
	b      Broker
	kafka  *broker.KafkaBacklogReader
	rabbit *broker.RabbitBacklogReader
}

// NewBacklogReader returns a reader for b. It does not dial until the
// first Backlog.
func NewBacklogReader(b Broker) (*BacklogReader, error) {
	r := &BacklogReader{b: b}
	switch b.Kind {
	case "kafka":
		r.kafka = broker.NewKafkaBacklogReader(b.Kafka())
	case "rabbitmq":
		r.rabbit = broker.NewRabbitBacklogReader(b.rabbit())
	default:
		return nil, fmt.Errorf("worker: unknown broker %q (valid: kafka, rabbitmq)", b.Kind)
	}
	return r, nil
}

// Backlog is the total over every subscription.
func (r *BacklogReader) Backlog(ctx context.Context) (int64, error) {
	var total int64
	for _, sub := range r.b.Subscriptions {
		var n int64
		var err error
		if r.kafka != nil {
			n, err = r.kafka.Backlog(ctx, r.b.Qualify(sub))
		} else {
			n, err = r.rabbit.Backlog(ctx, r.b.Qualify(sub))
		}
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// Close closes the reader's connection.
func (r *BacklogReader) Close() {
	if r.kafka != nil {
		r.kafka.Close()
	}
	if r.rabbit != nil {
		r.rabbit.Close()
	}
}

type publisherCloser = broker.Publisher

// openPublisher opens a publisher in mode "confirmed", "unconfirmed",
// "unroutable" or "transient" (RabbitMQ only; on Kafka the same as
// confirmed, which has no mandatory flag to forget nor messages to keep
// in memory), or "leader-ack" (Kafka only).
func openPublisher(ctx context.Context, b Broker, mode string) (broker.Publisher, error) {
	switch b.Kind {
	case "kafka":
		m := broker.KafkaConfirmed
		switch mode {
		case "unconfirmed":
			m = broker.KafkaUnconfirmed
		case "leader-ack":
			m = broker.KafkaLeaderAck
		}
		return broker.NewKafkaPublisher(b.Kafka(), broker.KafkaPublisherOptions{Mode: m})
	case "rabbitmq":
		m, err := broker.ParseRabbitPublishMode(mode)
		if err != nil {
			return nil, err
		}
		return broker.NewRabbitPublisher(b.rabbit(), m)
	}
	return nil, fmt.Errorf("worker: unknown broker %q", b.Kind)
}

// openSubscriber opens the subscriber of consumer c's subscription. On
// Kafka, c's variant chooses how it commits (the known-bad auto-commit
// and commit-on-revoke are the subscriber's), and every change of the
// partitions it owns is recorded in rec as an assign op per partition.
func openSubscriber(ctx context.Context, b Broker, c consumer.Config, rec *history.Recorder) (broker.Subscriber, error) {
	sub := c.Subscription
	switch b.Kind {
	case "kafka":
		return broker.NewKafkaSubscriber(b.Kafka(), b.Qualify(sub), broker.KafkaSubscriberOptions{
			// A short session, so a crashed consumer's partitions move
			// on quickly (the local broker allows sessions down to 1s).
			SessionTimeout: 2 * time.Second,
			OffsetReset:    b.OffsetReset,
			AutoCommit:     c.Variant == consumer.AutoCommit,
			CommitOnRevoke: c.Variant == consumer.CommitOnRevoke,
			OnAssign:       assignRecorder(rec, sub),
		})
	case "rabbitmq":
		return broker.NewRabbitSubscriber(b.rabbit(), b.Qualify(sub))
	}
	return nil, fmt.Errorf("worker: unknown broker %q", b.Kind)
}

// assignRecorder records a Kafka subscriber's changes of ownership as
// assign ops (docs/history.md, "Assignments"): one per partition, all of
// one change in one write. A failure to record sticks in the recorder,
// whose next record (the consumer's) returns it and stops the worker.
func assignRecorder(rec *history.Recorder, sub string) func(detail, topic string, partitions []int32) {
	return func(detail, topic string, partitions []int32) {
		es := make([]history.Entry, len(partitions))
		for i, p := range partitions {
			es[i] = history.Entry{Type: history.OK, F: history.Assign, Value: history.Value{
				Consumer: sub, Topic: topic, Partition: int64(p), Detail: detail,
			}}
		}
		_ = rec.RecordAll(es)
	}
}
