package broker

// Tests of the Kafka publisher and subscriber against kfake, franz-go's
// in-process fake broker: faults a real broker cannot be made to show on
// cue (a produce answer lost after the write, a rebalance arriving in the
// middle of an offset commit, fetch errors), in milliseconds and without a
// server, so they run under -short. They complement the real-broker tests
// in kafka_test.go, which stay the reference for everything else.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kfakeCluster starts a one-broker fake cluster holding an events topic
// and its dead-letter topic, with partitions partitions each, and returns
// it with the config to reach it. The cluster closes when the test ends.
func kfakeCluster(tb testing.TB, partitions int32) (*kfake.Cluster, KafkaConfig) {
	tb.Helper()
	cfg := KafkaConfig{Topic: "events", Partitions: partitions, Logger: slog.New(slog.NewTextHandler(tb.Output(), nil))}
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.SeedTopics(partitions, cfg.Topic, cfg.DLQTopic()),
		// So a subscriber may use a session short enough for the
		// group to notice a rebalance within milliseconds.
		kfake.GroupMinSessionTimeout(100*time.Millisecond),
	)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	cfg.Seeds = c.ListenAddrs()
	return c, cfg
}

// kfakeSubscriber joins group on cfg's topic with a session of 500ms, so
// a rebalance is noticed within a heartbeat of ~170ms.
func kfakeSubscriber(tb testing.TB, cfg KafkaConfig, group string) *KafkaSubscriber {
	tb.Helper()
	s, err := NewKafkaSubscriber(cfg, group, KafkaSubscriberOptions{SessionTimeout: 500 * time.Millisecond})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// kfakeCopies reads cfg's topic from the start to its end and counts the
// records of each event id.
func kfakeCopies(tb testing.TB, cfg KafkaConfig) map[string]int {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Seeds...), kgo.ConsumeTopics(cfg.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(10*time.Millisecond))
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, cfg.Topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		tb.Fatalf("end offsets of %s: %v", cfg.Topic, err)
	}
	var want int64
	ends.Each(func(o kadm.ListedOffset) { want += o.Offset })
	copies := map[string]int{}
	for got := int64(0); got < want; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			tb.Fatalf("read %s: %d of %d records: %v", cfg.Topic, got, want, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == HeaderEventID {
					copies[string(h.Value)]++
				}
			}
			got++
		})
	}
	return copies
}

// kfakeHoldProduce makes the cluster hold the next produce request
// unanswered until giveUp is closed, then write it (written) or close its
// connection without writing it. held is closed once the request is
// held.
func kfakeHoldProduce(c *kfake.Cluster, written bool, giveUp <-chan struct{}) (held <-chan struct{}) {
	ch := make(chan struct{})
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		close(ch)
		c.SleepControl(func() { <-giveUp })
		if written {
			c.DropControl()        // else it stays: only a control that handles its request is dropped by itself
			return nil, nil, false // the cluster writes it; its answer goes to a dead connection
		}
		return nil, errors.New("kfake: produce dropped"), true // closes the connection
	})
	return ch
}

// kfakePublishUntilConfirmed publishes ev until the broker confirms it, as
// the relay republishes what was not confirmed, and returns the number of
// publishes. Every failed one must be ErrUnconfirmed.
func kfakePublishUntilConfirmed(tb testing.TB, p Publisher, ev Event) int {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for n := 1; ; n++ {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err := p.Publish(ctx, []Event{ev})[0]
		cancel()
		switch {
		case err == nil:
			return n
		case !errors.Is(err, ErrUnconfirmed):
			tb.Fatalf("publish %d of %s: %v, want confirmed or ErrUnconfirmed", n, ev.ID, err)
		case time.Now().After(deadline):
			tb.Fatalf("%s not confirmed in %d publishes: %v", ev.ID, n, err)
		}
	}
}

