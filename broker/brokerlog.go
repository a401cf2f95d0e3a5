package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The broker's log: what the broker holds of a run's events for every
// subscription, read once after the drain. The final read records each
// message as a row of table broker, so a lost event is placed from the
// history alone: confirmed but absent from the broker's log (the broker's
// loss), or in the broker but never delivered to a subscription.

// LogRecord is one message found in the broker's log.
type LogRecord struct {
	Event, Source string
	// Partition and Offset place it in the Kafka topic.
	Partition, Offset int64
	// Redrive is, for a dead letter a redrive republished to the Kafka
	// topic, the one subscription it is for (HeaderRedriveSubscription,
	// a qualified consumer group): the others commit past it.
	Redrive string
}

// Log is a whole read of the broker's log.
type Log struct {
	// Where is what was read: the events topic (Kafka) or the witness
	// queue (RabbitMQ).
	Where string
	// Detail says in words how much was read.
	Detail  string
	Records []LogRecord
}

// logTimeout bounds a read of the broker's log: it runs after the drain,
// when a broker that does not answer must not hold the final read. A read
// that runs out is an error, and the stages it would have decided stay
// unknown.
const logTimeout = 60 * time.Second

// KafkaLog reads every partition of cfg's events topic from offset 0 to
// its high-water mark as of the call, as Kafka's own system tests search
// the data for acknowledged records, and returns the event id and source
// of each record from its event-id and source headers. A partition whose
// log no longer starts at 0 (records deleted) is an error: what is not
// found there may have been deleted rather than lost.
//
// It reads uncommitted, which is every record while the relay uses no
// transactions. With Kafka transactions it would have to read committed
// and stop at the last stable offset instead: an aborted record is not an
// event the broker holds, and the control record ending a transaction is
// never returned, so the high-water mark is not reached.
func KafkaLog(ctx context.Context, cfg KafkaConfig) (Log, error) {
	ctx, cancel := context.WithTimeout(ctx, logTimeout)
	defer cancel()
	cfg = cfg.withDefaults()
	out := Log{Where: cfg.Topic}
	w := wholeRead{what: "kafka log", client: "log", topic: cfg.Topic}
	err := w.read(ctx, cfg, func(total int64) {
		out.Detail = fmt.Sprintf("%d partitions read from offset 0 to their high-water marks: %d records", w.partitions, total)
		out.Records = make([]LogRecord, 0, total)
	}, func(r *kgo.Record) {
		rec := LogRecord{Partition: int64(r.Partition), Offset: r.Offset}
		for _, h := range r.Headers {
			switch h.Key { // a repeated key: the last wins, as for a delivery
			case HeaderEventID:
				rec.Event = SafeText(string(h.Value))
			case HeaderSource:
				rec.Source = SafeText(string(h.Value))
			case HeaderRedriveSubscription:
				rec.Redrive = SafeText(string(h.Value))
			}
		}
		out.Records = append(out.Records, rec)
	})
	return out, err
}

// wholeRead reads every partition of a topic from offset 0 to its end as
// of the call: the high-water marks read uncommitted ([KafkaLog]), or the
// last stable offsets read committed ([KafkaCommittedLog]). A partition
// whose log no longer starts at 0 is an error: what is not found there
// may have been deleted rather than lost.
type wholeRead struct {
	what   string // the errors' prefix, e.g. "kafka log"
	client string // the clients' name
	topic  string
	// committed reads read_committed to the last stable offsets. It
	// keeps control records, which read passes on (the caller skips
	// them): the records of aborted transactions are never returned, so
	// the last stable offset can only be seen reached through the
	// markers that end transactions.
	committed bool
	// control keeps control records in a read_uncommitted read too (the
	// caller skips them): a topic written in transactions ends each
	// partition with a marker, the only record at the last offset before
	// its high-water mark.
	control bool

	partitions int // the topic's, once the offsets are listed
	// ends are the offsets each partition is read to, once listed.
	ends map[int32]int64
}

