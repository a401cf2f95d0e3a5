package broker

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// commitBatch is the offsets of every ack waiting for one commit, each
// partition's highest, and who waits on which partition.
type commitBatch struct {
	offsets map[int32]kgo.EpochOffset
	waiters []commitWaiter
	urgent  bool // someone waits for it synchronously
}

type commitWaiter struct {
	partition int32
	done      chan error // buffered: receives exactly one value
}

// finish tells every waiter how its partition's commit went: err for all,
// or the partition's own error code from the response.
func (b *commitBatch) finish(err error, perPart map[int32]error) {
	for _, w := range b.waiters {
		e := err
		if e == nil {
			e = perPart[w.partition]
		}
		w.done <- e
	}
}

// Ack implements Subscriber: it commits d's offset+1 for its partition
// and returns once the coordinator has stored it; d's partition stays
// outstanding until then, so nothing later of it is handed out before.
// It commits nothing and returns an error wrapping ErrKafkaRevoked if the
// partition was revoked since d was handed out. d's partition is released
// even if the commit fails.
func (s *KafkaSubscriber) Ack(ctx context.Context, d *Delivery) error {
	h, done, err := s.enqueueAck(d, true)
	if err != nil {
		return fmt.Errorf("kafka ack: %w", err)
	}
	defer s.release(h, false)
	if err := <-done; err != nil {
		return fmt.Errorf("kafka ack: partition %d offset %d: %w", h.rec.Partition, h.rec.Offset, err)
	}
	return nil
}

// AckAsync implements [AsyncAcker]: like Ack, but each delivery's
// partition is released at once, so its next record can be processed
// while the commit travels. The channels receive the commits' outcomes.
// Offsets only ever move forward and a commit covers every ack taken
// before it, so a later record's commit can never land without an
// earlier one's.
func (s *KafkaSubscriber) AckAsync(ctx context.Context, ds []*Delivery) []<-chan error {
	type wait struct {
		h    *kafkaHandle
		done <-chan error
		out  chan<- error
	}
	outs := make([]<-chan error, len(ds))
	var waits []wait
	for i, d := range ds {
		out := make(chan error, 1)
		outs[i] = out
		h, done, err := s.enqueueAck(d, false)
		if err != nil {
			out <- fmt.Errorf("kafka ack: %w", err)
			continue
		}
		s.release(h, false)
		waits = append(waits, wait{h, done, out})
	}
	if len(waits) == 0 {
		return outs
	}
	// One goroutine per batch relays the outcomes; each commit is bounded
	// by CommitTimeout, so it ends.
	go func() {
		for _, w := range waits {
			err := <-w.done
			if err != nil {
				err = fmt.Errorf("kafka ack: partition %d offset %d: %w", w.h.rec.Partition, w.h.rec.Offset, err)
			}
			w.out <- err
		}
	}()
	return outs
}

// enqueueAck checks that d is outstanding on a partition this member
// still owns and adds its offset to the next commit. The check and the
// enqueue happen under ownMu (shared), so a revocation comes either
// before (and the ack is refused) or after (and commits it first).
func (s *KafkaSubscriber) enqueueAck(d *Delivery, urgent bool) (*kafkaHandle, <-chan error, error) {
	s.ownMu.RLock()
	defer s.ownMu.RUnlock()
	s.mu.Lock()
	h, _, err := s.outstandingLocked(d)
	s.mu.Unlock()
	if err != nil {
		return nil, nil, err
	}
	return h, s.enqueueCommit(h.rec, urgent), nil
}

