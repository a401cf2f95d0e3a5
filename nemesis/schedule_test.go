package nemesis_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/cluster/link"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/internal/testenv"
	"github.com/deliverycheck/deliverycheck/nemesis"
)

func pipelineTargets() nemesis.Targets {
	return nemesis.DefaultTargets([]string{"relay-0", "producer-0", "consumer-inventory-0", "consumer-email-0", "producer-1"})
}

func TestRandomIsReproducible(t *testing.T) {
	all := []string{"process", "failpoint", "network"}
	a := nemesis.Random(42, all, time.Second, time.Minute, pipelineTargets())
	b := nemesis.Random(42, all, time.Second, time.Minute, pipelineTargets())
	if a.String() != b.String() {
		t.Fatalf("same seed, different schedules:\n%s\n%s", a, b)
	}
	// The order inputs are listed in does not matter.
	shuffled := pipelineTargets()
	slices.Reverse(shuffled.Workers)
	c := nemesis.Random(42, []string{"network", "process", "failpoint", "network"}, time.Second, time.Minute, shuffled)
	if a.String() != c.String() {
		t.Fatalf("same seed, inputs reordered, different schedules:\n%s\n%s", a, c)
	}
	if d := nemesis.Random(43, all, time.Second, time.Minute, pipelineTargets()); d.String() == a.String() {
		t.Fatalf("seeds 42 and 43 made the same schedule: %s", a)
	}
	if a.Seed != 42 || !strings.HasPrefix(a.String(), "seed=42: ") {
		t.Fatalf("seed not kept: %s", a)
	}
}

func TestRandomShape(t *testing.T) {
	kindsOf := func(fams ...string) []nemesis.Kind {
		var out []nemesis.Kind
		for _, f := range fams {
			out = append(out, nemesis.Families()[f]...)
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		families  []string
		targets   nemesis.Targets
		wantSteps int
		kinds     []nemesis.Kind
	}{
		{"all families", []string{"process", "failpoint", "network"}, pipelineTargets(), 30, kindsOf("process", "failpoint", "network")},
		{"network only", []string{"network"}, pipelineTargets(), 30, kindsOf("network")},
		{"failpoints only", []string{"failpoint"}, pipelineTargets(), 30, kindsOf("failpoint")},
		{"unknown family ignored", []string{"meteor", "process"}, pipelineTargets(), 30, kindsOf("process")},
		{"nothing to hit", []string{"network"}, nemesis.Targets{Workers: []string{"relay-0"}}, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := nemesis.Random(7, tc.families, time.Second, time.Minute, tc.targets)
			if len(s.Steps) != tc.wantSteps {
				t.Fatalf("%d steps, want %d: %s", len(s.Steps), tc.wantSteps, s)
			}
			for i, st := range s.Steps {
				// Quiet, fault, quiet, fault, ...
				if want := time.Duration(2*i+1) * time.Second; st.At != want {
					t.Errorf("step %d at %s, want %s", i, st.At, want)
				}
				if st.For > time.Second {
					t.Errorf("step %d lasts %s, longer than the interval", i, st.For)
				}
				if !slices.Contains(tc.kinds, st.Fault.Kind) {
					t.Errorf("step %d is a %s, not in %v", i, st.Fault.Kind, tc.families)
				}
				// Every step reads back as itself: the recorded schedule is replayable.
				again, err := nemesis.ParseStep(st.String())
				if err != nil || again.String() != st.String() {
					t.Errorf("step %q reads back as %q, %v", st, again, err)
				}
			}
		})
	}
}

func TestDefaultTargetsFailpoints(t *testing.T) {
	got := pipelineTargets().Failpoints
	want := map[string][]string{
		"consumer-email-0":     {"consumer.after-commit-before-ack=kill(1)", "consumer.after-effect-before-commit=kill(1)"},
		"consumer-inventory-0": {"consumer.after-commit-before-ack=kill(1)", "consumer.after-effect-before-commit=kill(1)"},
		"producer-0":           {"producer.after-commit=kill(1)"},
		"producer-1":           {"producer.after-commit=kill(1)"},
		"relay-0":              {"relay.after-publish-before-mark=kill(1)", "relay.before-publish=kill(1)"},
	}
	if len(got) != len(want) {
		t.Fatalf("failpoints = %v", got)
	}
	for w, terms := range want {
		if !slices.Equal(got[w], terms) {
			t.Errorf("%s: %v, want %v", w, got[w], terms)
		}
	}
}

// echoServer answers each line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

