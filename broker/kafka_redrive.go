package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Kafka dead-letter redrive (issue 25, docs/contract.md "Dead letters and
// redrive"). The dead-letter topic is shared by every subscription
// (KafkaSubscriber.DeadLetter marks each record with dlq-subscription),
// so a subscription's redrive is a position on it: the consumer group
// KafkaRedriveGroup(sub), whose committed offset on each partition is
// where the redrive got to. Below it, the subscription's dead letters
// were redriven (or purged), except the offsets the commit's metadata
// lists as kept: the dead letters a classifying redriver left alone. Each
// record is republished to the events topic, marked for its subscription
// alone (HeaderRedriveSubscription: the other groups commit past it),
// and its offset committed once the produce was acknowledged by every
// in-sync replica. A crash between the two leaves the offset behind, and
// the next incarnation redrives the record again: at least once, which
// the consumer's inbox dedupes.
//
// The group never joins: one redriver per subscription runs at a time,
// so it reads the partitions directly and commits as an empty group
// does (kadm.CommitOffsets), which is also what lets a purge move it.

// KafkaRedriveGroup names the redrive group of sub, a subscription's
// qualified consumer group: "<ns>.<sub>.redrive".
func KafkaRedriveGroup(sub string) string { return sub + ".redrive" }

// kafkaKeptPrefix starts a redrive commit's metadata: the offsets below
// the committed one that are still dead letters, comma-separated.
const kafkaKeptPrefix = "kept="

// kafkaRedrivePos is a redrive group's committed position on one
// partition of the dead-letter topic.
type kafkaRedrivePos struct {
	at   int64   // the committed offset: the next to read
	kept []int64 // offsets below at that are still there
}

// gone reports whether the subscription's dead letter at off was
// redriven or purged.
func (p kafkaRedrivePos) gone(off int64) bool {
	return off < p.at && !slices.Contains(p.kept, off)
}

// kafkaMaxMetadata is the most a commit's metadata may hold: the
// brokers' offset.metadata.max.bytes default, past which the commit
// fails (OFFSET_METADATA_TOO_LARGE).
const kafkaMaxMetadata = 4096

// fit is p as it can be committed: when its kept offsets do not all fit
// in kafkaMaxMetadata, the position stays at the first that does not, so
// the next redrive reads from there again. What it redrove past that
// point is then redriven a second time: at least once, which the
// consumer's inbox dedupes, instead of a commit that fails and loses the
// whole position.
func (p kafkaRedrivePos) fit() kafkaRedrivePos {
	kept := slices.Sorted(slices.Values(p.kept))
	n := len(kafkaKeptPrefix)
	for i, o := range kept {
		w := len(strconv.FormatInt(o, 10))
		if i > 0 {
			w++ // the comma
		}
		if n+w > kafkaMaxMetadata {
			return kafkaRedrivePos{at: min(p.at, o), kept: kept[:i]}
		}
		n += w
	}
	return kafkaRedrivePos{at: p.at, kept: kept}
}

// metadata renders p's kept offsets for the commit.
func (p kafkaRedrivePos) metadata() string {
	if len(p.kept) == 0 {
		return ""
	}
	s := make([]string, len(p.kept))
	for i, o := range p.kept {
		s[i] = strconv.FormatInt(o, 10)
	}
	return kafkaKeptPrefix + strings.Join(s, ",")
}

// parseKept reads a redrive commit's metadata.
func parseKept(meta string) ([]int64, error) {
	rest, ok := strings.CutPrefix(meta, kafkaKeptPrefix)
	if !ok || rest == "" {
		return nil, nil
	}
	var out []int64
	for f := range strings.SplitSeq(rest, ",") {
		o, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("kept offset %q: %w", f, err)
		}
		out = append(out, o)
	}
	return out, nil
}

