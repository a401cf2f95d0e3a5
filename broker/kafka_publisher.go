package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaPublishMode chooses between the correct publisher and its
// known-bad sibling.
type KafkaPublishMode string

const (
	// KafkaConfirmed waits for the broker's acks=all answer on every
	// record, with the idempotent producer (the correct relay).
	KafkaConfirmed KafkaPublishMode = "confirmed"
	// KafkaUnconfirmed is known-bad: acks=0, fire and forget. Publish
	// returns as soon as the records are handed to the client, so a broker
	// crash (or a relay crash) loses what had not reached the log.
	KafkaUnconfirmed KafkaPublishMode = "unconfirmed"
	// KafkaLeaderAck is known-bad: acks=1. The leader confirms a record
	// once it is in its own log, before any follower has it, so a leader
	// that dies or is cut off right after confirming takes the record
	// with it when a follower takes over: confirmed, then gone. Only a
	// replicated Kafka shows it.
	KafkaLeaderAck KafkaPublishMode = "leader-ack"
)

// KafkaPublisherOptions tune a KafkaPublisher. The zero value is the
// correct, confirmed publisher.
type KafkaPublisherOptions struct {
	// Mode is KafkaConfirmed or KafkaUnconfirmed, overriding the default
	// KafkaConfirmed.
	Mode KafkaPublishMode
	// DeliveryTimeout bounds how long a record may wait for its answer
	// (franz-go's RecordDeliveryTimeout), overriding the default 10s. It
	// bounds Publish even when its ctx has no deadline.
	DeliveryTimeout time.Duration
	// Linger is how long the client waits to fill a batch, overriding the
	// default 0 (send at once; Publish already hands over whole batches).
	Linger time.Duration
	// NotIdempotent turns the idempotent producer off in KafkaConfirmed
	// mode (acks=all still). An idempotent producer first asks for a
	// producer id, which needs a right on the cluster or WRITE on some
	// topic: a user with none would be refused that
	// (CLUSTER_AUTHORIZATION_FAILED) before any topic's ACL is asked. The
	// intruder's publisher sets it, so its refusal is the topic's.
	NotIdempotent bool
	// MetadataMinAge is how soon the client may ask for metadata again,
	// overriding franz-go's 5s. A client refused a topic
	// (TOPIC_AUTHORIZATION_FAILED) fails each record only after its next
	// metadata request, so the intruder's sets it short.
	MetadataMinAge time.Duration
}

// kafkaMaxBuffered caps records a publisher holds unsent (franz-go's
// default, made explicit because the unconfirmed mode checks it).
const kafkaMaxBuffered = 10000

// KafkaPublisher implements Publisher over one franz-go producer client.
// It is safe for concurrent use.
//
// In KafkaConfirmed mode the record key is the event's aggregate id, so
// one aggregate's events share a partition and keep their order; the
// producer is idempotent with acks=all, so the client's own retries never
// duplicate or reorder a record. What it cannot make exact is a record
// whose answer never came (a partition, a broker crash, a timeout): such
// a record is reported as ErrUnconfirmed, and republishing it may store it
// twice. That is the relay's duplicate the inbox has to absorb.
type KafkaPublisher struct {
	cfg  KafkaConfig
	opts KafkaPublisherOptions
	cl   *kgo.Client
}

// NewKafkaPublisher returns a publisher for cfg's events topic. It does
// not dial until the first Publish. The caller should call Close when
// finished.
func NewKafkaPublisher(cfg KafkaConfig, opts KafkaPublisherOptions) (*KafkaPublisher, error) {
	cfg = cfg.withDefaults()
	if len(cfg.Seeds) == 0 {
		return nil, errors.New("kafka publisher: no seed brokers")
	}
	if opts.Mode == "" {
		opts.Mode = KafkaConfirmed
	}
	if opts.DeliveryTimeout <= 0 {
		opts.DeliveryTimeout = 10 * time.Second
	}
	kopts := cfg.clientOpts("relay")
	kopts = append(kopts,
		kgo.DefaultProduceTopic(cfg.Topic),
		kgo.ProducerLinger(opts.Linger),
		kgo.RecordDeliveryTimeout(opts.DeliveryTimeout),
		kgo.ProduceRequestTimeout(min(opts.DeliveryTimeout, 10*time.Second)),
		kgo.MaxBufferedRecords(kafkaMaxBuffered),
	)
	if opts.MetadataMinAge > 0 {
		kopts = append(kopts, kgo.MetadataMinAge(opts.MetadataMinAge))
	}
	switch opts.Mode {
	case KafkaConfirmed:
		if opts.NotIdempotent {
			kopts = append(kopts, kgo.DisableIdempotentWrite())
		}
		kopts = append(kopts,
			kgo.RequiredAcks(kgo.AllISRAcks()),
			// By default an idempotent client refuses to fail a record
			// whose request is in flight (the broker may have written
			// it), so a partitioned broker keeps Publish's records, and
			// every later record of their partitions, buffered until the
			// broker answers: the delivery timeout and ctx would not
			// bound anything. Allowing cancellation fails them with the
			// outcome unknown, which is exactly what ErrUnconfirmed
			// says; the price, a duplicate when the relay republishes,
			// is one the pipeline already pays for lost confirms.
			kgo.AllowIdempotentProduceCancellation(),
		)
	case KafkaUnconfirmed:
		kopts = append(kopts,
			kgo.RequiredAcks(kgo.NoAck()),
			// franz-go rejects acks=0 with idempotence: the broker
			// never answers, so there is no sequence to track.
			kgo.DisableIdempotentWrite(),
		)
	case KafkaLeaderAck:
		kopts = append(kopts,
			kgo.RequiredAcks(kgo.LeaderAck()),
			// The idempotent producer requires acks=all.
			kgo.DisableIdempotentWrite(),
		)
	default:
		return nil, fmt.Errorf("kafka publisher: unknown mode %q (valid: %s, %s, %s)", opts.Mode, KafkaConfirmed, KafkaUnconfirmed, KafkaLeaderAck)
	}
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return nil, fmt.Errorf("kafka publisher: %w", err)
	}
	return &KafkaPublisher{cfg: cfg, opts: opts, cl: cl}, nil
}

