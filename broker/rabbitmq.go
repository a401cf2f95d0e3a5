package broker

// RabbitMQ adapter: a Publisher and a Subscriber over amqp091-go.
//
// The topology is declared in rabbitmq_topology.go, connections and
// reconnection are in rabbitmq_session.go, the publisher in
// rabbitmq_publisher.go, the subscriber in rabbitmq_subscriber.go and its
// acks in rabbitmq_acks.go.

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"
)

// ErrStaleDelivery means a delivery came from a channel that has since
// closed (the connection dropped and the subscriber reconnected). Its
// delivery tag means nothing on the new channel, so Ack, Retry and
// DeadLetter do nothing: the broker has already put the message back and
// will deliver it again (with a higher Attempt).
var ErrStaleDelivery = errors.New("broker: rabbitmq delivery is from a closed channel")

// ErrNacked means the broker answered a publish with basic.nack. It is
// always returned wrapped together with [ErrUnconfirmed]: RabbitMQ nacks a
// message routed to several queues when any one of them refuses it, while
// the others may keep it, so a nack does not prove the event is absent.
var ErrNacked = errors.New("broker: rabbitmq nacked the publish")

// errRabbitClosed is returned by a Publisher or Subscriber after Close.
var errRabbitClosed = errors.New("broker: rabbitmq client closed")

// RabbitPublishMode selects how a RabbitPublisher publishes. The values
// are the relay variant names, so a scenario's variant maps onto a mode.
type RabbitPublishMode string

const (
	// RabbitConfirmed is the correct mode: publisher confirms, mandatory
	// publishes with returns handled, persistent messages.
	RabbitConfirmed RabbitPublishMode = "confirmed"
	// RabbitUnconfirmed is known-bad: no confirm mode; Publish reports
	// success once the message is handed to the connection, so a broker
	// crash loses what it had not yet stored.
	RabbitUnconfirmed RabbitPublishMode = "unconfirmed"
	// RabbitUnroutable is known-bad: confirms but no mandatory flag. A
	// message no queue is bound for is acked by the broker and dropped,
	// and Publish reports success.
	RabbitUnroutable RabbitPublishMode = "unroutable"
	// RabbitTransient is known-bad: confirmed and mandatory, but not
	// persistent (delivery mode 1). A classic queue keeps such a message
	// in memory only, so a broker restart drops it although the broker
	// confirmed it. (A quorum queue stores every message: only a classic
	// queue shows it.)
	RabbitTransient RabbitPublishMode = "transient"
)

// ParseRabbitPublishMode checks a mode name.
func ParseRabbitPublishMode(s string) (RabbitPublishMode, error) {
	switch m := RabbitPublishMode(s); m {
	case RabbitConfirmed, RabbitUnconfirmed, RabbitUnroutable, RabbitTransient:
		return m, nil
	}
	return "", fmt.Errorf("broker: unknown rabbitmq publish mode %q (valid: confirmed, unconfirmed, unroutable)", s)
}

