package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/deliverycheck/deliverycheck/cluster/link"
	"github.com/deliverycheck/deliverycheck/internal/testenv"
)

// dialRecorder records every broker address a kgo client connects to, so
// a test can prove which path (proxy or direct) a request took.
type dialRecorder struct {
	mu    sync.Mutex
	addrs []string
}

func (r *dialRecorder) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil || meta.NodeID < 0 { // negative ids are seeds
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addrs = append(r.addrs, net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port))))
}

func (r *dialRecorder) dialed() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.addrs)
}

// newKafkaClient returns a client seeded with seed and closed at the end
// of the test. Request timeouts are short so a partitioned request is
// retried on a fresh connection soon after the partition heals.
func newKafkaClient(t *testing.T, seed string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	opts = append([]kgo.Opt{
		kgo.SeedBrokers(seed),
		kgo.AllowAutoTopicCreation(),
		kgo.DialTimeout(time.Second),
		kgo.ProduceRequestTimeout(2 * time.Second),
		kgo.RequestTimeoutOverhead(time.Second),
		kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }),
	}, opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// consumeValue reads topic from the start until a record with value
// shows up or ctx ends.
func consumeValue(ctx context.Context, seed, topic, value string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seed), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("record %q not consumed: %w", value, ctx.Err())
		}
		var found bool
		fs.EachRecord(func(r *kgo.Record) { found = found || string(r.Value) == value })
		if found {
			return nil
		}
	}
}