// flows reports whether a new connection through l echoes a line in time.
func flows(l *link.Link, d time.Duration) error {
	c, err := net.DialTimeout("tcp", l.Addr(), d)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	_, err = bufio.NewReader(c).ReadString('\n')
	return err
}

// syncBuffer is a bytes.Buffer safe for the recorder and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) history(t *testing.T) history.History {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	h, _, err := history.Read(bytes.NewReader(s.b.Bytes()), "nemesis")
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// linkEnv is an Env with one link, "echo", in front of an echo server,
// and no servers or workers.
func linkEnv(t *testing.T) (*nemesis.Env, *link.Link, *syncBuffer) {
	t.Helper()
	ls := link.NewServer()
	t.Cleanup(func() { ls.Close() })
	l, err := ls.Add("echo", "127.0.0.1:0", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	buf := &syncBuffer{}
	env := &nemesis.Env{Links: ls, Log: slog.New(slog.DiscardHandler), Recorder: history.NewWriterRecorder(buf, "nemesis", time.Now()), HealTimeout: 10 * time.Second}
	return env, l, buf
}

func waitFor(t *testing.T, d time.Duration, cond func() error) {
	t.Helper()
	testenv.Eventually(t, context.Background(), d, "", cond)
}

func faultOps(h history.History) []string {
	var out []string
	for _, op := range h {
		if op.F == history.Fault {
			s := op.Type.String() + " " + op.Value.Fault + " " + op.Value.Target
			if op.Value.Error != "" {
				s += " error"
			}
			out = append(out, s)
		}
	}
	return out
}

// Cancelling a schedule in the middle of its faults still heals them,
// records the heals, and lets traffic flow again.
func TestRunCancelledMidFaultHeals(t *testing.T) {
	env, l, buf := linkEnv(t)
	var steps []nemesis.Step
	for _, s := range []string{
		"at 0s: partition echo for 1h",
		"at 0s: latency echo downstream 50ms for 1h",
		"at 1h: refuse echo for 1s", // never starts
	} {
		st, err := nemesis.ParseStep(s)
		if err != nil {
			t.Fatal(err)
		}
		steps = append(steps, st)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- nemesis.Fixed(steps...).Run(ctx, env) }()
	waitFor(t, 5*time.Second, func() error {
		if n := len(env.Active()); n != 2 {
			return errors.New("faults not active yet")
		}
		return nil
	})
	if err := flows(l, 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("partitioned link: want a hang, got %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if a := env.Active(); len(a) != 0 {
		t.Fatalf("still active after Run: %v", a)
	}
	if a := l.Active(); len(a) != 0 {
		t.Fatalf("link still has %v", a)
	}
	if err := flows(l, 2*time.Second); err != nil {
		t.Fatalf("after cancel: %v", err)
	}
	got := faultOps(buf.history(t))
	// The partition held the probe's ping, so the downstream latency
	// never saw a byte: it did not bite.
	want := []string{"ok schedule ", "invoke partition echo", "invoke latency echo", "fail latency echo error", "ok partition echo"}
	// The two steps start concurrently: either order is right.
	if len(got) == len(want) {
		slices.Sort(got[1:3])
		slices.Sort(got[3:5])
	}
	slices.Sort(want[1:3])
	slices.Sort(want[3:5])
	if !slices.Equal(got, want) {
		t.Fatalf("fault ops = %q, want %q", got, want)
	}
}

// dialEcho opens a connection through l and checks it echoes.
func dialEcho(t *testing.T, l *link.Link) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", l.Addr(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	return c
}

// completion is the op that ended the fault of kind k.
func completion(t *testing.T, h history.History, k nemesis.Kind) history.Op {
	t.Helper()
	for _, op := range h {
		if op.F == history.Fault && op.Type != history.Invoke && op.Value.Fault == string(k) {
			return op
		}
	}
	t.Fatalf("no completion of %s in %v", k, faultOps(h))
	return history.Op{}
}

// Each network fault takes effect on its link, its heal removes only
// that fault, and its completion says what it did to the traffic during
// the window: ok with the link's counts as evidence when it bit, fail
// with the reason when no traffic it could act on crossed the link.
func TestNetworkFaultsHealOneByOne(t *testing.T) {
	// Traffic during the window. Each waits for what the fault does to
	// a connection, which follows the link counting it.
	hang := func(t *testing.T, l *link.Link) {
		if err := flows(l, 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("partitioned: want a hang, got %v", err)
		}
	}
	echo := func(t *testing.T, l *link.Link) {
		if err := flows(l, 5*time.Second); err != nil {
			t.Errorf("echo: %v", err)
		}
	}
	reset := func(t *testing.T, l *link.Link) {
		if err := flows(l, 5*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("reset-peer: want the connection reset, got %v", err)
		}
	}
	big := func(t *testing.T, l *link.Link) { // 2000 B back through a 1000 B limit
		c := dialEcho(t, l)
		if _, err := c.Write([]byte(strings.Repeat("x", 2000) + "\n")); err != nil {
			t.Fatal(err)
		}
		if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
			t.Errorf("limit-data: the whole line came back")
		}
	}
	closeOne := func(t *testing.T, l *link.Link) { // close, and wait for the late close
		c := dialEcho(t, l)
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadAll(c); err != nil {
			t.Errorf("slow-close: %v", err)
		}
	}
	none := func(*testing.T, *link.Link) {}
	for _, tc := range []struct {
		name    string
		step    string
		active  []string
		open    bool // a connection open before the fault
		traffic func(*testing.T, *link.Link)
		// evidence of an ok completion, or error of a fail one.
		evidence, err string
	}{
		{"partition bit", "at 0s: partition echo upstream", []string{"partition_upstream"}, false, hang,
			"link echo upstream: 1 connection held, at least 5 B waiting", ""},
		{"partition idle", "at 0s: partition echo upstream", []string{"partition_upstream"}, false, none,
			"", "no connection crossed link echo upstream during the window"},
		{"refuse bit", "at 0s: refuse echo", []string{"refused"}, true, none,
			"link echo: 1 open connection closed, new ones refused", ""},
		{"refuse idle", "at 0s: refuse echo", []string{"refused"}, false, none,
			"", "no connection crossed link echo during the window (none was open to close; refused attempts are not counted)"},
		{"latency bit", "at 0s: latency echo 100ms ±10ms", []string{"latency_downstream", "latency_upstream"}, false, echo,
			"link echo: 1 connection delayed, 10 B delayed by 100ms±10ms", ""},
		{"latency idle", "at 0s: latency echo 100ms ±10ms", []string{"latency_downstream", "latency_upstream"}, false, none,
			"", "no connection crossed link echo during the window"},
		{"bandwidth bit", "at 0s: bandwidth echo downstream 8KB/s", []string{"bandwidth_downstream"}, false, echo,
			"link echo downstream: 1 connection throttled to 8 KB/s, 5 B through", ""},
		{"bandwidth idle", "at 0s: bandwidth echo downstream 8KB/s", []string{"bandwidth_downstream"}, true, none,
			"", "no connection crossed link echo downstream during the window"},
		{"reset-peer bit", "at 0s: reset-peer echo upstream 100ms", []string{"reset_peer_upstream"}, false, reset,
			"link echo upstream: 1 connection reset, 5 B sent into the reset", ""},
		{"reset-peer idle", "at 0s: reset-peer echo upstream 100ms", []string{"reset_peer_upstream"}, false, none,
			"", "no connection crossed link echo upstream during the window"},
		{"limit-data bit", "at 0s: limit-data echo downstream 1000B", []string{"limit_data_downstream"}, false, big,
			"link echo downstream: 1 connection cut after 1000 B", ""},
		{"limit-data under the limit", "at 0s: limit-data echo downstream 1000B", []string{"limit_data_downstream"}, false, echo,
			"", "1 connection crossed link echo downstream during the window, none carried the 1000 B limit"},
		{"slow-close bit", "at 0s: slow-close echo 100ms", []string{"slow_close_downstream", "slow_close_upstream"}, false, closeOne,
			"link echo: 1 connection closed late (by 100ms)", ""},
		{"slow-close none closed", "at 0s: slow-close echo 100ms", []string{"slow_close_downstream", "slow_close_upstream"}, true, func(t *testing.T, l *link.Link) {
			c := dialEcho(t, l)
			c.Write([]byte("again\n"))
			bufio.NewReader(c).ReadString('\n')
		}, "", "1 connection crossed link echo during the window, none closed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, l, buf := linkEnv(t)
			ctx := context.Background()
			if tc.open {
				dialEcho(t, l)
			}
			// A fault already on the link, which must survive the heal.
			otherFault := nemesis.Fault{Kind: nemesis.SlowClose, Target: "echo", Delay: time.Millisecond}
			if strings.Contains(tc.step, "slow-close") {
				otherFault = nemesis.Fault{Kind: nemesis.Latency, Target: "echo", Latency: time.Millisecond}
			}
			other, err := otherFault.Inject(ctx, env)
			if err != nil {
				t.Fatal(err)
			}
			before := l.Active()
			st, err := nemesis.ParseStep(tc.step)
			if err != nil {
				t.Fatal(err)
			}
			heal, err := st.Fault.Inject(ctx, env)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range tc.active {
				if !slices.Contains(l.Active(), a) {
					t.Errorf("link has %v, want %s", l.Active(), a)
				}
			}
			if len(env.Active()) != 2 {
				t.Errorf("Active() = %v", env.Active())
			}
			tc.traffic(t, l)
			if err := heal(ctx); err != nil {
				t.Fatal(err)
			}
			if err := heal(ctx); err != nil {
				t.Fatalf("second heal: %v", err)
			}
			if got := l.Active(); !slices.Equal(got, before) {
				t.Errorf("after heal link has %v, want %v", got, before)
			}
			if err := other(ctx); err != nil {
				t.Fatal(err)
			}
			if err := flows(l, 2*time.Second); err != nil {
				t.Fatalf("after heal: %v", err)
			}
			h := buf.history(t)
			op := completion(t, h, st.Fault.Kind)
			wantType := history.OK
			if tc.err != "" {
				wantType = history.Fail
			}
			if op.Type != wantType || op.Value.Evidence != tc.evidence || op.Value.Error != tc.err {
				t.Errorf("completion = %s\nwant type %s, evidence %q, error %q", op, wantType, tc.evidence, tc.err)
			}
			if got := faultOps(h); len(got) != 4 || got[1] != "invoke "+string(st.Fault.Kind)+" echo" {
				t.Errorf("fault ops = %q", got)
			}
		})
	}
}

