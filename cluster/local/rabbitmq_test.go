package local

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/cluster/link"
	"github.com/deliverycheck/deliverycheck/internal/logtail"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/deliverycheck/deliverycheck/cluster/probe"
	"github.com/deliverycheck/deliverycheck/internal/testenv"
)

// quorum is the argument that makes a queue a quorum queue: replicated
// through Raft and fsynced before a publisher confirm, which is what makes
// a confirmed message survive kill -9.
var quorum = amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}

// newTestRabbitMQ makes a node, or skips the test when RabbitMQ is not
// installed (fails it under testenv.RequireServers).
func newTestRabbitMQ(tb testing.TB) *RabbitMQ {
	tb.Helper()
	testenv.SkipIfShort(tb, "starts a real RabbitMQ node")
	r, err := NewRabbitMQ(Options{})
	testenv.MustHaveServer(tb, "rabbitmq", err)
	return r
}

// pidRecorder remembers every process a service showed, with its command
// name, so a test can check all of them are gone at the end.
type pidRecorder map[int]string

func (rec pidRecorder) record(s interface{ PIDs() []int }) {
	for _, pid := range s.PIDs() {
		if _, ok := rec[pid]; !ok {
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
			rec[pid] = strings.TrimSpace(string(b))
		}
	}
}

// procStates renders each pid with its command and run state (R, S, T...).
func procStates(pids []int) string {
	var out []string
	for _, pid := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i, j := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if i < 0 || j < i || j+2 >= len(s) {
			continue
		}
		out = append(out, fmt.Sprintf("%d(%s)=%c", pid, s[i+1:j], s[j+2]))
	}
	return strings.Join(out, " ")
}

func (rec pidRecorder) alive() []string {
	var out []string
	for pid, name := range rec {
		if alive(pid) {
			out = append(out, fmt.Sprintf("%d (%s)", pid, name))
		}
	}
	slices.Sort(out)
	return out
}