// TestKfakeProduceAnswerLost: when the answer to a produce request does
// not come before the relay stops waiting, Publish reports the record's
// outcome unknown (ErrUnconfirmed), neither confirmed nor refused, whether
// or not the broker wrote it: the client cannot tell the two apart. The
// relay's republish is confirmed, and where the first write had landed
// the topic holds the event twice (or more, if an unconfirmed republish
// landed too): the relay's duplicate, which the inbox absorbs.
//
// Flow: publish a warm-up event, so the producer is set up. The cluster
// holds the next produce request until the relay gives up (its ctx ends),
// then writes it or drops it; or it writes every produce request and
// answers it REQUEST_TIMED_OUT, as a broker whose replication timed out
// after the append does, until the relay has given up. Then the relay
// republishes until confirmed.
func TestKfakeProduceAnswerLost(t *testing.T) {
	for _, c := range []struct {
		name    string
		written bool
		// lose arms the fault: held is closed once the broker has the
		// publish and will not answer it; closing giveUp heals.
		lose func(c *kfake.Cluster, cfg KafkaConfig, giveUp <-chan struct{}) (held <-chan struct{})
	}{
		{"answer lost after the write", true, func(c *kfake.Cluster, _ KafkaConfig, giveUp <-chan struct{}) <-chan struct{} {
			return kfakeHoldProduce(c, true, giveUp)
		}},
		{"connection dropped before the write", false, func(c *kfake.Cluster, _ KafkaConfig, giveUp <-chan struct{}) <-chan struct{} {
			return kfakeHoldProduce(c, false, giveUp)
		}},
		{"timed out after the append", true, func(c *kfake.Cluster, cfg KafkaConfig, giveUp <-chan struct{}) <-chan struct{} {
			h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: cfg.Topic, Err: kerr.RequestTimedOut, Count: -1})
			held := make(chan struct{})
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if h.Wait(ctx, 1) == nil {
					close(held)
				}
				<-giveUp
				h.Remove()
			}()
			return held
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cluster, cfg := kfakeCluster(t, 1)
			p := kafkaPublisher(t, cfg, KafkaPublisherOptions{})
			kafkaPublishAll(t, p, kafkaEvents("warm", 1, 1))
			giveUp := make(chan struct{})
			heal := sync.OnceFunc(func() { close(giveUp) })
			t.Cleanup(heal) // also when the test stops early
			held := c.lose(cluster, cfg, giveUp)

			ev := kafkaEvents("lost-answer", 1, 1)[0]
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			published := make(chan error, 1)
			go func() { published <- p.Publish(ctx, []Event{ev})[0] }()
			select {
			case <-held:
			case err := <-published:
				t.Fatalf("publish returned %v before the broker lost its answer", err)
			case <-time.After(5 * time.Second):
				t.Fatal("the publish did not reach the broker within 5s")
			}
			cancel() // the relay's PublishTimeout
			if err := <-published; !errors.Is(err, ErrUnconfirmed) {
				t.Fatalf("publish whose answer was lost: %v, want ErrUnconfirmed", err)
			}
			heal()
			want := 0
			if c.written {
				want = 1
			}
			waitFor(t, context.Background(), 5*time.Second, func() error {
				if got := kfakeCopies(t, cfg)[ev.ID]; got != want {
					return fmt.Errorf("the topic holds %d copies of %s after the lost answer, want %d", got, ev.ID, want)
				}
				return nil
			})

			// The confirmed republish was written; one that came back
			// ErrUnconfirmed before it (its batch failed with the lost
			// one's) may have been.
			n := kfakePublishUntilConfirmed(t, p, ev)
			got := kfakeCopies(t, cfg)[ev.ID]
			if got < want+1 || got > want+n {
				t.Fatalf("after %d republishes, the last confirmed, the topic holds %d copies of %s, want %d to %d", n, got, ev.ID, want+1, want+n)
			}
			t.Logf("confirmed on republish %d; %d copies", n, got)
		})
	}
}

// kfakePos is a record's place: partition and offset.
type kfakePos struct {
	partition int32
	offset    int64
}

func (p kfakePos) String() string { return fmt.Sprintf("%d@%d", p.partition, p.offset) }

// kfakeLedger is what the members of a group did, in the order they did
// it: who handled which record (a delivery counts as handled before it is
// acked, as a consumer applies its effect first), how each ack ended, and
// every commit that went beyond what was handled.
type kfakeLedger struct {
	mu       sync.Mutex
	handled  map[int32]map[int64]int // partition -> offset -> times handled
	by       map[string]int          // member -> records handled
	acks     map[kfakePos][]error    // each ack's outcome, in order
	problems []string
}

func newKfakeLedger() *kfakeLedger {
	return &kfakeLedger{handled: map[int32]map[int64]int{}, by: map[string]int{}, acks: map[kfakePos][]error{}}
}