// A fault that cannot be injected is recorded as failed, with the error,
// and is not active.
func TestInjectFailureRecorded(t *testing.T) {
	env, _, buf := linkEnv(t)
	for _, f := range []nemesis.Fault{
		{Kind: nemesis.Partition, Target: "kafka"},
		{Kind: nemesis.Partition, Target: "echo", Direction: "sideways"},
		{Kind: nemesis.Kill, Target: "relay-0"},
		{Kind: nemesis.Kill, Target: "postgres"},
	} {
		if _, err := f.Inject(context.Background(), env); err == nil {
			t.Errorf("%s: injected", f)
		}
	}
	if a := env.Active(); len(a) != 0 {
		t.Fatalf("Active() = %v", a)
	}
	got := faultOps(buf.history(t))
	want := []string{
		"invoke partition kafka", "fail partition kafka error",
		"invoke partition echo", "fail partition echo error",
		"invoke kill relay-0", "fail kill relay-0 error",
		"invoke kill postgres", "fail kill postgres error",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("fault ops = %q, want %q", got, want)
	}
}

func TestTargetsOnly(t *testing.T) {
	for _, tc := range []struct {
		names                    []string
		services, workers, links int
		failpointWorkers         int
	}{
		{nil, 2, 5, 2, 5},
		{[]string{"broker"}, 1, 0, 1, 0},
		{[]string{"consumer-*"}, 0, 2, 0, 2},
		{[]string{"relay-0", "postgres"}, 1, 1, 1, 1},
		{[]string{"nothing"}, 0, 0, 0, 0},
	} {
		got := pipelineTargets().Only(tc.names...)
		if len(got.Services) != tc.services || len(got.Workers) != tc.workers || len(got.Links) != tc.links || len(got.Failpoints) != tc.failpointWorkers {
			t.Errorf("Only(%v) = %+v", tc.names, got)
		}
	}
}