// RabbitConfig says where the broker is and how the topology looks. The
// zero value of every field but URLs and Subscriptions has a default.
type RabbitConfig struct {
	// URLs are the amqp:// URLs, with credentials and vhost, of the
	// broker's nodes: one for a single broker, every node's for a
	// cluster. A connection goes to the first that answers, trying each
	// in turn, as RabbitMQ's own clients do with an address list; a
	// client that lost its connection starts with the node after the
	// one it lost (see [rabbitSession]), so killing the node a client
	// was on moves it to another.
	URLs []string
	// Exchange is the fanout exchange events are published to, overriding
	// the default "events". Its dead-letter exchange is Exchange+".dlx".
	Exchange string
	// Subscriptions names one quorum queue each; each gets every event.
	Subscriptions []string
	// Unbound lists subscriptions whose queue (and DLQ) is declared but
	// NOT bound to the exchange: the misconfiguration the known-bad
	// `unroutable` relay is exposed by. Must be a subset of Subscriptions.
	//
	// Note that mandatory publishing only detects a message that reaches
	// no queue at all; with one subscription unbound and another bound,
	// even the confirmed publisher cannot tell (AMQP does not say how many
	// queues a message reached), and only the checker sees the loss.
	Unbound []string
	// Witness makes SetupRabbitMQ declare the witness queue
	// ([RabbitWitnessQueue]) too: bound like every subscription, never
	// consumed, so [RabbitLog] can read after the drain what the exchange
	// routed. A publisher then never gets a message returned as
	// unroutable, since the witness is always bound.
	Witness bool
	// DeliveryLimit is each subscription queue's x-delivery-limit,
	// overriding the default 5. RabbitMQ dead-letters a message once it has
	// been returned (nack with requeue, or a consumer channel closing with
	// it unacked) more than DeliveryLimit times, so it is delivered at most
	// DeliveryLimit+1 times.
	DeliveryLimit int
	// Prefetch is the subscriber's QoS prefetch count (unacked deliveries
	// in flight per subscriber), overriding DefaultPrefetch.
	Prefetch int
	// QueueType is the subscriptions' queue type: "" or "quorum" (the
	// correct one, see the topology's comment), or "classic": durable,
	// but a message published non-persistent (RabbitTransient) is kept
	// in memory only and lost on a restart, and the broker enforces no
	// delivery limit. The witness queue follows it, so such a loss reads
	// as the broker's.
	QueueType string
	// Heartbeat is the AMQP heartbeat interval, overriding the default 5s.
	// A peer that goes silent (partition, paused broker) is declared dead
	// after about two intervals, which bounds how long a confirm can hang.
	Heartbeat time.Duration
	// DialTimeout bounds one connection attempt (TCP, AMQP handshake and
	// channel setup), overriding the default 5s.
	DialTimeout time.Duration
	// ReconnectMin and ReconnectMax bound the backoff between connection
	// attempts (full jitter, doubling), overriding the defaults 50ms and 2s.
	ReconnectMin, ReconnectMax time.Duration
	// Logger receives connection events, overriding slog.Default().
	Logger *slog.Logger
}

// DefaultPrefetch is a RabbitMQ subscriber's prefetch window unless
// RabbitConfig.Prefetch says otherwise.
const DefaultPrefetch = 32

func (c RabbitConfig) withDefaults() RabbitConfig {
	if c.Exchange == "" {
		c.Exchange = "events"
	}
	if c.DeliveryLimit == 0 {
		c.DeliveryLimit = 5
	}
	if c.Prefetch == 0 {
		c.Prefetch = DefaultPrefetch
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = 5 * time.Second
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.ReconnectMin == 0 {
		c.ReconnectMin = 50 * time.Millisecond
	}
	if c.ReconnectMax == 0 {
		c.ReconnectMax = 2 * time.Second
	}
	if c.ReconnectMax < c.ReconnectMin {
		c.ReconnectMax = c.ReconnectMin
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c RabbitConfig) validate() error {
	if len(c.URLs) == 0 {
		return errors.New("broker: rabbitmq config: no URL")
	}
	for i, u := range c.URLs {
		if u == "" {
			return fmt.Errorf("broker: rabbitmq config: URL %d of %d is empty", i+1, len(c.URLs))
		}
	}
	if c.QueueType != "" && c.QueueType != "quorum" && c.QueueType != "classic" {
		return fmt.Errorf("broker: rabbitmq config: queue type %q (want quorum or classic)", c.QueueType)
	}
	if c.DeliveryLimit < 0 || c.Prefetch < 0 || c.Prefetch > 65535 {
		return fmt.Errorf("broker: rabbitmq config: delivery limit %d and prefetch %d must be positive (prefetch at most 65535)", c.DeliveryLimit, c.Prefetch)
	}
	if err := validName("exchange", c.Exchange); err != nil {
		return err
	}
	for _, s := range c.Subscriptions {
		if err := validName("subscription", RabbitDeadLetterQueue(s)); err != nil {
			return err
		}
	}
	for _, u := range c.Unbound {
		if !slices.Contains(c.Subscriptions, u) {
			return fmt.Errorf("broker: rabbitmq config: unbound %q is not a subscription", u)
		}
	}
	return nil
}

// validName checks an exchange or queue name against AMQP's limits.
func validName(what, name string) error {
	if name == "" || len(name) > 255 {
		return fmt.Errorf("broker: rabbitmq config: %s name %q must be 1 to 255 bytes", what, name)
	}
	return nil
}