// read lists the offsets, calls listed with the sum of the ends, then
// each with every record before its partition's end.
func (w *wholeRead) read(ctx context.Context, cfg KafkaConfig, listed func(total int64), each func(*kgo.Record)) error {
	admin, err := kgo.NewClient(cfg.clientOpts(w.client)...)
	if err != nil {
		return fmt.Errorf("%s: %w", w.what, err)
	}
	adm := kadm.NewClient(admin)
	starts, err := adm.ListStartOffsets(ctx, w.topic)
	var ends kadm.ListedOffsets
	if err == nil {
		if w.committed {
			ends, err = adm.ListCommittedOffsets(ctx, w.topic)
		} else {
			ends, err = adm.ListEndOffsets(ctx, w.topic)
		}
	}
	admin.Close()
	if err == nil {
		err = errors.Join(starts.Error(), ends.Error())
	}
	if err != nil {
		return fmt.Errorf("%s: offsets of %s: %w", w.what, w.topic, err)
	}
	endName, isolation := "high-water marks", kgo.ReadUncommitted()
	if w.committed {
		endName, isolation = "last stable offsets", kgo.ReadCommitted()
	}
	want := map[int32]int64{} // partition → its end, for those not read to it yet
	var total int64
	var errs []error
	w.ends = map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		w.partitions++
		w.ends[o.Partition] = o.Offset
		if s, ok := starts.Lookup(o.Topic, o.Partition); ok && s.Offset > 0 {
			errs = append(errs, fmt.Errorf("partition %d starts at offset %d: records before it were deleted", o.Partition, s.Offset))
		}
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
			total += o.Offset
		}
	})
	if w.partitions == 0 {
		return fmt.Errorf("%s: topic %s has no partitions", w.what, w.topic)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s: %s: %w", w.what, w.topic, err)
	}
	listed(total)
	if len(want) == 0 {
		return nil
	}
	from := map[string]map[int32]kgo.Offset{w.topic: {}}
	for p := range want {
		from[w.topic][p] = kgo.NewOffset().At(0)
	}
	opts := append(cfg.clientOpts(w.client), kgo.ConsumePartitions(from), kgo.FetchIsolationLevel(isolation))
	if w.committed || w.control {
		opts = append(opts, kgo.KeepControlRecords())
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("%s: %w", w.what, err)
	}
	defer cl.Close()
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%s: %d of %d partitions of %s not read to their %s: %w", w.what, len(want), w.partitions, w.topic, endName, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if !ok || r.Offset >= end {
				return // past the end read before: not written before the drain ended
			}
			each(r)
			if r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
	return nil
}

// RabbitWitnessQueue is the name of the witness queue of exchange: a
// quorum queue bound to it like every subscription's queue and never
// consumed during the run, so after the drain it holds every message the
// exchange routed.
func RabbitWitnessQueue(exchange string) string { return exchange + ".witness" }

// RabbitLog reads, without removing anything, every message in cfg's
// witness queue ([RabbitWitnessQueue], declared by [SetupRabbitMQ] when
// cfg.Witness is set): it takes them unacked and closes the channel,
// which puts them back, so a final read that is retried reads them again.
// A message's event id is its message_id, or its event-id header.
func RabbitLog(ctx context.Context, cfg RabbitConfig) (Log, error) {
	ctx, cancel := context.WithTimeout(ctx, logTimeout)
	defer cancel()
	cfg = cfg.withDefaults()
	q := RabbitWitnessQueue(cfg.Exchange)
	out := Log{Where: q}
	conn, err := dialRabbit(ctx, cfg, "log", 0)
	if err != nil {
		return out, fmt.Errorf("rabbitmq log: %w", err)
	}
	defer conn.close()
	// Get and the declare are RPCs without a context; closing the socket
	// when ctx ends makes a stuck one return.
	stop := context.AfterFunc(ctx, conn.kill)
	defer stop()
	ch, err := conn.conn.Channel()
	if err != nil {
		return out, fmt.Errorf("rabbitmq log: %w", err)
	}
	defer ch.Close()
	st, err := ch.QueueDeclarePassive(q, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum})
	if err != nil {
		return out, fmt.Errorf("rabbitmq log: inspect %s: %w", q, rabbitCtxErr(ctx, err))
	}
	if st.Consumers > 0 {
		return out, fmt.Errorf("rabbitmq log: %s has %d consumers: it is not a witness of what was routed", q, st.Consumers)
	}
	out.Records = make([]LogRecord, 0, st.Messages)
	for {
		m, ok, err := ch.Get(q, false)
		if err != nil {
			return out, fmt.Errorf("rabbitmq log: get from %s after %d of %d messages: %w", q, len(out.Records), st.Messages, rabbitCtxErr(ctx, err))
		}
		if !ok {
			break
		}
		rec := LogRecord{Event: SafeText(m.MessageId)}
		if id, ok := m.Headers[HeaderEventID].(string); ok && rec.Event == "" {
			rec.Event = SafeText(id)
		}
		source, _ := m.Headers[HeaderSource].(string)
		rec.Source = SafeText(source)
		out.Records = append(out.Records, rec)
	}
	if len(out.Records) < st.Messages {
		// Nothing consumes the witness, so what it held when inspected
		// is all still there.
		return out, fmt.Errorf("rabbitmq log: %s held %d messages, only %d could be read", q, st.Messages, len(out.Records))
	}
	out.Detail = fmt.Sprintf("witness queue read whole: %d messages", len(out.Records))
	return out, nil
}

// rabbitCtxErr names ctx's end as the cause of err when ctx ended (the
// connection was killed for it), since amqp091 only says the connection
// closed.
func rabbitCtxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil && !strings.Contains(err.Error(), ctx.Err().Error()) {
		return fmt.Errorf("%w (%w)", err, ctx.Err())
	}
	return err
}
