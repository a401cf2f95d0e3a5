package broker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/deliverycheck/deliverycheck/cluster/link"
	"github.com/deliverycheck/deliverycheck/cluster/local"
	"github.com/deliverycheck/deliverycheck/internal/testenv"
)

// testKafka is the package's one Kafka broker, behind a proxy link that
// the broker advertises, so a test can partition every client from it.
type testKafka struct {
	k     *local.Kafka
	links *link.Server
	link  *link.Link
}

// kafkaNode starts the package's Kafka broker the first time it is
// called (a JVM per test would starve the machine). Tests that kill,
// partition or restart it must leave it running and healed before they
// end, and must not run in parallel with other Kafka tests.
var kafkaNode = sync.OnceValues(func() (*testKafka, error) {
	links := link.NewServer()
	servers.onClose(links.Close)
	l, err := links.Add("kafka", "127.0.0.1:0", "127.0.0.1:1")
	if err != nil {
		return nil, err
	}
	k, err := local.NewKafka(local.KafkaOptions{Advertise: l.Addr()})
	if err != nil {
		return nil, err
	}
	servers.onClose(k.Close)
	if err := l.SetUpstream(k.Endpoint()); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := k.Start(ctx); err != nil {
		return nil, fmt.Errorf("%w kafka: %w", errStartFailed, err)
	}
	return &testKafka{k: k, links: links, link: l}, nil
})

// sharedKafka returns the package's broker, starting it if needed; it
// skips the test with -short or when Kafka (java) is not installed (fails
// it under testenv.RequireServers), and fails it when an installed broker
// will not start.
func sharedKafka(tb testing.TB) *testKafka {
	tb.Helper()
	testenv.SkipIfShort(tb, "starts a real Kafka broker")
	k, err := kafkaNode()
	if err != nil && errors.Is(err, errStartFailed) {
		tb.Fatalf("kafka: %v", err)
	}
	testenv.MustHaveServer(tb, "kafka", err)
	return k
}