// fetchRedrivePos reads group's committed positions on topic; a group
// that never committed has none.
func fetchRedrivePos(ctx context.Context, adm *kadm.Client, group, topic string) (map[int32]kafkaRedrivePos, error) {
	rs, err := adm.FetchOffsetsForTopics(ctx, group, topic)
	if err != nil {
		return nil, fmt.Errorf("kafka redrive: committed offsets of %s: %w", group, err)
	}
	out := map[int32]kafkaRedrivePos{}
	var errs []error
	rs.Each(func(o kadm.OffsetResponse) {
		if o.Topic != topic || o.At < 0 {
			return
		}
		if o.Err != nil {
			errs = append(errs, o.Err)
			return
		}
		kept, err := parseKept(o.Metadata)
		if err != nil {
			errs = append(errs, fmt.Errorf("partition %d: %w", o.Partition, err))
		}
		out[o.Partition] = kafkaRedrivePos{at: o.At, kept: kept}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("kafka redrive: committed offsets of %s: %w", group, err)
	}
	return out, nil
}

// commitRedrivePos commits pos as group's position on topic.
func commitRedrivePos(ctx context.Context, adm *kadm.Client, group, topic string, pos map[int32]kafkaRedrivePos) error {
	if len(pos) == 0 {
		return nil
	}
	os := kadm.Offsets{topic: {}}
	for p, at := range pos {
		at = at.fit()
		os[topic][p] = kadm.Offset{Topic: topic, Partition: p, At: at.at, LeaderEpoch: -1, Metadata: at.metadata()}
	}
	rs, err := adm.CommitOffsets(ctx, group, os)
	if err == nil {
		err = rs.Error()
	}
	if err != nil {
		return fmt.Errorf("kafka redrive: commit %s: %w", group, err)
	}
	return nil
}

// kafkaRedriveQuiet is how long a redrive polls without finding a new
// record before it is done, and how long it reads on past the topic's
// end as of its start: the dead letters of a rollout still in flight.
// Not until quiet alone: a workload still running dead-letters poison
// all along, and the redrive would never end.
const kafkaRedriveQuiet = time.Second

// KafkaRedrive reads one subscription's dead letters from the shared
// dead-letter topic, from its redrive group's position, and republishes
// them to the events topic (see the top of this file). It works one
// record at a time: Next, then Republish and Ack, or Next again, which
// keeps the previous one as a dead letter. The caller should call Close.
type KafkaRedrive struct {
	cfg   KafkaConfig
	sub   string // the subscription's qualified group
	group string
	cl    *kgo.Client
	adm   *kadm.Client // over cl
	pos   map[int32]kafkaRedrivePos
	buf   []*kgo.Record
	last  *kgo.Record // handed out by Next, not yet acked or kept
	// marks are the topic's end offsets at the start, per partition,
	// and read how far the polls got; caughtUp is when read first
	// reached marks everywhere.
	marks, read map[int32]int64
	caughtUp    time.Time
	// from is the group's committed offset at the start, per partition:
	// below it, only the kept offsets are read again.
	from map[int32]int64
}

// OpenKafkaRedrive starts a redrive of sub (a subscription's qualified
// consumer group) from its redrive group's committed position.
func OpenKafkaRedrive(ctx context.Context, cfg KafkaConfig, sub string) (*KafkaRedrive, error) {
	cfg = cfg.withDefaults()
	if len(cfg.Seeds) == 0 {
		return nil, errors.New("kafka redrive: no seed brokers")
	}
	dlq := cfg.DLQTopic()
	group := KafkaRedriveGroup(sub)
	admCl, err := kgo.NewClient(cfg.clientOpts("redrive")...)
	if err != nil {
		return nil, fmt.Errorf("kafka redrive %s: %w", sub, err)
	}
	adm := kadm.NewClient(admCl)
	pos, err := fetchRedrivePos(ctx, adm, group, dlq)
	var ends kadm.ListedOffsets
	if err == nil {
		ends, err = adm.ListEndOffsets(ctx, dlq)
	}
	admCl.Close()
	if err != nil {
		return nil, fmt.Errorf("kafka redrive %s: %w", sub, err)
	}
	start := map[int32]kgo.Offset{}
	marks, read, from := map[int32]int64{}, map[int32]int64{}, map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		marks[o.Partition] = o.Offset
		read[o.Partition] = pos[o.Partition].at
		from[o.Partition] = pos[o.Partition].at
		if p, ok := pos[o.Partition]; ok {
			// What an earlier redrive kept is classified again: a fix
			// deployed since may make it compatible.
			at := p.at
			if len(p.kept) > 0 {
				at = min(at, slices.Min(p.kept))
			}
			start[o.Partition] = kgo.NewOffset().At(at)
		} else {
			start[o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	if len(start) == 0 {
		return nil, fmt.Errorf("kafka redrive %s: topic %s has no partitions", sub, dlq)
	}
	cl, err := kgo.NewClient(append(cfg.clientOpts("redrive-"+sub),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{dlq: start}),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.AllowIdempotentProduceCancellation(),
		kgo.RecordDeliveryTimeout(10*time.Second),
	)...)
	if err != nil {
		return nil, fmt.Errorf("kafka redrive %s: %w", sub, err)
	}
	return &KafkaRedrive{cfg: cfg, sub: sub, group: group, cl: cl, adm: kadm.NewClient(cl), pos: pos, marks: marks, read: read, from: from}, nil
}

// Close commits how far the redrive got (the records it acked, kept or
// passed over as another subscription's) and disconnects. A record
// handed out and not acked is left to the next redrive.
func (r *KafkaRedrive) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := commitRedrivePos(ctx, r.adm, r.group, r.cfg.DLQTopic(), r.pos); err != nil {
		r.cfg.Logger.Warn("kafka redrive: final commit", "err", err)
	}
	r.cl.Close()
}

// settle moves rec's partition's position past rec, keeping rec as a
// dead letter if keep is set (or no longer, if an earlier redrive kept
// it and this one redrove it).
func (r *KafkaRedrive) settle(rec *kgo.Record, keep bool) {
	p := r.pos[rec.Partition]
	i := slices.Index(p.kept, rec.Offset)
	switch {
	case keep && i < 0:
		p.kept = append(p.kept, rec.Offset)
	case !keep && i >= 0:
		p.kept = slices.Delete(slices.Clone(p.kept), i, i+1)
	}
	p.at = max(p.at, rec.Offset+1)
	r.pos[rec.Partition] = p
}

// redriven reports whether rec, below the group's offset at the start,
// was redriven by an earlier redrive (read again only because a kept one
// before it is).
func (r *KafkaRedrive) redriven(rec *kgo.Record) bool {
	return rec.Offset < r.from[rec.Partition] && !slices.Contains(r.pos[rec.Partition].kept, rec.Offset)
}

// Next takes the subscription's next dead letter; ok is false once a
// poll found nothing new for kafkaRedriveQuiet, or kafkaRedriveQuiet
// after it read the topic up to its end as of the start (what the
// subscription's consumers dead-lettered meanwhile included). The one
// Next handed out
// before, if not acked, stays a dead letter (the redriver kept it as
// incompatible). Other subscriptions' records are passed over.
func (r *KafkaRedrive) Next(ctx context.Context) (m *RedriveMessage, ok bool, err error) {
	if r.last != nil {
		r.settle(r.last, true)
		r.last = nil
	}
	for {
		for len(r.buf) > 0 {
			rec := r.buf[0]
			r.buf = r.buf[1:]
			if kafkaHeader(rec, HeaderDLQSubscription) != r.sub || r.redriven(rec) {
				r.settle(rec, false)
				continue
			}
			r.last = rec
			return r.message(rec), true, nil
		}
		if r.caughtUp.IsZero() && r.pastMarks() {
			r.caughtUp = time.Now()
		}
		if !r.caughtUp.IsZero() && time.Since(r.caughtUp) > kafkaRedriveQuiet {
			return nil, false, nil
		}
		found, err := r.poll(ctx)
		if err != nil || !found {
			return nil, false, err
		}
	}
}

// pastMarks reports whether the polls read every partition up to its
// end as of the start.
func (r *KafkaRedrive) pastMarks() bool {
	for p, end := range r.marks {
		if r.read[p] < end {
			return false
		}
	}
	return true
}

// poll fetches what the dead-letter topic has past what was read,
// waiting at most kafkaRedriveQuiet; found is false when nothing came.
func (r *KafkaRedrive) poll(ctx context.Context) (found bool, err error) {
	pctx, cancel := context.WithTimeout(ctx, kafkaRedriveQuiet)
	defer cancel()
	fs := r.cl.PollFetches(pctx)
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("kafka redrive %s: %w", r.sub, err)
	}
	var errs []error
	fs.EachError(func(topic string, p int32, err error) {
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			errs = append(errs, fmt.Errorf("%s[%d]: %w", topic, p, err))
		}
	})
	if err := errors.Join(errs...); err != nil {
		return false, fmt.Errorf("kafka redrive %s: fetch: %w", r.sub, err)
	}
	fs.EachRecord(func(rec *kgo.Record) {
		r.buf = append(r.buf, rec)
		r.read[rec.Partition] = max(r.read[rec.Partition], rec.Offset+1)
	})
	return len(r.buf) > 0, nil
}

