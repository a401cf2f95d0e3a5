package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/internal/backoff"
)

// KafkaSubscriberOptions tune a KafkaSubscriber.
type KafkaSubscriberOptions struct {
	// SessionTimeout is how long the group coordinator waits for a
	// silent member before giving its partitions to others, overriding
	// the default 6s (the broker's minimum). It is how long a killed
	// consumer's partitions stay unconsumed.
	SessionTimeout time.Duration
	// MaxPollRecords caps the records taken from the client per poll,
	// overriding the default 500.
	MaxPollRecords int
	// MaxBuffered caps records held for handing out before the next
	// poll, overriding the default 2000.
	MaxBuffered int
	// DeliveryTimeout bounds a dead-letter produce, overriding the
	// default 10s.
	DeliveryTimeout time.Duration
	// CommitTimeout bounds an Ack's offset commit when its ctx has no
	// earlier deadline, overriding the default 15s. A commit blocks the
	// group's rebalance, so it must not wait forever on a dead broker.
	CommitTimeout time.Duration
	// CommitInterval is how long offsets acked with AckAsync may wait to
	// be committed together, overriding the default 100ms. Each commit is
	// a request the broker writes to its offsets log; without the wait a
	// busy subscriber committed back to back, hundreds of times a second.
	// Ack and DeadLetter, which wait for their commit, never wait for it.
	CommitInterval time.Duration
	// FetchMinBytes and FetchMaxWait shape fetches: the broker answers
	// once it has FetchMinBytes for this member or FetchMaxWait has
	// passed, overriding the defaults 64KiB and 50ms. Answering at the
	// first byte (Kafka's default) made a busy consumer fetch after every
	// produce, which cost the broker a fifth of the pipeline's throughput
	// on a two-core machine; the price is up to FetchMaxWait of latency
	// when events trickle in.
	FetchMinBytes int32
	FetchMaxWait  time.Duration

	// Issue 25: consumer groups, replay and rebalances.

	// OffsetReset is where the group starts when it has no committed
	// offset: "earliest" (the default, correct) or "latest" (known-bad
	// for a group that joins late: it skips the history).
	OffsetReset string
	// AutoCommit commits polled offsets on a timer, ahead of the
	// effects (known-bad consumer variant auto-commit).
	AutoCommit bool
	// CommitOnRevoke uses the eager protocol and commits the polled
	// positions of revoked partitions, dropping what was buffered
	// (known-bad consumer variant commit-on-revoke).
	CommitOnRevoke bool
	// OnAssign, when set, is told of each change to this member's
	// partitions: detail is history.AssignAssigned, AssignRevoked or
	// AssignLost.
	OnAssign func(detail, topic string, partitions []int32)
}