// roundTrip is the fastest of n metadata round trips through cl.
func roundTrip(t *testing.T, ctx context.Context, cl *kgo.Client, n int) time.Duration {
	t.Helper()
	best := time.Hour
	for range n {
		start := time.Now()
		if err := cl.Ping(ctx); err != nil {
			t.Fatalf("ping: %v", err)
		}
		best = min(best, time.Since(start))
	}
	return best
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// TestKafka starts one broker and runs every check on it in turn: a JVM
// per check would starve a 2-core machine.
func TestKafka(t *testing.T) {
	testenv.SkipIfShort(t, "starts a real Kafka broker")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, err := PrepareKafka(ctx, "")
	testenv.MustHaveServer(t, "kafka", err)

	// The link exists before the broker, so the broker can advertise it.
	links := link.NewServer()
	defer links.Close()
	ln, err := links.Add("kafka", "127.0.0.1:0", "127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	k, err := NewKafka(KafkaOptions{Options: Options{Logger: testLogger(t)}, Advertise: ln.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if err := ln.SetUpstream(k.Endpoint()); err != nil {
		t.Fatal(err)
	}
	var (
		pidsMu sync.Mutex
		pids   []int // every pid seen during the run, for the cleanup check
	)
	record := func() {
		pidsMu.Lock()
		defer pidsMu.Unlock()
		pids = append(pids, k.PIDs()...)
	}

	start := time.Now()
	if err := k.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("cold start: %v, version %q, endpoint %s, advertised %s", time.Since(start).Round(time.Millisecond), k.Version(), k.Endpoint(), k.Advertised())
	record()
	if !regexp.MustCompile(`^Apache Kafka \d+\.\d+\.\d+`).MatchString(k.Version()) {
		t.Errorf("Version() = %q, want Apache Kafka x.y.z", k.Version())
	}

	t.Run("acks=all record survives kill -9", func(t *testing.T) {
		cl := newKafkaClient(t, k.Endpoint(), kgo.RequiredAcks(kgo.AllISRAcks()))
		value := fmt.Sprintf("acked-%d", time.Now().UnixNano())
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := cl.ProduceSync(pctx, &kgo.Record{Topic: "durable", Value: []byte(value)}).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		record()
		before := k.PIDs()
		if err := k.Kill(ctx); err != nil {
			t.Fatal(err)
		}
		for _, pid := range before {
			if pid != k.g.PID() && alive(pid) {
				t.Fatalf("pid %d alive after kill", pid)
			}
		}
		start := time.Now()
		if err := k.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("start after kill -9: %v", time.Since(start).Round(time.Millisecond))
		record()
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := consumeValue(cctx, k.Endpoint(), "durable", value); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("pause makes calls time out, resume restores the client", func(t *testing.T) {
		cl := newKafkaClient(t, k.Endpoint())
		if err := cl.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		if err := k.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		resumed := false
		defer func() {
			if !resumed {
				_ = k.Resume(ctx)
			}
		}()
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		err := cl.Ping(pctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("ping while paused: %v, want deadline exceeded", err)
		}
		if err := k.Resume(ctx); err != nil {
			t.Fatal(err)
		}
		resumed = true
		waitFor(t, ctx, 30*time.Second, func() error {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			return cl.ProduceSync(pctx, &kgo.Record{Topic: "paused", Value: []byte("after resume")}).FirstErr()
		})
	})

	t.Run("proxy link: partition, heal, latency", func(t *testing.T) {
		// Seeded with the direct endpoint: only the advertised address
		// can send the client through the proxy.
		dials := &dialRecorder{}
		cl := newKafkaClient(t, k.Endpoint(), kgo.WithHooks(dials), kgo.DefaultProduceTopic("linked"))
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := cl.ProduceSync(pctx, kgo.StringRecord("before partition")).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		if d := dials.dialed(); len(d) == 0 || slices.ContainsFunc(d, func(a string) bool { return a != ln.Addr() }) {
			t.Fatalf("client dialed %v after bootstrap, want only the link %s", d, ln.Addr())
		}

		if err := ln.Partition(link.Both); err != nil {
			t.Fatal(err)
		}
		healed := false
		defer func() {
			if !healed {
				_ = ln.Heal()
			}
		}()
		done := make(chan error, 1)
		go func() {
			done <- cl.ProduceSync(ctx, kgo.StringRecord("during partition")).FirstErr()
		}()
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("produce succeeded through a partitioned link")
			}
			t.Logf("produce during partition failed: %v", err)
		case <-time.After(2 * time.Second):
			t.Log("produce during partition still pending after 2s, as expected")
		}
		pctx, cancel = context.WithTimeout(ctx, 500*time.Millisecond)
		err := cl.Ping(pctx)
		cancel()
		if err == nil {
			t.Fatal("ping succeeded through a partitioned link")
		}

		if err := ln.Heal(); err != nil {
			t.Fatal(err)
		}
		healed = true
		select {
		case err := <-done:
			if err != nil {
				// Failed while partitioned: service is back if a new
				// produce goes through.
				waitFor(t, ctx, 30*time.Second, func() error {
					pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
					defer cancel()
					return cl.ProduceSync(pctx, kgo.StringRecord("after heal")).FirstErr()
				})
			}
		case <-time.After(30 * time.Second):
			t.Fatal("produce still pending 30s after the partition healed")
		}

		base := roundTrip(t, ctx, cl, 5)
		if err := ln.Latency(link.Upstream, 100*time.Millisecond, 0); err != nil {
			t.Fatal(err)
		}
		slow := roundTrip(t, ctx, cl, 3)
		if err := ln.Heal(); err != nil {
			t.Fatal(err)
		}
		t.Logf("round trip: %v healthy, %v with 100ms upstream latency", base, slow)
		if slow < 100*time.Millisecond || slow-base < 90*time.Millisecond {
			t.Fatalf("latency toxic not seen: %v healthy, %v with 100ms", base, slow)
		}
	})

	t.Run("graceful restart keeps data and ports", func(t *testing.T) {
		cl := newKafkaClient(t, k.Endpoint())
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := cl.ProduceSync(pctx, &kgo.Record{Topic: "restarted", Value: []byte("kept")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		record()
		start := time.Now()
		if err := k.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("graceful restart: %v", time.Since(start).Round(time.Millisecond))
		record()
		if err := consumeValue(pctx, k.Endpoint(), "restarted", "kept"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("close leaves no process and no temp dir", func(t *testing.T) {
		record()
		dir := k.Dir()
		if err := k.Close(); err != nil {
			t.Fatal(err)
		}
		pidsMu.Lock()
		defer pidsMu.Unlock()
		if len(pids) == 0 {
			t.Fatal("no pids recorded")
		}
		for _, pid := range pids {
			if alive(pid) {
				t.Errorf("pid %d still alive after Close", pid)
			}
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("temp dir %s still there after Close (%v)", dir, err)
		}
	})
}

// BenchmarkKafkaColdStart measures NewKafka + Start until ready, with the
// per-machine cache already built (as after `deliverycheck deps`).
func BenchmarkKafkaColdStart(b *testing.B) {
	ctx := context.Background()
	_, err := PrepareKafka(ctx, "")
	testenv.MustHaveServer(b, "kafka", err)
	var total time.Duration
	n := 0
	for b.Loop() {
		n++
		k, err := NewKafka(KafkaOptions{})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		err = k.Start(ctx)
		total += time.Since(start)
		b.StopTimer()
		if cerr := k.Close(); cerr != nil || err != nil {
			b.Fatal(errors.Join(err, cerr))
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(n), "ms/start")
}

// BenchmarkKafkaRestart measures a graceful Restart until ready again.
func BenchmarkKafkaRestart(b *testing.B) {
	ctx := context.Background()
	_, err := PrepareKafka(ctx, "")
	testenv.MustHaveServer(b, "kafka", err)
	k, err := NewKafka(KafkaOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer k.Close()
	if err := k.Start(ctx); err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	n := 0
	for b.Loop() {
		n++
		start := time.Now()
		if err := k.Restart(ctx); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(n), "ms/restart")
}