// Mode is the publisher's mode.
func (p *KafkaPublisher) Mode() KafkaPublishMode { return p.opts.Mode }

// Publish implements Publisher. It returns when every record has its
// answer or ctx ends, whichever is first; records still unanswered then
// are ErrUnconfirmed (their fate is decided later, and nobody will be
// told). A record the broker rejected for good (too large, not
// authorized, ...) gets that error, not ErrUnconfirmed.
//
// In KafkaUnconfirmed mode Publish returns nil for every record the client
// accepted into its buffer, without waiting for anything to be sent.
func (p *KafkaPublisher) Publish(ctx context.Context, evs []Event) []error {
	errs := make([]error, len(evs))
	if len(evs) == 0 {
		return errs
	}
	if p.opts.Mode == KafkaUnconfirmed {
		for i, e := range evs {
			if err := ctx.Err(); err != nil {
				errs[i] = fmt.Errorf("kafka publish: not handed off: %w", err)
				continue
			}
			if p.cl.BufferedProduceRecords() >= kafkaMaxBuffered {
				errs[i] = errors.New("kafka publish: not handed off: producer buffer full")
				continue
			}
			// Not ctx: a record's context also cancels it after it was
			// buffered, and the caller's ctx ends as soon as Publish
			// returns. TryProduce never blocks; a record that loses the
			// race for the last buffer slot fails in its promise.
			p.cl.TryProduce(context.Background(), p.record(e), func(r *kgo.Record, err error) {
				if err != nil {
					// Fire and forget: the caller has moved on; this
					// is the loss the known-bad variant exists to show.
					p.cfg.Logger.Debug("kafka unconfirmed publish failed", "event", string(r.Key), "err", err)
				}
			})
		}
		return errs
	}

	if err := ctx.Err(); err != nil {
		// Nothing was handed over: a definite failure, not an unknown.
		for i := range errs {
			errs[i] = fmt.Errorf("kafka publish: not sent: %w", err)
		}
		return errs
	}
	type result struct {
		i   int
		err error
	}
	// Buffered for every record: promises that fire after Publish gave
	// up must not block the client's producer goroutine.
	done := make(chan result, len(evs))
	for i, e := range evs {
		p.cl.Produce(ctx, p.record(e), func(_ *kgo.Record, err error) { done <- result{i, err} })
	}
	answered := make([]bool, len(evs))
	for n := 0; n < len(evs); n++ {
		select {
		case r := <-done:
			answered[r.i] = true
			errs[r.i] = classifyKafkaProduceErr(r.err)
		case <-ctx.Done():
			for i := range evs {
				if !answered[i] {
					errs[i] = fmt.Errorf("kafka publish: %w: %w", ErrUnconfirmed, ctx.Err())
				}
			}
			return errs
		}
	}
	return errs
}

// Held implements Holder: the records in the client's buffer, sent to
// no broker yet (or, acks=all, sent and not answered). An unconfirmed
// publisher's records stay there while no broker is reachable, until
// they are sent or their delivery timeout fails them.
func (p *KafkaPublisher) Held() int64 { return p.cl.BufferedProduceRecords() }

// record renders e as a Kafka record: key = aggregate id, value = payload,
// identity in headers (sorted, so equal events give equal records), then
// its Extra headers (sorted too; Kafka keeps header values as bytes, so
// invalid UTF-8 arrives as sent).
func (p *KafkaPublisher) record(e Event) *kgo.Record {
	hs := kafkaRecordHeaders(e.Headers())
	for _, k := range e.ExtraNames() {
		hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(e.Extra[k])})
	}
	return &kgo.Record{Topic: p.cfg.Topic, Key: []byte(e.Key), Value: e.Payload, Headers: hs}
}

func kafkaRecordHeaders(h map[string]string) []kgo.RecordHeader {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]kgo.RecordHeader, 0, len(keys))
	for _, k := range keys {
		out = append(out, kgo.RecordHeader{Key: k, Value: []byte(h[k])})
	}
	return out
}

// classifyKafkaProduceErr maps a produce promise's error to Publish's contract.
// Only a non-retriable broker error is a definite "not written"; every
// other failure (timeouts, cancellation, dropped connections, retries
// exhausted) can follow a write whose answer was lost, so it is unknown.
func classifyKafkaProduceErr(err error) error {
	if err == nil {
		return nil
	}
	var ke *kerr.Error
	if errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) {
		return fmt.Errorf("kafka publish: %w: %w", ErrRefused, err)
	}
	if errors.As(err, &ke) && !ke.Retriable {
		return fmt.Errorf("kafka publish: rejected: %w", err)
	}
	return fmt.Errorf("kafka publish: %w: %w", ErrUnconfirmed, err)
}

// Close implements Publisher. An unconfirmed publisher first gives its
// buffered records up to 5s to be sent, as a fire-and-forget producer
// shutting down cleanly would; a confirmed publisher has nothing
// outstanding that anyone waits for.
func (p *KafkaPublisher) Close() error {
	if p.opts.Mode == KafkaUnconfirmed {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = p.cl.Flush(ctx)
		cancel()
	}
	p.cl.Close()
	return nil
}