// kafkaTopic makes a fresh topic (and its DLQ) for one test and returns
// its config.
func kafkaTopic(tb testing.TB, partitions int32) KafkaConfig {
	tb.Helper()
	k := sharedKafka(tb)
	name := strings.NewReplacer("/", "-", " ", "-").Replace(tb.Name())
	cfg := KafkaConfig{
		Seeds:      []string{k.link.Addr()},
		Topic:      fmt.Sprintf("%s-%d", name, time.Now().UnixNano()),
		Partitions: partitions,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := SetupKafka(ctx, cfg); err != nil {
		tb.Fatal(err)
	}
	return cfg
}

func kafkaPublisher(tb testing.TB, cfg KafkaConfig, opts KafkaPublisherOptions) *KafkaPublisher {
	tb.Helper()
	p, err := NewKafkaPublisher(cfg, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}

func kafkaSubscriber(tb testing.TB, cfg KafkaConfig, group string) *KafkaSubscriber {
	tb.Helper()
	s, err := NewKafkaSubscriber(cfg, group, KafkaSubscriberOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// kafkaEvents returns n events spread over keys aggregates, each aggregate's
// versions counting from 1.
func kafkaEvents(prefix string, n, keys int) []Event {
	evs := make([]Event, n)
	for i := range evs {
		k := i % keys
		evs[i] = Event{
			ID: fmt.Sprintf("%s-%d", prefix, i), Source: "test/" + prefix,
			Key: fmt.Sprintf("%s-agg-%d", prefix, k), Version: int64(i/keys + 1),
			Type: "OrderPlaced", Payload: []byte(fmt.Sprintf(`{"i":%d}`, i)),
		}
	}
	return evs
}

// kafkaPublishAll publishes evs confirmed and fails the test on any error.
func kafkaPublishAll(tb testing.TB, p Publisher, evs []Event) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, err := range p.Publish(ctx, evs) {
		if err != nil {
			tb.Fatalf("publish %s: %v", evs[i].ID, err)
		}
	}
}

// kafkaNext takes one delivery within d.
func kafkaNext(tb testing.TB, s Subscriber, d time.Duration) *Delivery {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	dl, err := s.Next(ctx)
	if err != nil {
		tb.Fatalf("next: %v", err)
	}
	return dl
}

func kafkaAck(tb testing.TB, s Subscriber, d *Delivery) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Ack(ctx, d); err != nil {
		tb.Fatalf("ack %s: %v", d.ID, err)
	}
}

// kafkaReceiveAll takes n deliveries, acking each, within d overall.
func kafkaReceiveAll(tb testing.TB, s Subscriber, n int, d time.Duration) []*Delivery {
	tb.Helper()
	deadline := time.Now().Add(d)
	out := make([]*Delivery, 0, n)
	for len(out) < n {
		dl := kafkaNext(tb, s, time.Until(deadline))
		out = append(out, dl)
		kafkaAck(tb, s, dl)
	}
	return out
}

// TestKafkaPublishSubscribe: every confirmed event arrives once, with its
// identity, and each aggregate's versions arrive in order.
func TestKafkaPublishSubscribe(t *testing.T) {
	cfg := kafkaTopic(t, 3)
	p := kafkaPublisher(t, cfg, KafkaPublisherOptions{})
	const n, keys = 300, 17
	evs := kafkaEvents("ps", n, keys)
	for i := 0; i < n; i += 50 {
		kafkaPublishAll(t, p, evs[i:i+50])
	}
	s := kafkaSubscriber(t, cfg, "g")
	got := kafkaReceiveAll(t, s, n, time.Minute)

	want := make(map[string]Event, n)
	for _, e := range evs {
		want[e.ID] = e
	}
	last := map[string]int64{}
	partOf := map[string]int64{}
	seen := map[string]bool{}
	for _, d := range got {
		e, ok := want[d.ID]
		switch {
		case !ok:
			t.Fatalf("unexpected delivery %+v", d)
		case seen[d.ID]:
			t.Fatalf("%s delivered twice", d.ID)
		case d.Source != e.Source || d.Key != e.Key || d.Version != e.Version || d.Type != e.Type || !bytes.Equal(d.Payload, e.Payload):
			t.Fatalf("delivery %+v does not match event %+v", d.Event, e)
		case d.Subscription != "g" || d.Attempt != 1 || d.Headers[HeaderEventID] != e.ID:
			t.Fatalf("delivery metadata: %+v", d)
		case d.Version != last[d.Key]+1:
			t.Fatalf("aggregate %s: version %d after %d", d.Key, d.Version, last[d.Key])
		}
		if p, ok := partOf[d.Key]; ok && p != d.Partition {
			t.Fatalf("aggregate %s on partitions %d and %d", d.Key, p, d.Partition)
		}
		seen[d.ID], last[d.Key], partOf[d.Key] = true, d.Version, d.Partition
	}
}

// TestKafkaAckIsCommitted: after Ack, a new member of the same group
// starts after what was acked (the first thing it sees is a new marker).
func TestKafkaAckIsCommitted(t *testing.T) {
	cfg := kafkaTopic(t, 3)
	p := kafkaPublisher(t, cfg, KafkaPublisherOptions{})
	kafkaPublishAll(t, p, kafkaEvents("ack", 30, 5))
	s1 := kafkaSubscriber(t, cfg, "g")
	kafkaReceiveAll(t, s1, 30, time.Minute)
	s1.Close()

	marker := kafkaEvents("ack-marker", 3, 3) // one per aggregate, any partition
	kafkaPublishAll(t, p, marker)
	s2 := kafkaSubscriber(t, cfg, "g")
	for _, d := range kafkaReceiveAll(t, s2, 3, 30*time.Second) {
		if !strings.HasPrefix(d.ID, "ack-marker") {
			t.Fatalf("acked event %s delivered again", d.ID)
		}
	}
}

// TestKafkaRedeliveryWithoutAck: a member that goes away without acking
// (as a crashed consumer does) leaves its records to the next member,
// from the last committed offset.
func TestKafkaRedeliveryWithoutAck(t *testing.T) {
	cfg := kafkaTopic(t, 3)
	p := kafkaPublisher(t, cfg, KafkaPublisherOptions{})
	evs := kafkaEvents("redeliver", 10, 1) // one aggregate, one partition
	kafkaPublishAll(t, p, evs)

	s1 := kafkaSubscriber(t, cfg, "g")
	kafkaReceiveAll(t, s1, 4, 30*time.Second) // acked: e0..e3
	unacked := kafkaNext(t, s1, 30*time.Second)
	if unacked.ID != evs[4].ID {
		t.Fatalf("got %s, want %s", unacked.ID, evs[4].ID)
	}
	s1.Close() // no Ack, no commit

	s2 := kafkaSubscriber(t, cfg, "g")
	for i, d := range kafkaReceiveAll(t, s2, 6, 30*time.Second) {
		if want := evs[4+i].ID; d.ID != want || d.Attempt != 1 {
			t.Fatalf("redelivery %d: got %s attempt %d, want %s attempt 1", i, d.ID, d.Attempt, want)
		}
	}
}

// TestKafkaRetryKeepsOrder: a retried record comes back next with
// Attempt+1, and nothing later of its partition is handed out before it
// is settled.
func TestKafkaRetryKeepsOrder(t *testing.T) {
	cfg := kafkaTopic(t, 1)
	p := kafkaPublisher(t, cfg, KafkaPublisherOptions{})
	evs := kafkaEvents("retry", 5, 1)
	kafkaPublishAll(t, p, evs)
	s := kafkaSubscriber(t, cfg, "g")
	ctx := context.Background()

	d := kafkaNext(t, s, 30*time.Second)
	for attempt := int64(1); attempt <= 3; attempt++ {
		if d.ID != evs[0].ID || d.Attempt != attempt {
			t.Fatalf("got %s attempt %d, want %s attempt %d", d.ID, d.Attempt, evs[0].ID, attempt)
		}
		if attempt == 3 {
			break
		}
		// While d is outstanding its partition hands out nothing.
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		if extra, err := s.Next(short); err == nil {
			t.Fatalf("%s handed out while %s is outstanding", extra.ID, d.ID)
		}
		cancel()
		if err := s.Retry(ctx, d); err != nil {
			t.Fatal(err)
		}
		if err := s.Retry(ctx, d); err == nil {
			t.Fatal("second Retry of one delivery succeeded")
		}
		d = kafkaNext(t, s, 10*time.Second)
	}
	kafkaAck(t, s, d)
	if err := s.Ack(ctx, d); err == nil {
		t.Fatal("second Ack of one delivery succeeded")
	}
	for i, d := range kafkaReceiveAll(t, s, 4, 30*time.Second) {
		if d.ID != evs[i+1].ID || d.Attempt != 1 {
			t.Fatalf("got %s attempt %d, want %s attempt 1", d.ID, d.Attempt, evs[i+1].ID)
		}
	}
}

// TestKafkaConcurrentWorkers: several goroutines sharing one subscriber
// still see each aggregate in order, everything exactly once.
func TestKafkaConcurrentWorkers(t *testing.T) {
	cfg := kafkaTopic(t, 3)
	p := kafkaPublisher(t, cfg, KafkaPublisherOptions{})
	const n, keys = 200, 9
	kafkaPublishAll(t, p, kafkaEvents("workers", n, keys))
	s := kafkaSubscriber(t, cfg, "g")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var (
		mu    sync.Mutex
		last  = map[string]int64{}
		count atomic.Int64
		errs  = make(chan error, 4)
		wg    sync.WaitGroup
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for count.Load() < n {
				d, err := s.Next(ctx)
				if err != nil {
					errs <- fmt.Errorf("worker %d: %w", w, err)
					return
				}
				mu.Lock()
				bad := d.Version != last[d.Key]+1
				prev := last[d.Key]
				last[d.Key] = d.Version
				mu.Unlock()
				if bad {
					errs <- fmt.Errorf("aggregate %s: version %d after %d", d.Key, d.Version, prev)
					return
				}
				// Every third delivery is retried once: order must hold.
				if d.Attempt == 1 && d.Version%3 == 0 {
					mu.Lock()
					last[d.Key] = prev
					mu.Unlock()
					if err := s.Retry(ctx, d); err != nil {
						errs <- err
						return
					}
					continue
				}
				if err := s.Ack(ctx, d); err != nil {
					errs <- err
					return
				}
				if count.Add(1) == n {
					cancel() // wake the others
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if count.Load() == n && errors.Is(err, context.Canceled) {
			continue
		}
		t.Fatal(err)
	}
	if count.Load() != n {
		t.Fatalf("acked %d of %d", count.Load(), n)
	}
}

// TestKafkaDeadLetter: a dead-lettered record lands on <topic>.dlq with
// the reason, attempts and original metadata, and is acked.
func TestKafkaDeadLetter(t *testing.T) {
	cfg := kafkaTopic(t, 3)
	p := kafkaPublisher(t, cfg, KafkaPublisherOptions{})
	ev := kafkaEvents("dlq", 1, 1)
	kafkaPublishAll(t, p, ev)
	s := kafkaSubscriber(t, cfg, "g")
	d := kafkaNext(t, s, 30*time.Second)
	if err := s.Retry(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	d = kafkaNext(t, s, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.DeadLetter(ctx, d, "bad schema: no total"); err != nil {
		t.Fatal(err)
	}

	r := kafkaFirstRecord(t, cfg.Seeds, cfg.DLQTopic())
	h := map[string]string{}
	for _, kv := range r.Headers {
		h[kv.Key] = string(kv.Value)
	}
	want := map[string]string{
		HeaderReason: "bad schema: no total", HeaderAttempt: "2",
		HeaderEventID: ev[0].ID, HeaderKey: ev[0].Key, HeaderVersion: "1",
		HeaderDLQTopic: cfg.Topic, HeaderDLQPartition: strconv.FormatInt(d.Partition, 10),
		HeaderDLQOffset: strconv.FormatInt(d.Offset, 10), HeaderDLQSubscription: "g",
	}
	for k, v := range want {
		if h[k] != v {
			t.Errorf("dlq header %s = %q, want %q", k, h[k], v)
		}
	}
	if string(r.Key) != ev[0].Key || !bytes.Equal(r.Value, ev[0].Payload) {
		t.Errorf("dlq record key %q value %q", r.Key, r.Value)
	}
	// The final read finds it, with its subscription, reason and attempts.
	dls, err := KafkaDeadLetters(ctx, cfg, []string{"g"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (DeadLetter{Event: ev[0].ID, Source: ev[0].Source, Queue: "g", Reason: "bad schema: no total", Deliveries: 2}); len(dls) != 1 || dls[0] != want {
		t.Errorf("dead letters %+v, want [%+v]", dls, want)
	}

	// Dead-lettering acked it: a new member sees only a new marker.
	s.Close()
	kafkaPublishAll(t, p, kafkaEvents("dlq-marker", 1, 1))
	s2 := kafkaSubscriber(t, cfg, "g")
	if d := kafkaNext(t, s2, 30*time.Second); d.ID != "dlq-marker-0" {
		t.Fatalf("dead-lettered %s delivered again", d.ID)
	}
}

// kafkaFirstRecord reads topic from the start until one record arrives.
func kafkaFirstRecord(tb testing.TB, seeds []string, topic string) *kgo.Record {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			tb.Fatalf("no record on %s: %v", topic, ctx.Err())
		}
		if rs := fs.Records(); len(rs) > 0 {
			return rs[0]
		}
	}
}

// TestKafkaTwoSubscriptions: each consumer group gets every event.
func TestKafkaTwoSubscriptions(t *testing.T) {
	cfg := kafkaTopic(t, 3)
	p := kafkaPublisher(t, cfg, KafkaPublisherOptions{})
	kafkaPublishAll(t, p, kafkaEvents("two", 40, 4))
	for _, g := range []string{"inventory", "email"} {
		s := kafkaSubscriber(t, cfg, g)
		ids := map[string]bool{}
		for _, d := range kafkaReceiveAll(t, s, 40, 30*time.Second) {
			if d.Subscription != g {
				t.Fatalf("subscription %q, want %q", d.Subscription, g)
			}
			ids[d.ID] = true
		}
		if len(ids) != 40 {
			t.Fatalf("%s got %d distinct events, want 40", g, len(ids))
		}
	}
}

// TestKafkaHostileRecords: records our publisher would never write (no
// headers, repeated and non-UTF-8 headers, a nil key, a ~900 KB value)
// are delivered, not choked on.
func TestKafkaHostileRecords(t *testing.T) {
	cfg := kafkaTopic(t, 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Seeds...), kgo.DefaultProduceTopic(cfg.Topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	huge := bytes.Repeat([]byte{0xff}, 900<<10)
	recs := []*kgo.Record{
		{Value: []byte("no headers, no key")},
		{Key: []byte("k"), Headers: []kgo.RecordHeader{{Key: HeaderVersion, Value: []byte("seven")}, {Key: HeaderEventID, Value: []byte{0xc3, 0x28, 0xff}}}},
		{Key: []byte("k"), Headers: []kgo.RecordHeader{{Key: HeaderEventID, Value: []byte("a")}, {Key: HeaderEventID, Value: []byte("b")}, {Key: "", Value: nil}}},
		{Key: []byte("k"), Value: huge, Headers: []kgo.RecordHeader{{Key: HeaderEventID, Value: []byte("huge")}}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	s := kafkaSubscriber(t, cfg, "g")
	got := kafkaReceiveAll(t, s, len(recs), 30*time.Second)
	if got[0].ID != "" || got[0].Key != "" || len(got[0].Headers) != 0 || string(got[0].Payload) != "no headers, no key" {
		t.Errorf("headerless: %+v", got[0])
	}
	if got[1].Version != 0 || got[1].ID != string([]byte{0xc3, 0x28, 0xff}) {
		t.Errorf("malformed headers: %+v", got[1].Event)
	}
	if got[2].ID != "b" {
		t.Errorf("repeated header: id %q, want the last one", got[2].ID)
	}
	if got[3].ID != "huge" || !bytes.Equal(got[3].Payload, huge) {
		t.Errorf("huge: id %q, %d bytes", got[3].ID, len(got[3].Payload))
	}
}

// TestKafkaRebalanceNeverCommitsForeignPartition: a member holding a
// delivery whose partition moves to another member (a rebalance while it
// works) must not commit it: its Ack fails with ErrKafkaRevoked, the new
// owner gets the record, and the committed offset is the new owner's.
func TestKafkaRebalanceNeverCommitsForeignPartition(t *testing.T) {
	cfg := kafkaTopic(t, 2)
	p := kafkaPublisher(t, cfg, KafkaPublisherOptions{})
	// Events until both partitions have one.
	evs := kafkaEvents("rebal", 16, 16)
	kafkaPublishAll(t, p, evs)

	s1 := kafkaSubscriber(t, cfg, "g")
	held := map[int64]*Delivery{}
	deadline := time.Now().Add(30 * time.Second)
	for len(held) < 2 {
		d := kafkaNext(t, s1, time.Until(deadline))
		held[d.Partition] = d // one outstanding per partition: two Nexts, two partitions
	}

	// A second member joins; the cooperative balancer moves one partition.
	s2 := kafkaSubscriber(t, cfg, "g")
	moved := kafkaNext(t, s2, 60*time.Second)
	if moved.Offset != held[moved.Partition].Offset || moved.ID != held[moved.Partition].ID {
		t.Fatalf("new owner got %s@%d, want the unacked %s@%d", moved.ID, moved.Offset, held[moved.Partition].ID, held[moved.Partition].Offset)
	}
	ctx := context.Background()
	if err := s1.Ack(ctx, held[moved.Partition]); !errors.Is(err, ErrKafkaRevoked) {
		t.Fatalf("ack of a moved partition: %v, want ErrKafkaRevoked", err)
	}
	kept := held[1-moved.Partition]
	kafkaAck(t, s1, kept)

	offs := kafkaCommitted(t, cfg, "g")
	if got, ok := offs[int32(moved.Partition)]; ok {
		t.Fatalf("offset %d committed for the moved partition", got)
	}
	if got := offs[int32(kept.Partition)]; got != kept.Offset+1 {
		t.Fatalf("kept partition committed at %d, want %d", got, kept.Offset+1)
	}
	kafkaAck(t, s2, moved)
	if got := kafkaCommitted(t, cfg, "g")[int32(moved.Partition)]; got != moved.Offset+1 {
		t.Fatalf("moved partition committed at %d, want %d", got, moved.Offset+1)
	}
}

// kafkaCommitted returns group's committed offsets on cfg's topic.
func kafkaCommitted(tb testing.TB, cfg KafkaConfig, group string) map[int32]int64 {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Seeds...))
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(cl).FetchOffsets(ctx, group)
	if err != nil {
		tb.Fatal(err)
	}
	out := map[int32]int64{}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Topic == cfg.Topic && o.Err == nil && o.At >= 0 {
			out[o.Partition] = o.At
		}
	})
	return out
}

// TestKafkaUnconfirmedDoesNotWait: the acks=0 publisher returns at once
// even when the broker cannot be reached, where a confirmed publisher
// reports the outcome unknown when its ctx ends; and on a healthy broker
// acks=0 records do arrive.
func TestKafkaUnconfirmedDoesNotWait(t *testing.T) {
	k := sharedKafka(t)
	cfg := kafkaTopic(t, 3)
	un := kafkaPublisher(t, cfg, KafkaPublisherOptions{Mode: KafkaUnconfirmed})
	kafkaPublishAll(t, un, kafkaEvents("unconf", 20, 4))
	s := kafkaSubscriber(t, cfg, "g")
	kafkaReceiveAll(t, s, 20, 30*time.Second)

	conf := kafkaPublisher(t, cfg, KafkaPublisherOptions{})
	kafkaPublishAll(t, conf, kafkaEvents("warm", 3, 3)) // connected before the partition
	if err := k.link.Partition(link.Both); err != nil {
		t.Fatal(err)
	}
	defer k.link.Heal()

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for i, err := range un.Publish(ctx, kafkaEvents("unconf-part", 100, 10)) {
		if err != nil {
			t.Fatalf("unconfirmed publish %d: %v", i, err)
		}
	}
	if el := time.Since(start); el > 500*time.Millisecond {
		t.Errorf("unconfirmed publish took %v while partitioned", el)
	}

	start = time.Now()
	for i, err := range conf.Publish(ctx, kafkaEvents("conf-part", 10, 10)) {
		if !errors.Is(err, ErrUnconfirmed) {
			t.Fatalf("confirmed publish %d while partitioned: %v, want ErrUnconfirmed", i, err)
		}
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("confirmed publish took %v with a 2s ctx", el)
	}
}

// TestKafkaConfirmedPublishKilledBroker: with the broker killed, a
// confirmed Publish returns ErrUnconfirmed when its ctx ends, and with no
// deadline at all within the delivery timeout; it never hangs. The broker
// is started again afterwards and takes confirmed publishes.
func TestKafkaConfirmedPublishKilledBroker(t *testing.T) {
	k := sharedKafka(t)
	cfg := kafkaTopic(t, 3)
	p := kafkaPublisher(t, cfg, KafkaPublisherOptions{DeliveryTimeout: 3 * time.Second})
	kafkaPublishAll(t, p, kafkaEvents("kill-warm", 3, 3))

	kctx, kcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer kcancel()
	if err := k.k.Kill(kctx); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() { // leave the shared broker running for later tests
		if restarted {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := k.k.Start(ctx); err != nil {
			t.Errorf("restart kafka: %v", err)
		}
	})

	check := func(ctx context.Context, name string, bound time.Duration) {
		t.Helper()
		start := time.Now()
		errs := p.Publish(ctx, kafkaEvents(name, 10, 10))
		el := time.Since(start)
		for i, err := range errs {
			if !errors.Is(err, ErrUnconfirmed) {
				t.Errorf("%s: publish %d: %v, want ErrUnconfirmed", name, i, err)
			}
		}
		if el > bound {
			t.Errorf("%s: publish took %v, bound %v", name, el, bound)
		}
		t.Logf("%s: %v, first error: %v", name, el, errs[0])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	check(ctx, "ctx-bound", 3*time.Second)
	check(context.Background(), "timeout-bound", 15*time.Second)

	// Back up: the same publisher recovers.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel2()
	restarted = true
	if err := k.k.Start(ctx2); err != nil {
		t.Fatal(err)
	}
	// The client reconnects on its own; until the broker has reloaded
	// the partitions, a publish may still come back unconfirmed, as it
	// would to the relay, which tries again.
	for i := 0; ; i++ {
		errs := p.Publish(ctx2, kafkaEvents(fmt.Sprintf("kill-after-%d", i), 5, 5))
		err := errors.Join(errs...)
		if err == nil {
			break
		}
		if ctx2.Err() != nil {
			t.Fatalf("publisher did not recover after the broker restarted: %v", err)
		}
		t.Logf("publish after restart, try %d: %v", i, errs[0])
	}
}

// BenchmarkKafkaPublishConfirmed measures confirmed publish throughput in
// batches of 100 events (the relay's shape), reported as events/s.
func BenchmarkKafkaPublishConfirmed(b *testing.B) {
	cfg := kafkaTopic(b, 3)
	p := kafkaPublisher(b, cfg, KafkaPublisherOptions{})
	evs := kafkaEvents("bench", 100, 50)
	kafkaPublishAll(b, p, evs) // connect and load metadata outside the timing
	b.ResetTimer()
	for b.Loop() {
		kafkaPublishAll(b, p, evs)
	}
	b.ReportMetric(float64(b.N*len(evs))/b.Elapsed().Seconds(), "events/s")
}

// TestKafkaClassifyProduceErr: only a broker's definite, non-retriable
// refusal is "not written"; everything else may follow a lost answer.
func TestKafkaClassifyProduceErr(t *testing.T) {
	for _, c := range []struct {
		err     error
		unknown bool
	}{
		{context.DeadlineExceeded, true},
		{context.Canceled, true},
		{kgo.ErrRecordTimeout, true},
		{kgo.ErrRecordRetries, true},
		{kgo.ErrClientClosed, true},
		{kerr.NotLeaderForPartition, true},
		{kerr.RequestTimedOut, true},
		{fmt.Errorf("read: %w", errors.New("connection reset by peer")), true},
		{kerr.MessageTooLarge, false},
		{kerr.TopicAuthorizationFailed, false},
		{kerr.InvalidRecord, false},
	} {
		got := classifyKafkaProduceErr(c.err)
		if got == nil || errors.Is(got, ErrUnconfirmed) != c.unknown || !errors.Is(got, c.err) {
			t.Errorf("%v: got %v, want unknown=%v", c.err, got, c.unknown)
		}
	}
	if classifyKafkaProduceErr(nil) != nil {
		t.Error("nil error classified as a failure")
	}
}

// TestKafkaOptionsRejected: configurations that cannot work fail at
// construction, before any dial.
func TestKafkaOptionsRejected(t *testing.T) {
	if _, err := NewKafkaPublisher(KafkaConfig{}, KafkaPublisherOptions{}); err == nil {
		t.Error("publisher without seeds accepted")
	}
	if _, err := NewKafkaPublisher(KafkaConfig{Seeds: []string{"127.0.0.1:1"}}, KafkaPublisherOptions{Mode: "maybe"}); err == nil {
		t.Error("unknown publish mode accepted")
	}
	if _, err := NewKafkaSubscriber(KafkaConfig{Seeds: []string{"127.0.0.1:1"}}, "", KafkaSubscriberOptions{}); err == nil {
		t.Error("subscriber without a group accepted")
	}
	s, err := NewKafkaSubscriber(KafkaConfig{Seeds: []string{"127.0.0.1:1"}}, "g", KafkaSubscriberOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	foreign := &Delivery{}
	foreign.SetHandle("not kafka")
	if err := s.Ack(context.Background(), foreign); err == nil {
		t.Error("ack of a foreign delivery accepted")
	}
	s.Close()
	if _, err := s.Next(context.Background()); !errors.Is(err, kgo.ErrClientClosed) {
		t.Errorf("next after close: %v", err)
	}
}

// TestKafkaRedeliveryAfterKill: a consumer process killed with SIGKILL
// (no leave, no commit) holding an unacked record: once its session
// times out, a new member of the group gets everything from the last
// committed offset, the unacked record first.
func TestKafkaRedeliveryAfterKill(t *testing.T) {
	cfg := kafkaTopic(t, 1)
	p := kafkaPublisher(t, cfg, KafkaPublisherOptions{})
	evs := kafkaEvents("kill", 8, 1)
	kafkaPublishAll(t, p, evs)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestKafkaCrashHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), "DC_KAFKA_HELPER_SEEDS="+strings.Join(cfg.Seeds, ","), "DC_KAFKA_HELPER_TOPIC="+cfg.Topic)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	held := ""
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if id, ok := strings.CutPrefix(sc.Text(), "HELD "); ok {
			held = id
			break
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if held != evs[4].ID {
		t.Fatalf("helper held %q, want %s (did it start?)", held, evs[4].ID)
	}

	s := kafkaSubscriber(t, cfg, "g")
	for i, d := range kafkaReceiveAll(t, s, 4, 45*time.Second) {
		if want := evs[4+i].ID; d.ID != want || d.Attempt != 1 {
			t.Fatalf("after kill, delivery %d: %s attempt %d, want %s attempt 1", i, d.ID, d.Attempt, want)
		}
	}
}

// TestKafkaCrashHelper is the consumer process TestKafkaRedeliveryAfterKill
// kills: it acks four records, takes the fifth, says so and waits.
func TestKafkaCrashHelper(t *testing.T) {
	seeds := os.Getenv("DC_KAFKA_HELPER_SEEDS")
	if seeds == "" {
		t.Skip("helper process for TestKafkaRedeliveryAfterKill")
	}
	cfg := KafkaConfig{Seeds: strings.Split(seeds, ","), Topic: os.Getenv("DC_KAFKA_HELPER_TOPIC")}
	s, err := NewKafkaSubscriber(cfg, "g", KafkaSubscriberOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kafkaReceiveAll(t, s, 4, 30*time.Second)
	d := kafkaNext(t, s, 30*time.Second)
	fmt.Printf("HELD %s\n", d.ID)
	select {} // until killed
}

// TestKafkaLostConfirmIsUnknown: when the broker's answer is lost (the
// link holds everything broker → client past the delivery timeout), Publish says ErrUnconfirmed,
// not a failure, because the record was in fact written: a subscriber
// gets it once the link heals. This is the relay's `info` publish.
func TestKafkaLostConfirmIsUnknown(t *testing.T) {
	k := sharedKafka(t)
	cfg := kafkaTopic(t, 1)
	p := kafkaPublisher(t, cfg, KafkaPublisherOptions{})
	kafkaPublishAll(t, p, kafkaEvents("lost-warm", 1, 1))
	if err := k.link.Partition(link.Downstream); err != nil {
		t.Fatal(err)
	}
	defer k.link.Heal()
	ev := kafkaEvents("lost-confirm", 1, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := p.Publish(ctx, ev)[0]; !errors.Is(err, ErrUnconfirmed) {
		t.Fatalf("publish with the answer lost: %v, want ErrUnconfirmed", err)
	}
	if err := k.link.Heal(); err != nil {
		t.Fatal(err)
	}
	s := kafkaSubscriber(t, cfg, "g")
	got := kafkaReceiveAll(t, s, 2, 30*time.Second)
	if got[1].ID != ev[0].ID {
		t.Fatalf("got %s, want the unconfirmed %s", got[1].ID, ev[0].ID)
	}
}

// TestKafkaBatchPartitions: a batch fills up from several partitions,
// each partition's records in it consecutive and in order; a partition
// with records outstanding is not handed out again; a refused record
// (the last of its partition) ends its batch and comes alone once the
// records before it are settled; acking the batches commits every
// partition to its end.
func TestKafkaBatchPartitions(t *testing.T) {
	cfg := kafkaTopic(t, 4)
	p := kafkaPublisher(t, cfg, KafkaPublisherOptions{})
	evs := kafkaEvents("parts", 40, 8)
	kafkaPublishAll(t, p, evs)
	s := kafkaSubscriber(t, cfg, "g")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	refuse := map[string]bool{evs[39].ID: true}
	accept := func(d *Delivery) bool { return !refuse[d.ID] }

	var batches [][]*Delivery
	n := 0
	for n < len(evs)-1 {
		ds, err := s.NextBatch(ctx, 100, accept)
		if err != nil {
			t.Fatalf("after %d of %d deliveries: %v", n, len(evs), err)
		}
		batches = append(batches, ds)
		n += len(ds)
	}
	spans := false
	next := map[int64]int64{} // partition → next offset expected
	for _, ds := range batches {
		seen := map[int64]bool{}
		for _, d := range ds {
			if refuse[d.ID] && len(ds) > 1 {
				t.Fatalf("refused %s came in a batch of %d", d.ID, len(ds))
			}
			if d.Offset != next[d.Partition] {
				t.Fatalf("partition %d: offset %d, want %d (out of order or a gap)", d.Partition, d.Offset, next[d.Partition])
			}
			next[d.Partition]++
			seen[d.Partition] = true
		}
		spans = spans || len(seen) > 1
	}
	if !spans {
		t.Fatalf("no batch spans partitions: %d batches over %d partitions", len(batches), len(next))
	}
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	if extra, err := s.Next(short); err == nil {
		t.Fatalf("%s handed out while its partition's records are outstanding", extra.ID)
	}
	cancelShort()
	ack := func(ds []*Delivery) {
		t.Helper()
		for _, ch := range s.AckAsync(ctx, ds) {
			if err := <-ch; err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, ds := range batches {
		ack(ds)
	}
	ds, err := s.NextBatch(ctx, 100, accept)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || !refuse[ds[0].ID] || ds[0].Offset != next[ds[0].Partition] {
		t.Fatalf("got %d deliveries starting %s@%d, want the refused %s alone", len(ds), ds[0].ID, ds[0].Offset, evs[39].ID)
	}
	next[ds[0].Partition]++
	ack(ds)
	got := kafkaCommitted(t, cfg, "g")
	for part, end := range next {
		if got[int32(part)] != end {
			t.Fatalf("partition %d committed at %d, want %d", part, got[int32(part)], end)
		}
	}
}

// TestKafkaBatch: NextBatch hands out consecutive records of one
// partition, stops before a record accept refuses (which then comes
// alone), keeps the partition busy until the batch is settled oldest
// first, Retry of a batch's head puts the whole batch back in order, and
// AckAsync commits what it acked.
func TestKafkaBatch(t *testing.T) {
	cfg := kafkaTopic(t, 1)
	p := kafkaPublisher(t, cfg, KafkaPublisherOptions{})
	evs := kafkaEvents("batch", 12, 3)
	kafkaPublishAll(t, p, evs)
	s := kafkaSubscriber(t, cfg, "g")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	refuse := evs[5].ID
	accept := func(d *Delivery) bool { return d.ID != refuse }

	next := func(max int) []*Delivery {
		t.Helper()
		ds, err := s.NextBatch(ctx, max, accept)
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
	// The first batch may be short if the first fetch was; everything
	// comes in order, and the refused record alone.
	var got []*Delivery
	for len(got) < 5 {
		ds := next(5 - len(got))
		for _, d := range ds {
			if err := <-s.AckAsync(ctx, []*Delivery{d})[0]; err != nil {
				t.Fatal(err)
			}
		}
		got = append(got, ds...)
	}
	for i, d := range got {
		if d.ID != evs[i].ID {
			t.Fatalf("delivery %d is %s, want %s", i, d.ID, evs[i].ID)
		}
	}
	if ds := next(4); len(ds) != 1 || ds[0].ID != refuse {
		t.Fatalf("after a refused record: got %d deliveries starting %s, want %s alone", len(ds), ds[0].ID, refuse)
	} else {
		kafkaAck(t, s, ds[0])
	}

	batch := next(3)
	if len(batch) != 3 || batch[0].ID != evs[6].ID || batch[2].ID != evs[8].ID {
		t.Fatalf("batch: %d deliveries from %s, want %s..%s", len(batch), batch[0].ID, evs[6].ID, evs[8].ID)
	}
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	if extra, err := s.Next(short); err == nil {
		t.Fatalf("%s handed out while a batch of its partition is outstanding", extra.ID)
	}
	cancelShort()
	if err := s.Ack(ctx, batch[1]); err == nil {
		t.Fatal("ack of a batch's second delivery before its first succeeded")
	}
	if err := s.Retry(ctx, batch[0]); err != nil {
		t.Fatal(err)
	}
	again := next(3)
	if len(again) != 3 || again[0].ID != evs[6].ID || again[0].Attempt != 2 || again[1].Attempt != 1 || again[2].ID != evs[8].ID {
		t.Fatalf("after Retry: %d deliveries %s attempt %d, want the batch back with its head at attempt 2", len(again), again[0].ID, again[0].Attempt)
	}
	var last <-chan error
	for _, d := range again {
		last = s.AckAsync(ctx, []*Delivery{d})[0]
	}
	if err := <-last; err != nil {
		t.Fatal(err)
	}
	if got := kafkaCommitted(t, cfg, "g")[0]; got != again[2].Offset+1 {
		t.Fatalf("committed %d, want %d", got, again[2].Offset+1)
	}
}
