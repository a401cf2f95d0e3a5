package broker

import (
	"context"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Kafka adapter over franz-go. SetupKafka creates the topics
// (kafka_topology.go), NewKafkaPublisher is the relay's side
// (kafka_publisher.go) and NewKafkaSubscriber a consumer group's side
// (kafka_subscriber.go, its offset commits in kafka_commit.go). Read
// KafkaConfig, KafkaPublisher and KafkaSubscriber first.

// Extra headers a dead-lettered record carries besides HeaderReason and
// HeaderAttempt, so the original can be found and the DLQ record can be
// attributed to the subscription that gave up on it.
const (
	HeaderDLQTopic        = "dlq-original-topic"
	HeaderDLQPartition    = "dlq-original-partition"
	HeaderDLQOffset       = "dlq-original-offset"
	HeaderDLQSubscription = "dlq-subscription"
)

// KafkaConfig says where the events topic is. The zero value of every
// field but Seeds has a usable default.
type KafkaConfig struct {
	// Seeds are bootstrap brokers, host:port. Clients dial whatever the
	// brokers advertise after the first request.
	Seeds []string
	// Topic is the events topic, overriding the default "events". Its
	// dead-letter topic is Topic + ".dlq".
	Topic string
	// Partitions is the events topic's partition count, overriding the
	// default 3. Only SetupKafka reads it.
	Partitions int32
	// DialTimeout bounds one connection attempt, overriding the default
	// 3s, so a refused or black-holed broker is noticed soon.
	DialTimeout time.Duration
	// Logger receives the adapter's and franz-go's warnings, overriding
	// the default slog.Default().
	Logger *slog.Logger
	// SASL, when set, logs every client in as this user with
	// SCRAM-SHA-256, for a listener that asks for it (the intruder's:
	// docs/security.md); unset, a client connects without credentials,
	// as the harness's own do.
	SASL *KafkaSASL
}

// KafkaSASL is a SCRAM-SHA-256 user's credentials.
type KafkaSASL struct {
	User, Password string
}

// DLQTopic is the dead-letter topic of c's events topic.
func (c KafkaConfig) DLQTopic() string { return c.withDefaults().Topic + ".dlq" }

func (c KafkaConfig) withDefaults() KafkaConfig {
	if c.Topic == "" {
		c.Topic = "events"
	}
	if c.Partitions <= 0 {
		c.Partitions = 3
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 3 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// clientOpts are the options every client of c shares.
func (c KafkaConfig) clientOpts(role string) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.Seeds...),
		kgo.ClientID("deliverycheck-" + role),
		kgo.DialTimeout(c.DialTimeout),
		kgo.WithLogger(kgoLogger{c.Logger.With("kafka", role)}),
		// No kgo.AllowAutoTopicCreation: topics are made by SetupKafka
		// with the partition count the scenario asked for.
	}
	if c.SASL != nil {
		auth := scram.Auth{User: c.SASL.User, Pass: c.SASL.Password}
		opts = append(opts, kgo.SASL(auth.AsSha256Mechanism()))
	}
	return opts
}

// kgoLogger sends franz-go's warnings and errors to slog; its info and
// debug output is far too chatty for a run's log.
type kgoLogger struct{ l *slog.Logger }

func (k kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (k kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lv := slog.LevelWarn
	if level == kgo.LogLevelError {
		lv = slog.LevelError
	}
	k.l.Log(context.Background(), lv, msg, keyvals...)
}