// enqueueCommit adds r.Offset+1 to the pending commit and makes sure a
// flusher runs; ownMu must be held (shared). The channel receives the
// outcome of the commit that covers it. A waiter is answered even past
// its caller's ctx: the commit itself is bounded by CommitTimeout.
func (s *KafkaSubscriber) enqueueCommit(r *kgo.Record, urgent bool) <-chan error {
	done := make(chan error, 1)
	if s.opts.AutoCommit {
		// Known-bad: the consumer leaves committing to kgo's
		// auto-commit of what it polled, and commits nothing itself.
		done <- nil
		return done
	}
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if s.pending == nil {
		s.pending = &commitBatch{offsets: map[int32]kgo.EpochOffset{}}
	}
	b := s.pending
	next := kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset + 1}
	if cur, ok := b.offsets[r.Partition]; !ok || cur.Offset < next.Offset {
		b.offsets[r.Partition] = next
	}
	b.waiters = append(b.waiters, commitWaiter{partition: r.Partition, done: done})
	if urgent && !b.urgent {
		b.urgent = true
		select {
		case s.urgent <- struct{}{}:
		default:
		}
	}
	if !s.flushing {
		s.flushing = true
		go s.flushCommits()
	}
	return done
}

// takeBatchLocked waits until no commit is in flight, then takes the pending
// batch (nil if none) and marks a commit in flight; commitMu is held.
func (s *KafkaSubscriber) takeBatchLocked() *commitBatch {
	for s.inflight {
		s.idle.Wait()
	}
	b := s.pending
	s.pending = nil
	if b != nil {
		s.inflight = true
	}
	return b
}

func (s *KafkaSubscriber) commitDone() {
	s.commitMu.Lock()
	s.inflight = false
	s.lastCommit = time.Now()
	s.idle.Broadcast()
	s.commitMu.Unlock()
}

// flushCommits commits pending batches one after another until none is
// left, each at most CommitInterval after the one before unless someone
// waits for it.
func (s *KafkaSubscriber) flushCommits() {
	for {
		s.commitMu.Lock()
		if b := s.pending; b != nil && !b.urgent {
			if wait := time.Until(s.lastCommit.Add(s.opts.CommitInterval)); wait > 0 {
				s.commitMu.Unlock()
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-s.urgent:
				}
				t.Stop()
				continue
			}
		}
		b := s.takeBatchLocked()
		if b == nil {
			s.flushing = false
			s.commitMu.Unlock()
			return
		}
		s.commitMu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.CommitTimeout)
		s.commit(ctx, b)
		cancel()
		s.commitDone()
	}
}

// flushNow is the rebalance callbacks' flush, with ownMu held
// exclusively: it waits for the commit in flight, then commits what is
// pending, except the offsets of lost partitions, whose waiters are told
// ErrKafkaRevoked.
func (s *KafkaSubscriber) flushNow(ctx context.Context, ps []int32, lost bool) {
	s.commitMu.Lock()
	b := s.takeBatchLocked()
	s.commitMu.Unlock()
	if b == nil {
		return
	}
	defer s.commitDone()
	if lost {
		kept := b.waiters[:0]
		for _, w := range b.waiters {
			if slices.Contains(ps, w.partition) {
				w.done <- fmt.Errorf("partition %d lost before its offset was committed: %w", w.partition, ErrKafkaRevoked)
				continue
			}
			kept = append(kept, w)
		}
		b.waiters = kept
		for _, p := range ps {
			delete(b.offsets, p)
		}
	}
	if len(b.offsets) == 0 {
		b.finish(nil, nil)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.CommitTimeout)
	defer cancel()
	s.commit(ctx, b)
}

// commit runs one offset commit and answers b's waiters.
func (s *KafkaSubscriber) commit(ctx context.Context, b *commitBatch) {
	perPart, err := commitOffsets(ctx, s.cl, map[string]map[int32]kgo.EpochOffset{s.cfg.Topic: b.offsets})
	b.finish(err, perPart)
}

// commitOffsets commits offsets (one topic's) and returns each
// partition's refusal, or the request's error.
func commitOffsets(ctx context.Context, cl *kgo.Client, offsets map[string]map[int32]kgo.EpochOffset) (map[int32]error, error) {
	var failed error
	perPart := map[int32]error{}
	cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			failed = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					perPart[p.Partition] = err
				}
			}
		}
	})
	return perPart, failed
}