func (rec pidRecorder) names() []string {
	var out []string
	for _, n := range rec {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// amqpConn dials url; the connection lives until ctx ends or the test does.
func amqpConn(t *testing.T, ctx context.Context, url string) *amqp.Connection {
	t.Helper()
	c, err := probe.DialAMQP(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.CloseDeadline(time.Now().Add(time.Second)) })
	return c
}

// confirmChannel opens a channel in confirm mode and declares queue q as a
// durable quorum queue.
func confirmChannel(t *testing.T, c *amqp.Connection, q string) *amqp.Channel {
	t.Helper()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(q, true, false, false, false, quorum); err != nil {
		t.Fatal(err)
	}
	return ch
}

// publish sends one persistent message to queue q and returns its pending
// confirm.
func publish(ctx context.Context, ch *amqp.Channel, q, body string) (*amqp.DeferredConfirmation, error) {
	return ch.PublishWithDeferredConfirmWithContext(ctx, "", q, true, false, amqp.Publishing{
		DeliveryMode: amqp.Persistent,
		MessageId:    body,
		Body:         []byte(body),
	})
}

// publishConfirmed publishes and waits for the broker's ack.
func publishConfirmed(t *testing.T, ctx context.Context, ch *amqp.Channel, q, body string) {
	t.Helper()
	dc, err := publish(ctx, ch, q, body)
	if err != nil {
		t.Fatal(err)
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil || !ok {
		t.Fatalf("publish %q: acked=%v err=%v", body, ok, err)
	}
}

// getAll reads every message now in q (acking each) on a fresh connection,
// retrying until want messages came back: after a restart a quorum queue
// answers only once its Raft member has recovered and elected itself.
func getAll(t *testing.T, ctx context.Context, r *RabbitMQ, q string, want int) []string {
	t.Helper()
	var got []string
	waitFor(t, ctx, 30*time.Second, func() error {
		got = got[:0]
		c, err := probe.DialAMQP(ctx, r.URL(r.Endpoint()))
		if err != nil {
			return err
		}
		defer c.CloseDeadline(time.Now().Add(time.Second))
		ch, err := c.Channel()
		if err != nil {
			return err
		}
		for {
			d, ok, err := ch.Get(q, false)
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			got = append(got, string(d.Body))
		}
		if len(got) < want {
			return fmt.Errorf("got %v, want %d messages", got, want)
		}
		return ch.Ack(0, true) // multiple: everything delivered on this channel
	})
	return got
}

// rtt is the median time of a synchronous AMQP call (a passive queue
// declare is one request and one reply, nothing else).
func rtt(t *testing.T, ch *amqp.Channel, q string) time.Duration {
	t.Helper()
	var ds []time.Duration
	for range 5 {
		start := time.Now()
		if _, err := ch.QueueDeclarePassive(q, true, false, false, false, quorum); err != nil {
			t.Fatal(err)
		}
		ds = append(ds, time.Since(start))
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// TestRabbitMQ starts one node and breaks it in turn: kill -9 with a
// confirmed message in a quorum queue, pause and resume, then a partition
// and latency through a proxy link, and finally Close, after which no
// process it ever had may be alive and its temp dir must be gone.
func TestRabbitMQ(t *testing.T) {
	r := newTestRabbitMQ(t)
	closed := false
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("tail of %s:\n%s", r.LogFile(), logtail.File(r.LogFile(), 80))
		}
		if !closed {
			_ = r.Close()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	endpoint := r.Endpoint() // known before Start: a link is made first
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if r.Endpoint() != endpoint {
		t.Fatalf("endpoint moved: %s -> %s", endpoint, r.Endpoint())
	}
	if v := r.Version(); !strings.HasPrefix(v, "RabbitMQ 3.") && !strings.HasPrefix(v, "RabbitMQ 4.") {
		t.Fatalf("version %q", v)
	}
	t.Logf("%s, node %s, endpoint %s, logs %s", r.Version(), r.NodeName(), r.Endpoint(), r.LogFile())
	rec := pidRecorder{}
	rec.record(r)

	t.Run("kill -9 keeps a confirmed persistent message", func(t *testing.T) {
		c := amqpConn(t, ctx, r.URL(r.Endpoint()))
		ch := confirmChannel(t, c, "dc.crash")
		if err := r.WaitQuorumQueueDurable(ctx, "/", "dc.crash"); err != nil {
			t.Fatal(err)
		}
		publishConfirmed(t, ctx, ch, "dc.crash", "confirmed-before-kill")
		rec.record(r)
		if err := r.Kill(ctx); err != nil {
			t.Fatal(err)
		}
		// Only the guard and epmd may outlive the server's kill.
		keep := append([]int{r.g.PID()}, r.epmd.PIDs()...)
		for pid, name := range rec {
			if alive(pid) && !slices.Contains(keep, pid) {
				t.Fatalf("pid %d (%s) alive after kill", pid, name)
			}
		}
		if err := r.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		rec.record(r)
		got := getAll(t, ctx, r, "dc.crash", 1)
		if !slices.Equal(got, []string{"confirmed-before-kill"}) {
			t.Fatalf("after kill -9 and restart got %v", got)
		}
	})

	t.Run("pause times a call out, resume revives the same connection", func(t *testing.T) {
		c := amqpConn(t, ctx, r.URL(r.Endpoint()))
		ch := confirmChannel(t, c, "dc.pause")
		publishConfirmed(t, ctx, ch, "dc.pause", "before-pause")
		if err := r.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		paused := true
		defer func() {
			if paused {
				_ = r.Resume(ctx)
			}
		}()
		dc, err := publish(ctx, ch, "dc.pause", "during-pause")
		if err != nil {
			t.Fatal(err) // the write lands in the socket buffer
		}
		wctx, wcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		ok, err := dc.WaitContext(wctx)
		wcancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			// States 'T' mean stopped: anything else means the node was
			// never frozen or something else resumed it.
			t.Fatalf("confirm from a paused broker: acked=%v err=%v, want a timeout; process states: %s", ok, err, procStates(r.base.PIDs()))
		}
		if err := r.Resume(ctx); err != nil {
			t.Fatal(err)
		}
		paused = false
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			t.Fatalf("confirm after resume: acked=%v err=%v", ok, err)
		}
		publishConfirmed(t, ctx, ch, "dc.pause", "after-resume")
		q, err := ch.QueueDeclarePassive("dc.pause", true, false, false, false, quorum)
		if err != nil || q.Messages != 3 {
			t.Fatalf("queue after resume: %+v err=%v, want 3 messages", q, err)
		}
	})

	t.Run("link partition and latency", func(t *testing.T) {
		srv := link.NewServer()
		defer srv.Close()
		l, err := srv.Add("rabbitmq", "127.0.0.1:0", r.Endpoint())
		if err != nil {
			t.Fatal(err)
		}
		url := r.URL(l.Addr())
		c := amqpConn(t, ctx, url)
		ch := confirmChannel(t, c, "dc.link")
		publishConfirmed(t, ctx, ch, "dc.link", "through-link")

		if err := l.Partition(link.Both); err != nil {
			t.Fatal(err)
		}
		// A call on an open connection hangs; the deadline bounds it.
		dc, err := publish(ctx, ch, "dc.link", "during-partition")
		if err != nil {
			t.Fatal(err)
		}
		wctx, wcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		ok, err := dc.WaitContext(wctx)
		wcancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("confirm across a partition: acked=%v err=%v, want a timeout", ok, err)
		}
		// A new connection cannot complete its handshake.
		start := time.Now()
		dctx, dcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		pc, err := probe.DialAMQP(dctx, url)
		dcancel()
		if err == nil {
			_ = pc.CloseDeadline(time.Now().Add(time.Second))
			t.Fatal("dial across a partition succeeded")
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("dial across a partition took %v despite its 500ms deadline", d)
		}

		if err := l.Heal(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, 15*time.Second, func() error {
			dctx, dcancel := context.WithTimeout(ctx, 2*time.Second)
			defer dcancel()
			c, err := probe.DialAMQP(dctx, url)
			if err != nil {
				return err
			}
			return c.CloseDeadline(time.Now().Add(time.Second))
		})
		hc := amqpConn(t, ctx, url)
		hch := confirmChannel(t, hc, "dc.link")
		publishConfirmed(t, ctx, hch, "dc.link", "after-heal")

		base := rtt(t, hch, "dc.link")
		if err := l.Latency(link.Downstream, 100*time.Millisecond, 0); err != nil {
			t.Fatal(err)
		}
		slow := rtt(t, hch, "dc.link")
		if err := l.Heal(); err != nil {
			t.Fatal(err)
		}
		t.Logf("round trip: %v without latency, %v with 100ms downstream latency", base, slow)
		if slow-base < 90*time.Millisecond {
			t.Fatalf("latency toxic not visible: %v -> %v", base, slow)
		}
	})

	t.Run("stop while paused is graceful and restart keeps data", func(t *testing.T) {
		c := amqpConn(t, ctx, r.URL(r.Endpoint()))
		ch := confirmChannel(t, c, "dc.graceful")
		if err := r.WaitQuorumQueueDurable(ctx, "/", "dc.graceful"); err != nil {
			t.Fatal(err)
		}
		publishConfirmed(t, ctx, ch, "dc.graceful", "before-stop")
		sigterms := func() int {
			b, _ := os.ReadFile(r.LogFile())
			return strings.Count(string(b), "SIGTERM received - shutting down")
		}
		before := sigterms()
		if err := r.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := r.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("restart from paused took %v", time.Since(start))
		if sigterms() != before+1 {
			t.Errorf("node log shows no clean SIGTERM shutdown:\n%s", logtail.File(r.LogFile(), 120))
		}
		rec.record(r)
		got := getAll(t, ctx, r, "dc.graceful", 1)
		if !slices.Equal(got, []string{"before-stop"}) {
			t.Fatalf("after a graceful restart got %v", got)
		}
	})

	t.Run("close leaves nothing behind", func(t *testing.T) {
		rec.record(r)
		names := rec.names()
		for _, want := range []string{"beam.smp", "epmd"} {
			if !slices.Contains(names, want) {
				t.Errorf("recorded processes %v lack %s: the check would prove nothing", names, want)
			}
		}
		t.Logf("recorded %d processes: %v", len(rec), names)
		closed = true
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if left := rec.alive(); len(left) > 0 {
			t.Fatalf("alive after Close: %v", left)
		}
		if _, err := os.Stat(r.Dir()); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("temp dir %s after Close: %v", r.Dir(), err)
		}
		if err := r.Start(ctx); err == nil {
			t.Fatal("Start after Close succeeded")
		}
		if err := r.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	})
}