// handle notes that member handled d. Handling a record again after an
// ack of it succeeded is a problem: a successful ack means the group's
// offset covers the record, so nobody gets it again.
func (l *kfakeLedger) handle(member string, d *Delivery) {
	l.mu.Lock()
	defer l.mu.Unlock()
	pos := kfakePos{int32(d.Partition), d.Offset}
	if slices.Contains(l.acks[pos], nil) {
		l.problems = append(l.problems, fmt.Sprintf("%s handled %v again after its ack succeeded", member, pos))
	}
	if l.handled[pos.partition] == nil {
		l.handled[pos.partition] = map[int64]int{}
	}
	l.handled[pos.partition][pos.offset]++
	l.by[member]++
}

func (l *kfakeLedger) acked(d *Delivery, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	pos := kfakePos{int32(d.Partition), d.Offset}
	l.acks[pos] = append(l.acks[pos], err)
}

// report fails tb with every problem noted.
func (l *kfakeLedger) report(tb testing.TB) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.problems {
		tb.Error(p)
	}
}

// waitFor is the package's waitFor, which a problem ends at once: the
// test fails (report says why) instead of waiting for what may never come.
func (l *kfakeLedger) waitFor(tb testing.TB, d time.Duration, cond func() error) {
	tb.Helper()
	failed := func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.problems) > 0
	}
	waitFor(tb, context.Background(), d, func() error {
		if failed() {
			return nil
		}
		return cond()
	})
	if failed() {
		tb.FailNow()
	}
}

func (l *kfakeLedger) handledBy(member string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.by[member]
}

// frontierLocked is partition p's first offset nobody has handled yet.
func (l *kfakeLedger) frontierLocked(p int32) int64 {
	var o int64
	for l.handled[p][o] > 0 {
		o++
	}
	return o
}

// checkCommit notes every offset in req beyond its partition's frontier:
// committing it would tell the group that records nobody handled are done.
func (l *kfakeLedger) checkCommit(topic string, req *kmsg.OffsetCommitRequest) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, t := range req.Topics {
		if t.Topic != topic && t.Topic != "" { // v10+ names topics by id only
			continue
		}
		for _, p := range t.Partitions {
			if f := l.frontierLocked(p.Partition); p.Offset > f {
				l.problems = append(l.problems, fmt.Sprintf("partition %d committed at %d, handled only below %d", p.Partition, p.Offset, f))
			}
		}
	}
}

// kfakeMember takes deliveries from s until ctx ends, handling and then
// acking each. Ack errors are noted, not fatal: the record may come again.
func kfakeMember(ctx context.Context, member string, s *KafkaSubscriber, l *kfakeLedger) {
	for {
		d, err := s.Next(ctx)
		if err != nil {
			return
		}
		l.handle(member, d)
		l.acked(d, s.Ack(ctx, d))
	}
}

// kfakeCommitted returns group's committed offsets on cfg's topic.
func kfakeCommitted(ctx context.Context, cfg KafkaConfig, group string) (map[int32]int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Seeds...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).FetchOffsets(ctx, group)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Topic == cfg.Topic && o.Err == nil && o.At >= 0 {
			out[o.Partition] = o.At
		}
	})
	return out, nil
}

