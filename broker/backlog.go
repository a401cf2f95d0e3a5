package broker

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A KafkaBacklogReader tells how many records of an events topic a
// consumer group has not committed past yet. It keeps one client between
// calls: a drain asks several times a second, and a client per call was a
// connection and a metadata round trip each time. It is safe for
// concurrent use. The caller should call Close when finished.
type KafkaBacklogReader struct {
	cfg KafkaConfig

	mu sync.Mutex
	cl *kgo.Client // nil until the first call, and after an error
}

// NewKafkaBacklogReader returns a reader for cfg's events topic. It does
// not dial until the first Backlog.
func NewKafkaBacklogReader(cfg KafkaConfig) *KafkaBacklogReader {
	return &KafkaBacklogReader{cfg: cfg.withDefaults()}
}

// Backlog is group's lag, summed over partitions; a group that never
// committed counts everything from the log start. After an error the
// client is dropped, and the next call dials afresh.
func (r *KafkaBacklogReader) Backlog(ctx context.Context, group string) (int64, error) {
	lags, err := r.Lags(ctx, group)
	return sumLags(lags), err
}

// Lags is group's lag on each partition of the events topic, in
// partition order, as [KafkaBacklogReader.Backlog] counts it: what the
// consumer-lag metric of a group shows (kafka-consumer-groups.sh
// --describe's LAG column). After an error the client is dropped, and
// the next call dials afresh.
func (r *KafkaBacklogReader) Lags(ctx context.Context, group string) ([]PartitionLag, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cl == nil {
		cl, err := kgo.NewClient(r.cfg.clientOpts("backlog")...)
		if err != nil {
			return nil, fmt.Errorf("kafka backlog: %w", err)
		}
		r.cl = cl
	}
	lags, err := kafkaLags(ctx, kadm.NewClient(r.cl), r.cfg.Topic, group)
	if err != nil {
		r.cl.Close()
		r.cl = nil
	}
	return lags, err
}

// Close closes the client, if one is open.
func (r *KafkaBacklogReader) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cl != nil {
		r.cl.Close()
		r.cl = nil
	}
}

// A PartitionLag is a consumer group's position on one partition of a
// topic: End is the partition's high-water mark, Committed the offset the
// group committed (the log start when it committed none), and Lag the
// records between them.
type PartitionLag struct {
	Partition      int32
	End, Committed int64
	Lag            int64
}

// sumLags is the total lag over partitions.
func sumLags(lags []PartitionLag) int64 {
	var total int64
	for _, l := range lags {
		total += l.Lag
	}
	return total
}

// kafkaLag is group's lag on topic, summed over partitions.
func kafkaLag(ctx context.Context, adm *kadm.Client, topic, group string) (int64, error) {
	lags, err := kafkaLags(ctx, adm, topic, group)
	return sumLags(lags), err
}

// kafkaLags is group's lag on each partition of topic, in partition
// order; a group that never committed on a partition lags by everything
// from the partition's log start.
func kafkaLags(ctx context.Context, adm *kadm.Client, topic, group string) ([]PartitionLag, error) {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("kafka backlog: end offsets: %w", err)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("kafka backlog: start offsets: %w", err)
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return nil, fmt.Errorf("kafka backlog: committed offsets: %w", err)
	}
	var lags []PartitionLag
	var ferr error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			ferr = o.Err
			return
		}
		from := int64(0)
		if s, ok := starts.Lookup(o.Topic, o.Partition); ok {
			from = s.Offset
		}
		if c, ok := committed.Lookup(o.Topic, o.Partition); ok && c.Err == nil && c.At >= 0 {
			from = c.At
		}
		lags = append(lags, PartitionLag{Partition: o.Partition, End: o.Offset, Committed: from, Lag: max(o.Offset-from, 0)})
	})
	if ferr != nil {
		return nil, fmt.Errorf("kafka backlog: %w", ferr)
	}
	slices.SortFunc(lags, func(a, b PartitionLag) int { return cmp.Compare(a.Partition, b.Partition) })
	return lags, nil
}

// A RabbitBacklogReader tells how many messages wait in a queue, ready
// for delivery. Unacked deliveries are not counted (AMQP does not expose
// them); a drain watches consumer progress for those. It keeps one
// connection between calls (see [KafkaBacklogReader] for why) and is safe
// for concurrent use. The caller should call Close when finished.
type RabbitBacklogReader struct {
	cfg RabbitConfig

	mu   sync.Mutex
	conn *rabbitConn // nil until the first call, and after an error
	ch   *amqp.Channel
	next int // the index in cfg.URLs the next dial starts at
}

// NewRabbitBacklogReader returns a reader for cfg's queues. It does not
// dial until the first Backlog.
func NewRabbitBacklogReader(cfg RabbitConfig) *RabbitBacklogReader {
	return &RabbitBacklogReader{cfg: cfg.withDefaults()}
}

// Backlog is how many messages wait in queue. After an error (a missing queue
// closes the channel, a broken connection everything) the connection is
// dropped, and the next call dials afresh.
func (r *RabbitBacklogReader) Backlog(ctx context.Context, queue string) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn == nil {
		conn, err := dialRabbit(ctx, r.cfg, "backlog", r.next)
		if err != nil {
			return 0, fmt.Errorf("rabbitmq backlog: %w", err)
		}
		ch, err := conn.conn.Channel()
		if err != nil {
			conn.close()
			return 0, fmt.Errorf("rabbitmq backlog: %w", err)
		}
		r.conn, r.ch = conn, ch
	}
	// The declare cannot take ctx; a ctx that ends kills the connection,
	// which ends it.
	stop := context.AfterFunc(ctx, r.conn.kill)
	q, err := r.ch.QueueDeclarePassive(queue, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum})
	if !stop() || err != nil {
		r.closeLocked() // killed by ctx, or the channel is gone
	}
	if err != nil {
		return 0, fmt.Errorf("rabbitmq backlog: inspect %s: %w", queue, err)
	}
	return int64(q.Messages), nil
}

// Close closes the connection, if one is open.
func (r *RabbitBacklogReader) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closeLocked()
}

func (r *RabbitBacklogReader) closeLocked() {
	if r.conn != nil {
		// A node that failed a read is tried last the next time.
		r.next = (r.conn.node + 1) % len(r.cfg.URLs)
		r.conn.close()
		r.conn, r.ch = nil, nil
	}
}