// harnessChildEnv marks the re-executed test binary of
// TestRabbitMQHarnessDies.
const harnessChildEnv = "DELIVERYCHECK_RABBITMQ_HARNESS_CHILD"

// TestRabbitMQHarnessDies proves the guard: a harness that starts a node
// and is then killed with SIGKILL (no deferred cleanup runs) still leaves
// no process and no temp dir behind.
//
// Flow: re-exec this test binary as the "harness"; it starts a node and
// prints its pids and temp dir; the parent SIGKILLs it and waits until
// every one of those pids is gone and the dir is removed.
func TestRabbitMQHarnessDies(t *testing.T) {
	if os.Getenv(harnessChildEnv) != "" {
		harnessChild(t)
		return
	}
	testenv.SkipIfShort(t, "starts a real RabbitMQ node")
	_, _, err := rabbitMQBinaries()
	testenv.MustHaveServer(t, "rabbitmq", err)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestRabbitMQHarnessDies$", "-test.v")
	cmd.Env = append(os.Environ(), harnessChildEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	var pids []int
	var dir string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "HARNESS-READY "); ok {
			f := strings.Fields(rest)
			dir = f[0]
			for _, s := range f[1:] {
				pid, _ := strconv.Atoi(s)
				pids = append(pids, pid)
			}
			break
		}
		t.Log("child: " + sc.Text())
	}
	if dir == "" {
		t.Fatalf("child harness did not start a node: %v", sc.Err())
	}
	t.Logf("child harness runs node with pids %v in %s; SIGKILL it", pids, dir)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waitFor(t, ctx, 20*time.Second, func() error {
		var left []int
		for _, pid := range pids {
			if alive(pid) {
				left = append(left, pid)
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("alive: %v", left)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("temp dir %s still there", dir)
		}
		return nil
	})
}

