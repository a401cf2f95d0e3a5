package broker

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The transactional stage's side of Kafka (docs/history.md,
// "Transactional stage"): the headers an output record carries, the
// read_committed reads of the output topics (during the run and after
// the drain), their offsets, and what the drain waits for. The processor
// itself is package pipeline/processor.

// Headers an output record of the transactional stage carries besides
// HeaderEventID and HeaderSource: the position, in the input topic, of
// the input it was made from. Exactly-once is per input record, so a
// reader must be able to name the input of everything it reads.
const (
	HeaderInputPartition = "input-partition"
	HeaderInputOffset    = "input-offset"
)

// ClientOpts are the options every client of c shares, for a component
// outside this package that builds its own client (the transactional
// processor); role names it in the broker's logs and in ours.
func (c KafkaConfig) ClientOpts(role string) []kgo.Opt {
	return c.withDefaults().clientOpts(role)
}

// OutputRecord is one record of an output topic of the stage, as a
// reader found it.
type OutputRecord struct {
	Topic                       string
	Partition, Offset           int64
	Event, Source               string
	InputPartition, InputOffset int64
	// Control is a transaction marker (commit or abort), which a read
	// that keeps control records returns; it carries no event.
	Control bool
	// HasInput: both input headers are there and parse. Without them
	// InputPartition and InputOffset are zero, which names no input.
	HasInput bool
}

// ParseOutputRecord reads r's position and the headers naming its input.
// A header that is missing or does not parse leaves its field zero (an
// event id "" says the record is not the stage's; HasInput false that
// it names no input). The event id and source are untrusted header bytes
// (an input the stage copies may be hostile): they are kept as
// [SafeText] makes them, as every other reader of a message records them.
func ParseOutputRecord(r *kgo.Record) OutputRecord {
	out := OutputRecord{Topic: r.Topic, Partition: int64(r.Partition), Offset: r.Offset, Control: r.Attrs.IsControl()}
	var hasPart, hasOff bool
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderEventID:
			out.Event = SafeText(string(h.Value))
		case HeaderSource:
			out.Source = SafeText(string(h.Value))
		case HeaderInputPartition:
			var err error
			out.InputPartition, err = strconv.ParseInt(string(h.Value), 10, 64)
			hasPart = err == nil
		case HeaderInputOffset:
			var err error
			out.InputOffset, err = strconv.ParseInt(string(h.Value), 10, 64)
			hasOff = err == nil
		}
	}
	out.HasInput = hasPart && hasOff
	return out
}

// OutputLog is a whole read of one output topic.
type OutputLog struct {
	Topic string
	// Detail says in words how much was read.
	Detail  string
	Records []OutputRecord
	// Ends are the offsets each partition was read to (its last stable
	// offset, or its high watermark), by partition.
	Ends map[int64]int64
}

// KafkaCommittedLog reads every partition of topic with read_committed
// from offset 0 to its last stable offset as of the call: what any
// read_committed reader of the topic sees once the drain is over. The
// read keeps control records, which it does not return, to know where it
// is: the records of aborted transactions are never returned, so the
// last stable offset can only be seen reached through the markers that
// end transactions. A partition whose log no longer starts at 0 is an
// error, as for [KafkaLog].
func KafkaCommittedLog(ctx context.Context, cfg KafkaConfig, topic string) (OutputLog, error) {
	ctx, cancel := context.WithTimeout(ctx, logTimeout)
	defer cancel()
	out := OutputLog{Topic: topic}
	w := wholeRead{what: "kafka output log", client: "output-log", topic: topic, committed: true}
	detail := func() string {
		return fmt.Sprintf("%d partitions read committed from offset 0 to their last stable offsets: %d records", w.partitions, len(out.Records))
	}
	err := w.read(ctx, cfg.withDefaults(), func(int64) { out.Detail = detail() }, func(r *kgo.Record) {
		if rec := ParseOutputRecord(r); !rec.Control {
			out.Records = append(out.Records, rec)
		}
	})
	out.Ends = endsOf(w)
	if err != nil {
		return out, err
	}
	out.Detail = detail()
	return out, nil
}

// PartitionOffsets are one partition's offsets: its last stable offset
// (ListOffsets read_committed) and its high watermark (read_uncommitted).
// A last stable offset below the high watermark means a transaction is
// still open in the partition.
type PartitionOffsets struct {
	Topic                           string
	Partition                       int32
	LastStableOffset, HighWatermark int64
}