// KafkaSubscriber implements Subscriber as one member of a consumer group
// (the subscription) on cfg's events topic. It is safe for concurrent
// use: several workers may call Next, Ack, Retry and DeadLetter at once.
//
// # Ordering
//
// At most one delivery per partition is outstanding, or one batch of
// consecutive ones (NextBatch): Next hands out a partition's next record
// only after the previous ones were settled with Ack, Retry or
// DeadLetter, which must come oldest first. Retry puts the record back at
// the front of its partition, followed by the rest of its batch, so it
// comes next (Attempt+1) and nothing later from that partition is handed
// out before it. Per-key order (one aggregate, one
// partition) therefore holds across retries and across workers. A caller
// that takes a delivery and never settles it stalls that partition.
//
// # Acks and rebalances
//
// Ack commits the record's offset+1 synchronously; AckAsync lets the
// commit travel while the partition goes on. Because acks come oldest
// first, every earlier record of the partition was settled, so a commit
// never covers something unprocessed. Auto-commit is off, and
// Close commits nothing: a consumer that dies (or closes) before Ack has
// its record redelivered, from the last committed offset, to whoever owns
// the partition next, with Attempt starting again at 1.
//
// A commit must never be issued for a partition this member no longer
// owns: with the classic group protocol the coordinator checks the
// member's generation, not which partitions it holds, so a commit made
// after a rebalance moved a partition away would be accepted and could
// skip records the new owner has not processed. Two mechanisms close that:
//
//   - kgo.BlockRebalanceOnPoll makes rebalance callbacks and polls
//     mutually exclusive. The subscriber moves polled records into its own
//     buffer and calls AllowRebalance at once (it does not hold the
//     rebalance for as long as records are processed, which could exceed
//     the rebalance timeout while PostgreSQL is paused). So any
//     revocation happens after the polled records are buffered, never in
//     the middle.
//   - OnPartitionsRevoked/OnPartitionsLost take the ownership lock
//     exclusively, which waits for in-progress commits (Ack holds it
//     shared while it checks and commits; while the callback runs the
//     partition is still ours, so those commits are valid), then drop the
//     revoked partitions' buffered records (the new owner fetches them
//     again from the committed offset) and bump each partition's epoch.
//     A delivery remembers the epoch it was handed out in; an Ack for an
//     older epoch commits nothing and returns an error.
//
// Every settle call releases its partition even when it fails, so a
// broker outage cannot stall a partition forever: an Ack whose commit
// failed leaves the offset to the next Ack (or to a redelivery after a
// crash); a DeadLetter whose produce failed puts the record back as Retry
// does.
type KafkaSubscriber struct {
	cfg  KafkaConfig
	sub  string
	opts KafkaSubscriberOptions
	cl   *kgo.Client
	log  *slog.Logger

	// ownMu is held shared by commits (and dead-letter produces) and
	// exclusively by the rebalance callbacks.
	ownMu sync.RWMutex

	mu         sync.Mutex
	parts      map[int32]*kafkaPartition
	ids        []int32 // sorted keys of parts, for round-robin
	cursor     int
	queued     int
	changed    chan struct{} // closed and replaced on every change
	polling    bool
	pollCancel context.CancelFunc
	closed     bool
	// foreign are records takeLocked took out to settle without handing
	// them out: another subscription's redrive copies (settleForeign).
	foreign []*kafkaHandle

	// Group commit: acks that arrive while a commit is in flight wait for
	// the next one, which covers them all. franz-go runs one offset commit
	// at a time per client, so one commit per ack capped a subscriber at
	// about one ack per commit round trip. At most one commit is in
	// flight (inflight), whether the flusher or a rebalance callback runs
	// it; idle is signalled when it ends.
	commitMu   sync.Mutex
	pending    *commitBatch
	inflight   bool
	flushing   bool
	idle       *sync.Cond
	urgent     chan struct{} // wakes a flusher waiting out CommitInterval
	lastCommit time.Time
}

// kafkaPartition is one partition's state in a subscriber.
type kafkaPartition struct {
	queue []kafkaPending // front is next
	out   []*kafkaHandle // the outstanding deliveries, oldest first
	epoch uint64         // bumped when the partition is revoked or lost
}

type kafkaPending struct {
	rec     *kgo.Record
	attempt int64
}

// kafkaHandle is a Delivery's private state.
type kafkaHandle struct {
	rec     *kgo.Record
	attempt int64
	epoch   uint64
}

// ErrKafkaRevoked means the delivery's partition was revoked from this
// member (a rebalance) after it was handed out: the offset was not
// committed, and the partition's new owner will deliver the record again.
var ErrKafkaRevoked = errors.New("kafka: partition revoked since delivery")