// Every fault op of a random schedule's steps carries reason "random",
// on its invoke and its completion; a timeline's steps carry none.
func TestRandomStepsRecordReason(t *testing.T) {
	env, _, buf := linkEnv(t)
	random := nemesis.Random(3, []string{"network"}, 20*time.Millisecond, 100*time.Millisecond, nemesis.Targets{Links: []string{"echo"}})
	if len(random.Steps) == 0 {
		t.Fatal("no random steps")
	}
	fixed, err := nemesis.ParseStep("at 0s: latency echo 1ms for 10ms")
	if err != nil {
		t.Fatal(err)
	}
	if err := nemesis.Fixed(append([]nemesis.Step{fixed}, random.Steps...)...).Run(context.Background(), env); err != nil {
		t.Fatalf("Run: %v", err)
	}
	var randomOps int
	for _, op := range buf.history(t) {
		if op.F != history.Fault || op.Value.Fault == "schedule" {
			continue
		}
		want := nemesis.ReasonRandom
		if op.Value.Detail == fixed.String() {
			want = ""
		} else {
			randomOps++
		}
		if op.Value.Reason != want {
			t.Errorf("reason %q, want %q: %s", op.Value.Reason, want, op)
		}
	}
	if randomOps != 2*len(random.Steps) {
		t.Errorf("%d random fault ops, want an invoke and a completion for each of %d steps", randomOps, len(random.Steps))
	}
}