// harnessChild is the harness that gets killed: it starts a node, reports
// it, and waits to die.
func harnessChild(t *testing.T) {
	r, err := NewRabbitMQ(Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := r.Start(ctx); err != nil {
		_ = r.Close()
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("HARNESS-READY " + r.Dir())
	for _, pid := range r.PIDs() {
		b.WriteString(" " + strconv.Itoa(pid))
	}
	fmt.Println(b.String())
	<-ctx.Done() // the parent kills us long before
	_ = r.Close()
	t.Fatal("child harness was not killed")
}

// BenchmarkRabbitMQColdStart measures a fresh node (new dirs, new Mnesia
// and Raft data) from Start to ready, i.e. to a declared quorum queue.
func BenchmarkRabbitMQColdStart(b *testing.B) {
	ctx := context.Background()
	var total time.Duration
	for range b.N {
		b.StopTimer()
		r := newTestRabbitMQ(b)
		b.StartTimer()
		start := time.Now()
		if err := r.Start(ctx); err != nil {
			_ = r.Close()
			b.Fatal(err)
		}
		total += time.Since(start)
		b.StopTimer()
		if err := r.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/start")
}

// BenchmarkRabbitMQRestart measures Restart of a node holding a quorum
// queue: graceful stop, then start on the same data until ready.
func BenchmarkRabbitMQRestart(b *testing.B) {
	ctx := context.Background()
	r := newTestRabbitMQ(b)
	defer r.Close()
	if err := r.Start(ctx); err != nil {
		b.Fatal(err)
	}
	var stop, start time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if err := r.Stop(ctx); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := r.Start(ctx); err != nil {
			b.Fatal(err)
		}
		stop += t1.Sub(t0)
		start += time.Since(t1)
	}
	b.ReportMetric(float64((stop+start).Milliseconds())/float64(b.N), "ms/restart")
	b.ReportMetric(float64(stop.Milliseconds())/float64(b.N), "ms/stop")
	b.ReportMetric(float64(start.Milliseconds())/float64(b.N), "ms/start")
}