// NewKafkaSubscriber joins consumer group subscription on cfg's events
// topic. A new group starts from the earliest offset (unless
// opts.OffsetReset says otherwise). The caller should call Close when
// finished.
func NewKafkaSubscriber(cfg KafkaConfig, subscription string, opts KafkaSubscriberOptions) (*KafkaSubscriber, error) {
	cfg = cfg.withDefaults()
	if len(cfg.Seeds) == 0 {
		return nil, errors.New("kafka subscriber: no seed brokers")
	}
	if subscription == "" {
		return nil, errors.New("kafka subscriber: empty subscription (consumer group)")
	}
	if opts.SessionTimeout <= 0 {
		opts.SessionTimeout = 6 * time.Second
	}
	if opts.MaxPollRecords <= 0 {
		opts.MaxPollRecords = 500
	}
	if opts.MaxBuffered <= 0 {
		opts.MaxBuffered = 2000
	}
	if opts.DeliveryTimeout <= 0 {
		opts.DeliveryTimeout = 10 * time.Second
	}
	if opts.CommitTimeout <= 0 {
		opts.CommitTimeout = 15 * time.Second
	}
	if opts.CommitInterval <= 0 {
		opts.CommitInterval = 100 * time.Millisecond
	}
	if opts.FetchMinBytes <= 0 {
		opts.FetchMinBytes = 64 << 10
	}
	if opts.FetchMaxWait <= 0 {
		opts.FetchMaxWait = 50 * time.Millisecond
	}
	s := &KafkaSubscriber{
		cfg: cfg, sub: subscription, opts: opts,
		log:     cfg.Logger.With("subscription", subscription),
		parts:   make(map[int32]*kafkaPartition),
		changed: make(chan struct{}),
	}
	s.idle = sync.NewCond(&s.commitMu)
	s.urgent = make(chan struct{}, 1)
	kopts := cfg.clientOpts("consumer-" + subscription)
	kopts = append(kopts,
		kgo.ConsumerGroup(subscription),
		kgo.ConsumeTopics(cfg.Topic),
		kgo.ConsumeResetOffset(resetOffset(opts.OffsetReset)),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(s.onAssigned),
		kgo.OnPartitionsRevoked(s.onRevoked),
		kgo.OnPartitionsLost(s.onLost),
		kgo.SessionTimeout(opts.SessionTimeout),
		kgo.HeartbeatInterval(min(time.Second, opts.SessionTimeout/3)),
		kgo.FetchMaxWait(opts.FetchMaxWait),
		kgo.FetchMinBytes(opts.FetchMinBytes),
		// The client produces dead letters too: acks=all, idempotent,
		// bounded (see NewKafkaPublisher for why cancellation is allowed).
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.AllowIdempotentProduceCancellation(),
		kgo.RecordDeliveryTimeout(opts.DeliveryTimeout),
	)
	kopts = append(kopts, commitOpts(opts)...)
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return nil, fmt.Errorf("kafka subscriber: %w", err)
	}
	s.cl = cl
	return s, nil
}

// OffsetResets are the values of KafkaSubscriberOptions.OffsetReset.
const (
	OffsetEarliest = "earliest"
	OffsetLatest   = "latest"
)

// resetOffset is where a group with no committed offset starts: the
// earliest offset unless reset is OffsetLatest (known-bad for a group that
// must see every event: it skips what was published before it joined).
func resetOffset(reset string) kgo.Offset {
	if reset == OffsetLatest {
		return kgo.NewOffset().AtEnd()
	}
	return kgo.NewOffset().AtStart()
}

// commitOpts are the client options of opts' way of committing: manual
// commits after the effect (correct), kgo's auto-commit of polled
// offsets (known-bad AutoCommit), and the eager balancer for
// CommitOnRevoke (known-bad), whose every rebalance revokes every
// partition, so its revoke commit runs at each one. The correct
// subscriber keeps franz-go's default balancer, cooperative-sticky, which
// revokes only the partitions that move.
func commitOpts(opts KafkaSubscriberOptions) []kgo.Opt {
	var out []kgo.Opt
	if opts.AutoCommit {
		// Greedy: everything polled, the buffer included.
		out = append(out, kgo.AutoCommitInterval(autoCommitInterval), kgo.GreedyAutoCommit())
	} else {
		out = append(out, kgo.DisableAutoCommit())
	}
	if opts.CommitOnRevoke {
		out = append(out, kgo.Balancers(kgo.RangeBalancer()))
	}
	return out
}

// autoCommitInterval is the known-bad AutoCommit's interval, overriding
// kgo's 5s: short, so a crash a few seconds into a run finds what was
// polled committed (a crash within an interval of a poll finds the
// previous poll's positions, already processed, and loses nothing; the
// shorter the interval, the rarer that is: 100ms is kgo's least).
const autoCommitInterval = 100 * time.Millisecond

// onAssigned is OnPartitionsAssigned: partitions this member now owns,
// told to OnAssign.
func (s *KafkaSubscriber) onAssigned(_ context.Context, _ *kgo.Client, got map[string][]int32) {
	s.tell(history.AssignAssigned, got[s.cfg.Topic])
}

// onRevoked is OnPartitionsRevoked: partitions leaving this member
// cleanly. While it runs they are still ours, so acks already taken are
// committed first. See KafkaSubscriber.
func (s *KafkaSubscriber) onRevoked(ctx context.Context, _ *kgo.Client, gone map[string][]int32) {
	ps := gone[s.cfg.Topic]
	s.tell(history.AssignRevoked, ps)
	s.leave(ctx, ps, false)
	if s.opts.CommitOnRevoke {
		// After leave's commit of the acks, which it would otherwise
		// move back.
		s.commitPolled(ctx, ps)
	}
}

