package supervisor

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/history"
)

// The children of the resources tests: the test binary, started as an
// external worker, grows its resident set in steps and waits to be
// stopped ("grow"), or takes 48 MiB at once and exits once told to
// ("short").
func init() {
	mode := os.Getenv("RSS_TEST_CHILD")
	if mode == "" {
		return
	}
	var held [][]byte
	take := func(n int) {
		b := make([]byte, n)
		for i := 0; i < n; i += 4096 {
			b[i] = 1 // touch every page, so it is resident
		}
		held = append(held, b)
	}
	switch mode {
	case "grow":
		for range 8 {
			take(8 << 20)
			time.Sleep(100 * time.Millisecond)
		}
		// The done file holds the child's own peak after its last step,
		// so the test knows which op is the last growth to wait for.
		status, _ := os.ReadFile("/proc/self/status")
		peak, _ := vmHWM(status)
		os.WriteFile(os.Getenv("RSS_TEST_DONE"), []byte(strconv.FormatInt(peak, 10)), 0o644)
		time.Sleep(10 * time.Minute)
	case "short":
		take(48 << 20)
		// Exit once the test has seen the peak and says so.
		for {
			if _, err := os.Stat(os.Getenv("RSS_TEST_DONE")); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	runtime.KeepAlive(held)
	os.Exit(0)
}

// newRecordingSup is a supervisor whose ops go to a history file.
func newRecordingSup(t *testing.T) (*Supervisor, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "harness.jsonl")
	rec, err := history.NewRecorder(path, "harness", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Command: []string{"/bin/false"}, LogDir: t.TempDir(), RestartDelay: 10 * time.Millisecond, Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.StopAll(ctx)
		rec.Close()
	})
	return s, path
}

// resourcesOps reads the resources ops of worker name from the history.
func resourcesOps(t *testing.T, path, name string) []history.Op {
	t.Helper()
	h, _, err := history.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []history.Op
	for _, op := range h {
		if op.F == history.Resources && op.Value.Target == name {
			out = append(out, op)
		}
	}
	return out
}

// A growing worker's peak is recorded as it grows, each op a step of at
// least 1 MiB and 5%, and once more when it is stopped; nothing is
// written while it stays the same; the sampler ends with the process.
func TestResourcesGrow(t *testing.T) {
	s, path := newRecordingSup(t)
	done := filepath.Join(t.TempDir(), "done")
	before := runtime.NumGoroutine()
	if err := s.StartCommand(context.Background(), "consumer-x-0", Command{Argv: []string{os.Args[0]}, Env: []string{"RSS_TEST_CHILD=grow", "RSS_TEST_DONE=" + done}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		// Grown: an op at least at the peak the child reported once done
		// (within the 1 MiB / 5% step the sampler needs to write again).
		ops := resourcesOps(t, path, "consumer-x-0")
		if b, err := os.ReadFile(done); err == nil && len(b) > 0 && len(ops) > 0 {
			peak, _ := strconv.ParseInt(string(b), 10, 64)
			if last := ops[len(ops)-1].Value.RSS; last >= 64<<20 && !rssGrew(last, peak) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no resources op with rss ≥ 64 MiB after 20s: %v", ops)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Once grown it stays the same: no op for a few ticks.
	n := len(resourcesOps(t, path, "consumer-x-0"))
	time.Sleep(5 * DefaultRSSInterval)
	if m := len(resourcesOps(t, path, "consumer-x-0")); m != n {
		t.Errorf("%d ops while the peak stayed the same", m-n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.StopAll(ctx); err != nil {
		t.Fatal(err)
	}
	ops := resourcesOps(t, path, "consumer-x-0")
	if len(ops) < 3 {
		t.Fatalf("%d resources ops for a worker that grew by 64 MiB in 8 steps: %v", len(ops), ops)
	}
	for i, op := range ops {
		if op.Process != "harness" || op.Type != history.OK {
			t.Errorf("op %d: %v", i, op)
		}
		if i > 0 && op.Value.RSS <= ops[i-1].Value.RSS {
			t.Errorf("op %d: rss %d after %d", i, op.Value.RSS, ops[i-1].Value.RSS)
		}
		if i > 0 && i < len(ops)-1 && !rssGrew(ops[i-1].Value.RSS, op.Value.RSS) {
			t.Errorf("op %d: rss %d after %d: a step under 1 MiB or 5%%", i, op.Value.RSS, ops[i-1].Value.RSS)
		}
	}
	if last := ops[len(ops)-1].Value.RSS; last < 64<<20 || last > 1<<30 {
		t.Errorf("peak %d bytes, want about 64 MiB and the runtime", last)
	}
	// Every goroutine of the worker (hits reader, waiter, sampler) ended.
	waitGoroutines(t, before)
}

// A worker that exits soon after it grew has its peak recorded, and only
// its own: the harness here holds 256 MiB, and a worker started by vfork
// shares the harness's memory until it execs, which Linux folds into the
// worker's ru_maxrss (the reason the sampler does not use it).
func TestResourcesShortLived(t *testing.T) {
	ballast := make([]byte, 256<<20)
	for i := 0; i < len(ballast); i += 4096 {
		ballast[i] = 1 // resident, so the harness's peak is over 256 MiB
	}
	defer runtime.KeepAlive(ballast)
	s, path := newRecordingSup(t)
	exit := filepath.Join(t.TempDir(), "exit")
	if err := s.StartCommand(context.Background(), "relay-0", Command{Argv: []string{os.Args[0]}, Env: []string{"RSS_TEST_CHILD=short", "RSS_TEST_DONE=" + exit}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !slices.ContainsFunc(resourcesOps(t, path, "relay-0"), func(op history.Op) bool { return op.Value.RSS >= 48<<20 }) {
		if time.Now().After(deadline) {
			t.Fatalf("no resources op with at least the 48 MiB it took: %v", resourcesOps(t, path, "relay-0"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := os.WriteFile(exit, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for {
		if c, _ := s.Stats("relay-0"); c >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the short-lived worker never exited")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Its ops, the one at its exit included, are written before its exit
	// is known; later ones are its restarts' (which exit at once).
	for _, op := range resourcesOps(t, path, "relay-0") {
		if op.Value.RSS >= 200<<20 {
			t.Errorf("a worker that took 48 MiB recorded at %d MiB: the harness's peak, not its own", op.Value.RSS>>20)
		}
	}
}

// waitGoroutines waits until no more goroutines run than before.
func waitGoroutines(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestVmHWM(t *testing.T) {
	status := []byte("Name:\tx\nPPid:\t1\nVmPeak:\t  9999 kB\nVmHWM:\t   1234 kB\nVmRSS:\t 1000 kB\n")
	if v, ok := vmHWM(status); !ok || v != 1234<<10 {
		t.Errorf("vmHWM = %d, %v", v, ok)
	}
	if _, ok := vmHWM([]byte("Name:\tzombie\nState:\tZ (zombie)\n")); ok {
		t.Error("a zombie's status has a VmHWM")
	}
	for _, c := range []struct {
		last, peak int64
		want       bool
	}{{0, 1 << 20, true}, {0, 1<<20 - 1, false}, {100 << 20, 104 << 20, false}, {100 << 20, 105 << 20, true}, {10 << 20, 11 << 20, true}} {
		if got := rssGrew(c.last, c.peak); got != c.want {
			t.Errorf("rssGrew(%d, %d) = %v", c.last, c.peak, got)
		}
	}
}