// TestKfakeRebalanceDuringCommit: a rebalance that arrives while offset
// commits are in flight, the commits refused with the group's rebalance
// error, loses and skips nothing: every record is handled, each refused
// ack says it failed, no commit ever covers a record nobody handled, no
// record is handled again after its ack succeeded, and once all are acked
// the group's offsets are at the end. Records whose ack failed may be
// handled again, by their partition's new owner: at-least-once.
//
// Flow: member one consumes and acks record by record. Its third commit
// request is held by the cluster until a second member has sent its
// JoinGroup (the group is rebalancing), then answered with the error, as
// is every later commit of member one until member two has handled a
// record (the rebalance is over), whichever partition it was for. Then
// more records arrive, and both members go on until the group has
// committed everything.
func TestKfakeRebalanceDuringCommit(t *testing.T) {
	for _, code := range []*kerr.Error{kerr.RebalanceInProgress, kerr.IllegalGeneration} {
		t.Run(code.Message, func(t *testing.T) {
			cluster, cfg := kfakeCluster(t, 2)
			p := kafkaPublisher(t, cfg, KafkaPublisherOptions{})
			// The later events are for the same aggregates, so they land
			// on both partitions.
			const before, after = 40, 16
			evs := kafkaEvents("rebalance", before+after, 8)
			kafkaPublishAll(t, p, evs[:before])

			const group = "g"
			ledger := newKfakeLedger()
			defer ledger.report(t) // also when the test stops early
			s1 := kfakeSubscriber(t, cfg, group)
			joinNow, joined := make(chan struct{}), make(chan struct{})
			var (
				commits atomic.Int64
				mu      sync.Mutex
				refused []kfakePos // records whose commit was refused
			)
			cluster.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
				cluster.KeepControl()
				cr := req.(*kmsg.OffsetCommitRequest)
				ledger.checkCommit(cfg.Topic, cr)
				if member, _ := s1.cl.GroupMetadata(); cr.MemberID != member {
					return nil, nil, false
				}
				switch c := commits.Add(1); {
				case c < 3:
					return nil, nil, false
				case c == 3:
					close(joinNow)
					cluster.SleepControl(func() {
						select {
						case <-joined:
						case <-time.After(5 * time.Second):
						}
					})
				case ledger.handledBy("two") > 0:
					return nil, nil, false
				}
				mu.Lock()
				for _, t := range cr.Topics {
					for _, p := range t.Partitions {
						refused = append(refused, kfakePos{p.Partition, p.Offset - 1})
					}
				}
				mu.Unlock()
				cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: group, Err: code,
					When: func(r kmsg.Request) bool { return r == req }})
				return nil, nil, false
			})
			var joinOnce sync.Once
			cluster.ControlKey(int16(kmsg.JoinGroup), func(kmsg.Request) (kmsg.Response, error, bool) {
				cluster.KeepControl()
				select {
				case <-joinNow:
					joinOnce.Do(func() { close(joined) })
				default:
				}
				return nil, nil, false
			})

			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			defer func() { cancel(); wg.Wait() }()
			wg.Go(func() { kfakeMember(ctx, "one", s1, ledger) })
			select {
			case <-joinNow:
			case <-time.After(5 * time.Second):
				t.Fatalf("member one made %d commits in 5s, want 3", commits.Load())
			}
			s2 := kfakeSubscriber(t, cfg, group)
			wg.Go(func() { kfakeMember(ctx, "two", s2, ledger) })
			// A refused commit is not retried: the next ack of its
			// partition covers it. So once the rebalance is over, more
			// records, whose acks cover the refused ones.
			ledger.waitFor(t, 10*time.Second, func() error {
				if ledger.handledBy("two") == 0 {
					return errors.New("member two has handled nothing")
				}
				return nil
			})
			kafkaPublishAll(t, p, evs[before:])

			ledger.waitFor(t, 10*time.Second, func() error {
				ledger.mu.Lock()
				var handled int64
				for part := range cfg.Partitions {
					f, distinct := ledger.frontierLocked(part), int64(len(ledger.handled[part]))
					if f != distinct || f == 0 {
						ledger.mu.Unlock()
						return fmt.Errorf("partition %d: handled below %d, %d distinct offsets", part, f, distinct)
					}
					handled += distinct
				}
				ledger.mu.Unlock()
				if handled != before+after {
					return fmt.Errorf("handled %d distinct records of %d", handled, before+after)
				}
				committed, err := kfakeCommitted(ctx, cfg, group)
				if err != nil {
					return err
				}
				ledger.mu.Lock()
				defer ledger.mu.Unlock()
				for part := range cfg.Partitions {
					if end := int64(len(ledger.handled[part])); committed[part] != end {
						return fmt.Errorf("partition %d committed at %d, want %d", part, committed[part], end)
					}
				}
				return nil
			})
			cancel()
			wg.Wait()

			ledger.mu.Lock()
			defer ledger.mu.Unlock()
			mu.Lock()
			defer mu.Unlock()
			if len(refused) == 0 {
				t.Fatal("no commit was refused")
			}
			for _, pos := range refused {
				if outcomes := ledger.acks[pos]; len(outcomes) == 0 || outcomes[0] == nil {
					t.Errorf("ack of %v, whose commit was refused with %s: %v, want an error", pos, code.Message, outcomes)
				}
			}
			var again []kfakePos
			for part, offs := range ledger.handled {
				for o, times := range offs {
					if times > 1 {
						again = append(again, kfakePos{part, o})
					}
				}
			}
			slices.SortFunc(again, func(a, b kfakePos) int {
				return cmp.Or(cmp.Compare(a.partition, b.partition), cmp.Compare(a.offset, b.offset))
			})
			t.Logf("%d commits refused, the first for record %v; handled by one %d, by two %d; handled more than once: %d %v",
				len(refused), refused[0], ledger.by["one"], ledger.by["two"], len(again), again)
		})
	}
}