// onLost is OnPartitionsLost: partitions taken away without a clean
// handover (the session expired). Their pending acks are not committed:
// the member's generation is gone, and the new owner redelivers.
func (s *KafkaSubscriber) onLost(ctx context.Context, _ *kgo.Client, gone map[string][]int32) {
	ps := gone[s.cfg.Topic]
	s.tell(history.AssignLost, ps)
	s.leave(ctx, ps, true)
}

// tell passes a change of ownership to OnAssign, before the partitions'
// records are dropped (revoked, lost) or fetched (assigned), so whoever
// records it writes it before any delivery of the new owner.
func (s *KafkaSubscriber) tell(detail string, ps []int32) {
	if s.opts.OnAssign == nil || len(ps) == 0 {
		return
	}
	s.opts.OnAssign(detail, s.cfg.Topic, slices.Sorted(slices.Values(ps)))
}

// commitPolled is the known-bad CommitOnRevoke: it commits, for the
// revoked partitions, the offsets this member has polled (what kgo calls
// uncommitted: past every record in its buffer, processed or not), the
// way a consumer that "commits on revoke so the next owner does not
// redo our work" often does. The buffer is then dropped (leave), so its
// unprocessed records are skipped by whoever owns the partitions next.
func (s *KafkaSubscriber) commitPolled(ctx context.Context, ps []int32) {
	polled := s.cl.UncommittedOffsets()[s.cfg.Topic]
	offsets := map[int32]kgo.EpochOffset{}
	for _, p := range ps {
		if o, ok := polled[p]; ok {
			offsets[p] = o
		}
	}
	if len(offsets) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.CommitTimeout)
	defer cancel()
	// As Java's commitSync does, a retriable refusal (the coordinator
	// loading or moving) is tried again until the timeout.
	for {
		err := commitSync(ctx, s.cl, map[string]map[int32]kgo.EpochOffset{s.cfg.Topic: offsets})
		if err == nil {
			s.log.Info("kafka commit on revoke: polled offsets committed", "offsets", offsets)
			return
		}
		if !kerr.IsRetriable(err) || ctx.Err() != nil {
			s.log.Warn("kafka commit on revoke failed", "offsets", offsets, "err", err)
			return
		}
		_ = backoff.Sleep(ctx, 100*time.Millisecond) // ctx's end is seen above
	}
}

// commitSync is commitOffsets that returns the request's error or the
// lowest partition's refusal.
func commitSync(ctx context.Context, cl *kgo.Client, offsets map[string]map[int32]kgo.EpochOffset) error {
	perPart, err := commitOffsets(ctx, cl, offsets)
	if err != nil {
		return err
	}
	if len(perPart) == 0 {
		return nil
	}
	p := slices.Min(slices.Collect(maps.Keys(perPart)))
	return fmt.Errorf("partition %d: %w", p, perPart[p])
}

func (s *KafkaSubscriber) leave(ctx context.Context, ps []int32, lost bool) {
	if len(ps) == 0 {
		return
	}
	s.ownMu.Lock()
	defer s.ownMu.Unlock()
	s.flushNow(ctx, ps, lost)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range ps {
		st := s.parts[p]
		if st == nil {
			continue
		}
		st.epoch++
		s.queued -= len(st.queue)
		st.queue = nil
		clear(st.out)
		st.out = nil
	}
	s.log.Info("kafka partitions revoked", "partitions", ps, "lost", lost)
	s.notifyLocked()
}

// notifyLocked wakes every waiting Next and interrupts a poll in
// progress, since something may have become available to hand out.
func (s *KafkaSubscriber) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
	if s.pollCancel != nil {
		s.pollCancel()
	}
}

// Next implements Subscriber. It hands out the next record of a partition
// that has no outstanding delivery, polling the broker when there is
// none. Records with missing or malformed headers are delivered as they
// are (Event fields left zero): validating them is the consumer's job.
func (s *KafkaSubscriber) Next(ctx context.Context) (*Delivery, error) {
	ds, err := s.NextBatch(ctx, 1, nil)
	if err != nil {
		return nil, err
	}
	return ds[0], nil
}

