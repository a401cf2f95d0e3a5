package broker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/history"
)

// assignLog collects what a subscriber's OnAssign was told.
type assignLog struct {
	mu      sync.Mutex
	changes []string // "assigned [0 1]"
	changed chan struct{}
}

func newAssignLog() *assignLog { return &assignLog{changed: make(chan struct{}, 100)} }

func (l *assignLog) on(detail, _ string, ps []int32) {
	l.mu.Lock()
	l.changes = append(l.changes, fmt.Sprint(detail, " ", ps))
	l.mu.Unlock()
	l.changed <- struct{}{}
}

// wait waits until some change starts with prefix, and returns it.
func (l *assignLog) wait(tb testing.TB, prefix string, d time.Duration) string {
	tb.Helper()
	deadline := time.After(d)
	for {
		l.mu.Lock()
		i := slices.IndexFunc(l.changes, func(c string) bool { return strings.HasPrefix(c, prefix) })
		var got string
		if i >= 0 {
			got = l.changes[i]
		}
		all := slices.Clone(l.changes)
		l.mu.Unlock()
		if got != "" {
			return got
		}
		select {
		case <-l.changed:
		case <-deadline:
			tb.Fatalf("no %q change within %s (had %q)", prefix, d, all)
		}
	}
}

func kafkaSubscriberWith(tb testing.TB, cfg KafkaConfig, group string, opts KafkaSubscriberOptions) *KafkaSubscriber {
	tb.Helper()
	s, err := NewKafkaSubscriber(cfg, group, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// TestKafkaOnAssign: OnAssign hears of every partition the group hands a
// member and takes away, before the new owner's first delivery.
func TestKafkaOnAssign(t *testing.T) {
	cfg := kafkaTopic(t, 2)
	kafkaPublishAll(t, kafkaPublisher(t, cfg, KafkaPublisherOptions{}), kafkaEvents("assign", 16, 16))
	l1, l2 := newAssignLog(), newAssignLog()
	s1 := kafkaSubscriberWith(t, cfg, "g", KafkaSubscriberOptions{OnAssign: l1.on})
	kafkaNext(t, s1, 30*time.Second)
	if got := l1.wait(t, history.AssignAssigned, time.Second); got != "assigned [0 1]" {
		t.Fatalf("first member: %q, want assigned [0 1]", got)
	}
	s2 := kafkaSubscriberWith(t, cfg, "g", KafkaSubscriberOptions{OnAssign: l2.on})
	d := kafkaNext(t, s2, 60*time.Second)
	want := fmt.Sprintf("[%d]", d.Partition)
	if got := l2.wait(t, history.AssignAssigned, time.Second); got != "assigned "+want {
		t.Fatalf("second member: %q, want assigned %s", got, want)
	}
	if got := l1.wait(t, history.AssignRevoked, 30*time.Second); got != "revoked "+want {
		t.Fatalf("first member: %q, want revoked %s", got, want)
	}
}

// TestKafkaOffsetResetLatest: a group without a committed offset starts
// at the end with OffsetReset latest (known-bad for a late group), never
// seeing what was published before it joined.
func TestKafkaOffsetResetLatest(t *testing.T) {
	cfg := kafkaTopic(t, 1)
	p := kafkaPublisher(t, cfg, KafkaPublisherOptions{})
	kafkaPublishAll(t, p, kafkaEvents("before", 10, 2))
	s := kafkaSubscriberWith(t, cfg, "late", KafkaSubscriberOptions{OffsetReset: OffsetLatest})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	go func() {
		// Published until the subscriber gets one: where it starts is
		// only decided once it has joined.
		for i := 0; ctx.Err() == nil; i++ {
			_ = p.Publish(ctx, kafkaEvents(fmt.Sprint("after", i), 1, 1))
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	d, err := s.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(d.ID, "after") {
		t.Fatalf("first delivery %s (offset %d): want one published after the group joined", d.ID, d.Offset)
	}
}

// heldOnEach takes one delivery from each of cfg's partitions from s and
// acks it, so the rest of what s polled is buffered, unprocessed.
func heldOnEach(t *testing.T, s *KafkaSubscriber, partitions int) map[int32]int64 {
	t.Helper()
	acked := map[int32]int64{}
	deadline := time.Now().Add(30 * time.Second)
	for len(acked) < partitions {
		d := kafkaNext(t, s, time.Until(deadline))
		kafkaAck(t, s, d)
		acked[int32(d.Partition)] = d.Offset + 1
	}
	return acked
}

// TestKafkaCommitOnRevoke: when a member joins, the known-bad
// CommitOnRevoke (eager protocol) commits the revoked partitions'
// polled positions, past records it never handed out; the correct
// subscriber commits only what was acked.
func TestKafkaCommitOnRevoke(t *testing.T) {
	for _, bad := range []bool{false, true} {
		t.Run(map[bool]string{false: "correct", true: "commit-on-revoke"}[bad], func(t *testing.T) {
			cfg := kafkaTopic(t, 2)
			kafkaPublishAll(t, kafkaPublisher(t, cfg, KafkaPublisherOptions{}), kafkaEvents("revoke", 200, 50))
			l1 := newAssignLog()
			s1 := kafkaSubscriberWith(t, cfg, "g", KafkaSubscriberOptions{OnAssign: l1.on, CommitOnRevoke: bad})
			acked := heldOnEach(t, s1, 2)
			l2 := newAssignLog()
			s2 := kafkaSubscriberWith(t, cfg, "g", KafkaSubscriberOptions{OnAssign: l2.on, CommitOnRevoke: bad})
			revoked := l1.wait(t, history.AssignRevoked, 60*time.Second)
			// The second member is assigned once the rebalance is over:
			// the first member rejoined after its revoke callback (and
			// its commits) returned. It fetches nothing (a poll joins
			// the group) until asked.
			go func() { _, _ = s2.Next(t.Context()) }()
			l2.wait(t, history.AssignAssigned, 60*time.Second)
			committed := kafkaCommitted(t, cfg, "g")
			for p, at := range acked {
				if !strings.Contains(revoked, fmt.Sprint(p)) {
					continue
				}
				switch got := committed[p]; {
				case bad && got <= at:
					t.Errorf("%s: partition %d committed at %d, want past the acked %d (its polled position)", revoked, p, got, at)
				case !bad && got != at:
					t.Errorf("%s: partition %d committed at %d, want the acked %d", revoked, p, got, at)
				}
			}
		})
	}
}

// TestKafkaAutoCommit: the known-bad AutoCommit commits what it polled
// on a timer, past a record handed out and never acked.
func TestKafkaAutoCommit(t *testing.T) {
	cfg := kafkaTopic(t, 1)
	kafkaPublishAll(t, kafkaPublisher(t, cfg, KafkaPublisherOptions{}), kafkaEvents("auto", 100, 10))
	s := kafkaSubscriberWith(t, cfg, "g", KafkaSubscriberOptions{AutoCommit: true})
	d := kafkaNext(t, s, 30*time.Second)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if got := kafkaCommitted(t, cfg, "g")[0]; got > d.Offset+1 {
			t.Logf("committed %d with offset %d handed out and not acked", got, d.Offset)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing committed past the unacked offset %d", d.Offset)
		}
		time.Sleep(100 * time.Millisecond) // polling the broker's committed offset
	}
}