// message reads a dead-letter record.
func (r *KafkaRedrive) message(rec *kgo.Record) *RedriveMessage {
	h := make(map[string]string, len(rec.Headers))
	for _, kv := range rec.Headers {
		h[kv.Key] = string(kv.Value)
	}
	ev := EventFromHeaders(h, rec.Value)
	ev.ID, ev.Source, ev.Key = SafeText(ev.ID), SafeText(ev.Source), SafeText(ev.Key)
	return &RedriveMessage{Event: ev, Headers: h, rec: rec}
}

// kafkaHeader is rec's last header named name, "" if none.
func kafkaHeader(rec *kgo.Record, name string) string {
	v := ""
	for _, kv := range rec.Headers {
		if kv.Key == name {
			v = string(kv.Value)
		}
	}
	return v
}

// kafkaDeadLetterHeader reports whether name is one of the headers
// dead-lettering or an earlier redrive added: a redriven record leaves
// them behind.
func kafkaDeadLetterHeader(name string) bool {
	switch name {
	case HeaderReason, HeaderAttempt, HeaderDLQTopic, HeaderDLQPartition, HeaderDLQOffset, HeaderDLQSubscription,
		HeaderRedriveSubscription, HeaderRedriveAttempt:
		return true
	}
	return false
}

// Republish produces m to the events topic with its key, value and event
// headers, marked for the subscription alone (HeaderRedriveSubscription)
// with HeaderRedriveAttempt set to attempt, under id (m's own event id,
// or another: the known-bad redriver's), and waits until every in-sync
// replica has it. It does not ack m.
func (r *KafkaRedrive) Republish(ctx context.Context, m *RedriveMessage, id string, attempt int64) error {
	hdrs := make([]kgo.RecordHeader, 0, len(m.rec.Headers)+2)
	for _, kv := range m.rec.Headers {
		if kafkaDeadLetterHeader(kv.Key) || (kv.Key == HeaderEventID && id != m.Event.ID) {
			continue
		}
		hdrs = append(hdrs, kv)
	}
	if id != m.Event.ID {
		hdrs = append(hdrs, kgo.RecordHeader{Key: HeaderEventID, Value: []byte(id)})
	}
	hdrs = append(hdrs,
		kgo.RecordHeader{Key: HeaderRedriveSubscription, Value: []byte(r.sub)},
		kgo.RecordHeader{Key: HeaderRedriveAttempt, Value: []byte(strconv.FormatInt(attempt, 10))},
	)
	rec := &kgo.Record{Topic: r.cfg.Topic, Key: m.rec.Key, Value: m.rec.Value, Headers: hdrs}
	if err := r.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("kafka redrive %s to %s: %w: %w", id, r.cfg.Topic, ErrUnconfirmed, err)
	}
	return nil
}