// KafkaPartitionOffsets lists the offsets of every partition of topics.
func KafkaPartitionOffsets(ctx context.Context, cfg KafkaConfig, topics ...string) ([]PartitionOffsets, error) {
	cl, err := kgo.NewClient(cfg.withDefaults().clientOpts("offsets")...)
	if err != nil {
		return nil, fmt.Errorf("kafka offsets: %w", err)
	}
	defer cl.Close()
	return partitionOffsets(ctx, kadm.NewClient(cl), topics)
}

func partitionOffsets(ctx context.Context, adm *kadm.Client, topics []string) ([]PartitionOffsets, error) {
	stable, err := adm.ListCommittedOffsets(ctx, topics...)
	if err == nil {
		err = stable.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("kafka offsets: last stable offsets: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("kafka offsets: high watermarks: %w", err)
	}
	var out []PartitionOffsets
	var missing error
	stable.Each(func(o kadm.ListedOffset) {
		e, ok := ends.Lookup(o.Topic, o.Partition)
		if !ok {
			missing = fmt.Errorf("kafka offsets: %s partition %d has a last stable offset and no high watermark", o.Topic, o.Partition)
			return
		}
		out = append(out, PartitionOffsets{Topic: o.Topic, Partition: o.Partition, LastStableOffset: o.Offset, HighWatermark: e.Offset})
	})
	slices.SortFunc(out, func(a, b PartitionOffsets) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return out, missing
}

// A KafkaStageWatcher tells the drain how far the transactional stage is
// from done: its consumer group's lag on the input topic, and how many
// partitions of its output topics still have a transaction open. It keeps
// one client between calls, like [KafkaBacklogReader], and is safe for
// concurrent use. The caller should call Close when finished.
type KafkaStageWatcher struct {
	cfg     KafkaConfig
	group   string
	outputs []string

	mu sync.Mutex
	cl *kgo.Client // nil until the first call, and after an error
}

// NewKafkaStageWatcher watches group on cfg's events topic and the
// output topics.
func NewKafkaStageWatcher(cfg KafkaConfig, group string, outputs []string) *KafkaStageWatcher {
	return &KafkaStageWatcher{cfg: cfg.withDefaults(), group: group, outputs: outputs}
}

// Pending returns the group's lag, summed over the input topic's
// partitions, and the output partitions whose last stable offset is
// below their high watermark.
func (w *KafkaStageWatcher) Pending(ctx context.Context) (lag, open int64, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cl == nil {
		if w.cl, err = kgo.NewClient(w.cfg.clientOpts("stage-watch")...); err != nil {
			return 0, 0, fmt.Errorf("kafka stage: %w", err)
		}
	}
	adm := kadm.NewClient(w.cl)
	defer func() {
		if err != nil {
			w.cl.Close()
			w.cl = nil
		}
	}()
	if lag, err = kafkaLag(ctx, adm, w.cfg.Topic, w.group); err != nil {
		return 0, 0, err
	}
	offs, err := partitionOffsets(ctx, adm, w.outputs)
	if err != nil {
		return 0, 0, err
	}
	for _, o := range offs {
		if o.LastStableOffset < o.HighWatermark {
			open++
		}
	}
	return lag, open, nil
}

// Close closes the client, if one is open.
func (w *KafkaStageWatcher) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cl != nil {
		w.cl.Close()
		w.cl = nil
	}
}

// KafkaReadOutputs reads topics from their start while ctx lasts, with
// read_committed (or read_uncommitted when committed is false: a known-bad
// reader), and calls found for each record in offset order per partition,
// until ctx ends (then it returns nil) or found fails. A record without an
// event id is passed on too: the caller decides what a foreign record is.
func KafkaReadOutputs(ctx context.Context, cfg KafkaConfig, topics []string, committed bool, found func(OutputRecord) error) error {
	iso := kgo.ReadCommitted()
	if !committed {
		iso = kgo.ReadUncommitted()
	}
	cl, err := kgo.NewClient(append(cfg.withDefaults().clientOpts("output-reader"),
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(iso),
	)...)
	if err != nil {
		return fmt.Errorf("kafka output reader: %w", err)
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var ferr error
		fs.EachRecord(func(r *kgo.Record) {
			if ferr == nil {
				ferr = found(ParseOutputRecord(r))
			}
		})
		if ferr != nil {
			return ferr
		}
	}
}