// NextBatch implements [Batcher]: up to max records, consecutive within
// each partition and taken from as many partitions as it takes to fill
// the batch (see takeLocked), outstanding together until each is settled,
// oldest first per partition.
// accept runs with the subscriber's lock held and must not call it.
func (s *KafkaSubscriber) NextBatch(ctx context.Context, max int, accept func(*Delivery) bool) ([]*Delivery, error) {
	max = cmp.Or(max, 1)
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, fmt.Errorf("kafka next: %w", kgo.ErrClientClosed)
		}
		ds := s.takeLocked(max, accept)
		if foreign := s.foreign; len(foreign) > 0 {
			s.foreign = nil
			s.mu.Unlock()
			s.settleForeign(foreign)
			if ds != nil {
				return ds, nil
			}
			continue
		}
		if ds != nil {
			s.mu.Unlock()
			return ds, nil
		}
		if err := ctx.Err(); err != nil {
			s.mu.Unlock()
			return nil, fmt.Errorf("kafka next: %w", err)
		}
		if !s.polling && s.queued < s.opts.MaxBuffered {
			s.polling = true
			pctx, cancel := context.WithCancel(ctx)
			s.pollCancel = cancel
			s.mu.Unlock()
			err := s.poll(pctx)
			cancel()
			s.mu.Lock()
			s.polling = false
			s.pollCancel = nil
			s.notifyLocked() // another waiter may poll now
			s.mu.Unlock()
			if err != nil {
				return nil, err
			}
			continue
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("kafka next: %w", ctx.Err())
		}
	}
}