// TestKfakeFetchErrors: fetch errors on one partition, whether franz-go
// retries them itself (NOT_LEADER_FOR_PARTITION, a dropped connection) or
// hands them to the subscriber (UNKNOWN_SERVER_ERROR), delay records but
// lose, repeat and reorder none: every record arrives once, each
// partition's offsets consecutive from 0.
//
// Flow: 40 records on two partitions; the fault is armed before the
// subscriber's first fetch, so the fetches that fail also carry records
// of the other partition.
func TestKfakeFetchErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		arm  func(*kfake.Cluster, KafkaConfig) (hits func() int, want int)
	}{
		{"not leader for partition", func(c *kfake.Cluster, cfg KafkaConfig) (func() int, int) {
			h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: cfg.Topic, Partitions: []int32{0}, Err: kerr.NotLeaderForPartition, Count: 3})
			return h.Hits, 3
		}},
		{"unknown server error", func(c *kfake.Cluster, cfg KafkaConfig) (func() int, int) {
			h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: cfg.Topic, Partitions: []int32{0}, Err: kerr.UnknownServerError, Count: 2})
			return h.Hits, 2
		}},
		{"fetch dropped", func(c *kfake.Cluster, _ KafkaConfig) (func() int, int) {
			var mu sync.Mutex
			n := 0
			c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
				mu.Lock()
				defer mu.Unlock()
				n++
				return nil, errors.New("kfake: fetch dropped"), true // closes the connection
			})
			return func() int { mu.Lock(); defer mu.Unlock(); return n }, 1
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cluster, cfg := kfakeCluster(t, 2)
			p := kafkaPublisher(t, cfg, KafkaPublisherOptions{})
			const n = 40
			evs := kafkaEvents("fetch", n, 8)
			kafkaPublishAll(t, p, evs)
			hits, want := c.arm(cluster, cfg)

			s := kfakeSubscriber(t, cfg, "g")
			got := kafkaReceiveAll(t, s, n, 10*time.Second)
			if h := hits(); h != want {
				t.Fatalf("the fault answered %d fetches, want %d", h, want)
			}
			seen := map[string]bool{}
			next := map[int64]int64{}
			for _, d := range got {
				if seen[d.ID] {
					t.Errorf("%s delivered twice", d.ID)
				}
				seen[d.ID] = true
				if d.Offset != next[d.Partition] {
					t.Errorf("partition %d: offset %d after %d", d.Partition, d.Offset, next[d.Partition]-1)
				}
				next[d.Partition] = d.Offset + 1
			}
			if len(next) != int(cfg.Partitions) {
				t.Errorf("records from %d partitions, want %d", len(next), cfg.Partitions)
			}
		})
	}
}

// Each publish mode asks the broker for the acks it stands for, and a
// confirmed publish (every mode but acks=0's) is in the log.
func TestKfakePublishAcks(t *testing.T) {
	for _, tc := range []struct {
		mode KafkaPublishMode
		acks int16
	}{
		{KafkaConfirmed, -1},
		{KafkaLeaderAck, 1},
		{KafkaUnconfirmed, 0},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			c, cfg := kfakeCluster(t, 1)
			var acks atomic.Int32
			acks.Store(99)
			c.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				acks.Store(int32(r.(*kmsg.ProduceRequest).Acks))
				return nil, nil, false
			})
			p, err := NewKafkaPublisher(cfg, KafkaPublisherOptions{Mode: tc.mode})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			ev := Event{ID: "ev-1", Key: "order-1", Source: "/orders", Version: 1, Type: "OrderConfirmed", Payload: []byte("{}")}
			if err := p.Publish(ctx, []Event{ev})[0]; err != nil {
				t.Fatal(err)
			}
			if tc.mode == KafkaUnconfirmed {
				// Handed over is all acks=0 knows: wait until it is in.
				deadline := time.Now().Add(5 * time.Second)
				for kfakeCopies(t, cfg)["ev-1"] == 0 && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
			}
			if got := acks.Load(); got != int32(tc.acks) {
				t.Errorf("produce asked for acks=%d, want %d", got, tc.acks)
			}
			if n := kfakeCopies(t, cfg)["ev-1"]; n != 1 {
				t.Errorf("%d copies in the log, want 1", n)
			}
		})
	}
}