// Ack commits the redrive group past m: it is no longer a dead letter.
func (r *KafkaRedrive) Ack(m *RedriveMessage) error {
	if r.last == m.rec {
		r.last = nil
	}
	r.settle(m.rec, false)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := commitRedrivePos(ctx, r.adm, r.group, r.cfg.DLQTopic(), map[int32]kafkaRedrivePos{m.rec.Partition: r.pos[m.rec.Partition]}); err != nil {
		return fmt.Errorf("kafka redrive: ack %s: %w", m.Event.ID, err)
	}
	return nil
}

// KafkaPurgeDLQ advances sub's redrive group (sub being a subscription's
// qualified consumer group) to the dead-letter topic's end, so none of
// sub's dead letters is there any more, and returns how many it
// removed: the operator's purge of what failed. Other subscriptions'
// dead letters in the shared topic are untouched.
func KafkaPurgeDLQ(ctx context.Context, cfg KafkaConfig, sub string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, deadLettersTimeout)
	defer cancel()
	cfg = cfg.withDefaults()
	dls, ends, err := kafkaDeadLetters(ctx, cfg, []string{sub})
	if err != nil {
		return 0, fmt.Errorf("kafka purge: %w", err)
	}
	n := 0
	for _, d := range dls {
		if d.Queue == sub {
			n++
		}
	}
	admCl, err := kgo.NewClient(cfg.clientOpts("purge")...)
	if err != nil {
		return 0, fmt.Errorf("kafka purge: %w", err)
	}
	defer admCl.Close()
	pos := map[int32]kafkaRedrivePos{}
	for p, end := range ends {
		pos[p] = kafkaRedrivePos{at: end}
	}
	if err := commitRedrivePos(ctx, kadm.NewClient(admCl), KafkaRedriveGroup(sub), cfg.DLQTopic(), pos); err != nil {
		return 0, fmt.Errorf("kafka purge: %w", err)
	}
	return n, nil
}

// KafkaDeadLetterCount is how many of sub's dead letters the dead-letter
// topic holds (sub being a subscription's qualified consumer group).
func KafkaDeadLetterCount(ctx context.Context, cfg KafkaConfig, sub string) (int, error) {
	dls, err := KafkaDeadLetters(ctx, cfg, []string{sub})
	n := 0
	for _, d := range dls {
		if d.Queue == sub {
			n++
		}
	}
	return n, err
}