// TestScheduleSaysWhereItsStepsCameFrom: a fixed timeline is recorded as
// "fixed: ...", not "seed=0: ..." (issue 21: a --seed 1 run printed
// "nemesis: seed=0:"); a random one with the seed it was drawn from, 0
// included; a timeline merged with a random schedule with both. The
// difference survives the JSON a Spec is written as.
func TestScheduleSaysWhereItsStepsCameFrom(t *testing.T) {
	kill := nemesis.Step{At: 3 * time.Second, Fault: nemesis.Fault{Kind: nemesis.Kill, Target: "relay-0"}}
	targets := nemesis.Targets{Workers: []string{"relay-0"}}
	random := nemesis.Random(0, []string{"process"}, time.Second, 4*time.Second, targets)
	merged := nemesis.Fixed(append([]nemesis.Step{kill}, random.Steps...)...)
	merged.Seed, merged.Random = 7, true
	var drawn []string
	for _, st := range random.Steps {
		drawn = append(drawn, st.String())
	}
	if len(drawn) != 2 {
		t.Fatalf("Random drew %d steps, want 2: %v", len(drawn), drawn)
	}
	for _, tc := range []struct {
		name  string
		sched nemesis.Schedule
		want  string
	}{
		{"fixed", nemesis.Fixed(kill), "fixed: at 3s: kill relay-0"},
		{"fixed, no steps", nemesis.Fixed(), "fixed: no steps"},
		{"random, seed 0", random, "seed=0: " + strings.Join(drawn, "; ")},
		{"random, nothing drawn", nemesis.Random(5, nil, time.Second, 4*time.Second, targets), "seed=5: no steps"},
		{"timeline and random", merged, "fixed: at 3s: kill relay-0; seed=7: " + strings.Join(drawn, "; ")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.sched.String(); got != tc.want {
				t.Errorf("String() = %q, want %q", got, tc.want)
			}
			b, err := json.Marshal(tc.sched)
			if err != nil {
				t.Fatal(err)
			}
			var back nemesis.Schedule
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if got := back.String(); got != tc.want {
				t.Errorf("after JSON %s: String() = %q, want %q", b, got, tc.want)
			}
		})
	}
}

// A replicated broker is hit node by node: its nodes replace it as
// process and network targets, and the nodes family isolates one or
// splits them, every step reading back as written.
func TestRandomNodes(t *testing.T) {
	tg := nemesis.DefaultTargets([]string{"relay-0"}).WithNodes("broker", 3)
	nodes := []string{"broker-0", "broker-1", "broker-2"}
	if want := append([]string{"postgres"}, nodes...); !slices.Equal(tg.Services, want) || !slices.Equal(tg.Links, want) || !slices.Equal(tg.Nodes, nodes) {
		t.Fatalf("targets %+v", tg)
	}
	if one := nemesis.DefaultTargets(nil).WithNodes("broker", 1); !slices.Equal(one.Services, []string{"postgres", "broker"}) || one.Nodes != nil {
		t.Fatalf("one node: %+v", one)
	}
	kinds := map[nemesis.Kind]int{}
	s := nemesis.Random(7, []string{"nodes"}, time.Second, 200*time.Second, tg)
	for _, st := range s.Steps {
		kinds[st.Fault.Kind]++
		switch st.Fault.Kind {
		case nemesis.Isolate:
			if !slices.Contains(nodes, st.Fault.Target) {
				t.Errorf("isolate of %q", st.Fault.Target)
			}
		case nemesis.Split:
			if st.Fault.Target != "broker" {
				t.Errorf("split of %q", st.Fault.Target)
			}
		default:
			t.Errorf("nodes family drew %s", st.Fault)
		}
		again, err := nemesis.ParseStep(st.String())
		if err != nil || again.Fault != st.Fault {
			t.Errorf("%q reads back as %+v, %v", st, again.Fault, err)
		}
	}
	if kinds[nemesis.Isolate] == 0 || kinds[nemesis.Split] == 0 {
		t.Errorf("drew %v, want both kinds", kinds)
	}
	if len(nemesis.Random(7, []string{"nodes"}, time.Second, 20*time.Second, nemesis.DefaultTargets(nil)).Steps) != 0 {
		t.Error("the nodes family drew steps without a replicated service")
	}
}