// poll takes records from the client into the partitions' queues. It
// returns an error only when the client is closed.
func (s *KafkaSubscriber) poll(ctx context.Context) error {
	fs := s.cl.PollRecords(ctx, s.opts.MaxPollRecords)
	// BlockRebalanceOnPoll holds rebalances from here until
	// AllowRebalance, so the records below are buffered before any
	// revocation can run (and be dropped by it).
	defer s.cl.AllowRebalance()
	if fs.IsClientClosed() {
		return fmt.Errorf("kafka next: %w", kgo.ErrClientClosed)
	}
	var failed bool
	fs.EachError(func(topic string, p int32, err error) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return
		}
		failed = true
		s.log.Warn("kafka fetch error", "topic", topic, "partition", p, "err", err)
	})
	n := 0
	s.mu.Lock()
	fs.EachPartition(func(ftp kgo.FetchTopicPartition) {
		if ftp.Topic != s.cfg.Topic || len(ftp.Records) == 0 {
			return
		}
		st := s.partLocked(ftp.Partition)
		for _, r := range ftp.Records {
			st.queue = append(st.queue, kafkaPending{rec: r, attempt: 1})
		}
		n += len(ftp.Records)
	})
	s.queued += n
	s.mu.Unlock()
	if n == 0 && failed {
		// Errors without records (e.g. a broker that refuses
		// connections) come back at once; do not spin on them.
		t := time.NewTimer(200 * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return nil
}

func (s *KafkaSubscriber) partLocked(p int32) *kafkaPartition {
	st := s.parts[p]
	if st == nil {
		st = &kafkaPartition{}
		s.parts[p] = st
		i, _ := slices.BinarySearch(s.ids, p)
		s.ids = slices.Insert(s.ids, i, p)
	}
	return st
}

// takeLocked hands out the front records of the partitions, in
// round-robin order, that have some and nothing outstanding: the first
// one, then up to max in all while accept (if not nil) takes them,
// emptying one partition's queue before moving to the next. If accept
// refuses the first, it is handed out alone; a later refusal ends the
// batch, and the refused record comes alone next time.
//
// A batch spans partitions because records arrive spread over all of
// them (the relay's batch lands on every partition at once): one
// partition's share was ~20 records with 8 partitions, and the
// consumer's transaction and round trips per batch cost about 25 µs of
// CPU per event more than with batches of the ~70 that 2 partitions gave.
// Each partition's records in a batch are still consecutive and
// outstanding together, so per-partition order and oldest-first settling
// hold as before.
func (s *KafkaSubscriber) takeLocked(max int, accept func(*Delivery) bool) []*Delivery {
	var ds []*Delivery
	start := s.cursor
	for k := range s.ids {
		if len(ds) == max {
			break
		}
		i := (start + k) % len(s.ids)
		st := s.parts[s.ids[i]]
		if len(st.out) > 0 || len(st.queue) == 0 {
			continue
		}
		s.cursor = i + 1
		for len(ds) < max && len(st.queue) > 0 {
			pd := st.queue[0]
			if s.foreignRedrive(pd.rec) {
				if len(st.out) == 0 {
					// At the head, nothing before it outstanding:
					// settled by NextBatch (settleForeign).
					st.queue[0] = kafkaPending{}
					st.queue = st.queue[1:]
					s.queued--
					h := &kafkaHandle{rec: pd.rec, attempt: pd.attempt, epoch: st.epoch}
					st.out = append(st.out, h)
					s.foreign = append(s.foreign, h)
				}
				break // the partition's next records wait for it
			}
			h := &kafkaHandle{rec: pd.rec, attempt: pd.attempt, epoch: st.epoch}
			d := s.delivery(h)
			ok := accept == nil || accept(d)
			if !ok && len(ds) > 0 {
				return ds
			}
			st.queue[0] = kafkaPending{}
			st.queue = st.queue[1:]
			s.queued--
			st.out = append(st.out, h)
			ds = append(ds, d)
			if !ok {
				return ds // a refused first record comes alone
			}
		}
	}
	return ds
}

// foreignRedrive reports whether r is a dead letter the redriver
// republished for another subscription (HeaderRedriveSubscription): the
// events topic carries it to every group, and only its subscription's
// may take it (issue 25, kafka_redrive.go).
func (s *KafkaSubscriber) foreignRedrive(r *kgo.Record) bool {
	to := kafkaHeader(r, HeaderRedriveSubscription)
	return to != "" && to != s.sub
}

// settleForeign commits past each of hs, another subscription's redrive
// copies that takeLocked took out at the head of their partitions, as an
// ack does but without handing them out, and releases their partitions.
// A partition revoked since is left to its new owner.
func (s *KafkaSubscriber) settleForeign(hs []*kafkaHandle) {
	for _, h := range hs {
		s.ownMu.RLock()
		s.mu.Lock()
		st := s.parts[h.rec.Partition]
		owned := st != nil && st.epoch == h.epoch && len(st.out) > 0 && st.out[0] == h
		s.mu.Unlock()
		if owned {
			s.enqueueCommit(h.rec, false) // its outcome is the next ack's
		}
		s.ownMu.RUnlock()
		s.release(h, false)
	}
}

func (s *KafkaSubscriber) delivery(h *kafkaHandle) *Delivery {
	r := h.rec
	hs := make(map[string]string, len(r.Headers))
	for _, kv := range r.Headers {
		hs[kv.Key] = string(kv.Value) // a repeated key: the last wins
	}
	d := &Delivery{
		Event:        EventFromHeaders(hs, r.Value),
		Subscription: s.sub,
		Partition:    int64(r.Partition),
		Offset:       r.Offset,
		Attempt:      h.attempt,
		Headers:      hs,
	}
	d.SetHandle(h)
	return d
}

// outstanding checks that d is this subscriber's outstanding delivery of
// its partition. It returns the partition, and ErrKafkaRevoked when the
// partition changed hands since d was handed out.
func (s *KafkaSubscriber) outstandingLocked(d *Delivery) (*kafkaHandle, *kafkaPartition, error) {
	if d == nil {
		return nil, nil, errors.New("nil delivery")
	}
	h, ok := d.Handle().(*kafkaHandle)
	if !ok {
		return nil, nil, fmt.Errorf("delivery %s/%d@%d is not from a kafka subscriber", d.Subscription, d.Partition, d.Offset)
	}
	st := s.parts[h.rec.Partition]
	switch {
	case st == nil:
		return nil, nil, fmt.Errorf("delivery %d@%d is not from this subscriber", h.rec.Partition, h.rec.Offset)
	case st.epoch != h.epoch:
		return h, st, fmt.Errorf("partition %d offset %d: %w", h.rec.Partition, h.rec.Offset, ErrKafkaRevoked)
	case len(st.out) == 0 || st.out[0] != h:
		return h, st, fmt.Errorf("partition %d offset %d: delivery already settled, or an earlier one of its partition is not", h.rec.Partition, h.rec.Offset)
	}
	return h, st, nil
}

// release ends h's outstanding state on its partition (if it is still
// the oldest there). With requeue set, h goes back to the front of the
// queue with Attempt+1, followed by every later delivery outstanding with
// it, so the partition's order holds.
func (s *KafkaSubscriber) release(h *kafkaHandle, requeue bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.parts[h.rec.Partition]
	if st == nil || len(st.out) == 0 || st.out[0] != h {
		return
	}
	if requeue {
		back := make([]kafkaPending, len(st.out), len(st.out)+len(st.queue))
		for i, o := range st.out {
			back[i] = kafkaPending{rec: o.rec, attempt: o.attempt}
		}
		back[0].attempt++
		st.queue = append(back, st.queue...)
		s.queued += len(back)
		clear(st.out)
		st.out = nil
	} else {
		st.out[0] = nil
		st.out = st.out[1:]
		if len(st.out) == 0 {
			st.out = nil
		}
	}
	if len(st.out) == 0 {
		s.notifyLocked()
	}
}

// Retry implements Subscriber: d comes back from the next Next that
// serves its partition, with Attempt+1, before anything later of that
// partition. If the partition was revoked since, Retry does nothing and
// returns nil: the new owner will deliver the record (from Attempt 1).
func (s *KafkaSubscriber) Retry(_ context.Context, d *Delivery) error {
	s.mu.Lock()
	h, _, err := s.outstandingLocked(d)
	s.mu.Unlock()
	if errors.Is(err, ErrKafkaRevoked) {
		s.log.Debug("kafka retry of a revoked delivery: its new owner redelivers it", "partition", h.rec.Partition, "offset", h.rec.Offset)
		return nil
	}
	if err != nil {
		return fmt.Errorf("kafka retry: %w", err)
	}
	s.release(h, true)
	return nil
}

// DeadLetter implements Subscriber: it produces d's record to the
// dead-letter topic (same key and value, the original headers plus
// dlq-reason, dlq-attempts, the original topic, partition and offset and
// the subscription; acks=all, waiting for the answer), then acks d. If the
// produce fails d is put back as by Retry; if the commit fails d's
// partition is released and the error returned, and a redelivery after a
// crash may dead-letter it again.
func (s *KafkaSubscriber) DeadLetter(ctx context.Context, d *Delivery, reason string) error {
	// Held from the check across the produce until the offset is in the
	// next commit, so a rebalance cannot slip between them (which would
	// dead-letter the record here and let the new owner dead-letter it
	// again).
	s.ownMu.RLock()
	locked := true
	defer func() {
		if locked {
			s.ownMu.RUnlock()
		}
	}()
	s.mu.Lock()
	h, _, err := s.outstandingLocked(d)
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("kafka dead-letter: %w", err)
	}
	r := h.rec
	hdrs := make([]kgo.RecordHeader, 0, len(r.Headers)+6)
	for _, kv := range r.Headers {
		switch kv.Key {
		case HeaderReason, HeaderAttempt, HeaderDLQTopic, HeaderDLQPartition, HeaderDLQOffset, HeaderDLQSubscription:
			continue // ours win over a replayed record's
		}
		hdrs = append(hdrs, kv)
	}
	hdrs = append(hdrs,
		kgo.RecordHeader{Key: HeaderReason, Value: []byte(reason)},
		kgo.RecordHeader{Key: HeaderAttempt, Value: []byte(strconv.FormatInt(h.attempt, 10))},
		kgo.RecordHeader{Key: HeaderDLQTopic, Value: []byte(r.Topic)},
		kgo.RecordHeader{Key: HeaderDLQPartition, Value: []byte(strconv.FormatInt(int64(r.Partition), 10))},
		kgo.RecordHeader{Key: HeaderDLQOffset, Value: []byte(strconv.FormatInt(r.Offset, 10))},
		kgo.RecordHeader{Key: HeaderDLQSubscription, Value: []byte(s.sub)},
	)
	dl := &kgo.Record{Topic: s.cfg.DLQTopic(), Key: r.Key, Value: r.Value, Headers: hdrs}
	if err := s.cl.ProduceSync(ctx, dl).FirstErr(); err != nil {
		s.release(h, true)
		return fmt.Errorf("kafka dead-letter: partition %d offset %d: produce: %w", r.Partition, r.Offset, err)
	}
	done := s.enqueueCommit(r, true)
	s.ownMu.RUnlock()
	locked = false
	defer s.release(h, false)
	if err := <-done; err != nil {
		return fmt.Errorf("kafka dead-letter: partition %d offset %d: dead-lettered but not acked: %w", r.Partition, r.Offset, err)
	}
	return nil
}

// Close implements Subscriber: it leaves the group without committing
// anything, so unacked records are redelivered to the group's next owner
// of their partition. Safe to call more than once.
func (s *KafkaSubscriber) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.notifyLocked()
	s.mu.Unlock()
	s.cl.Close()
	return nil
}
