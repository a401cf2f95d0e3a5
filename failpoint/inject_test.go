package failpoint_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/failpoint"
	"github.com/deliverycheck/deliverycheck/history"
)

// The child half of the Inject tests: it runs in a process of its own,
// since a firing failpoint kills the process it is in.
func init() {
	switch os.Getenv("FAILPOINT_TEST_CHILD") {
	case "once":
		failpoint.InjectEvent("after-commit-before-ack", "ev-1")
		os.Exit(0)
	case "loop": // arming at runtime: hit until armed, at most 10s
		failpoint.Inject("after-commit-before-ack")
		if err := os.WriteFile(os.Getenv("FAILPOINT_TEST_READY"), nil, 0o644); err != nil {
			os.Exit(3)
		}
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			failpoint.Inject("after-commit-before-ack")
		}
		os.Exit(0)
	}
}

type child struct {
	t                      *testing.T
	state, hist, mode, dir string
}

func (c child) start() *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FAILPOINT_TEST_CHILD="+c.mode,
		failpoint.EnvState+"="+c.state, history.EnvFile+"="+c.hist,
		history.EnvProcess+"=consumer-inventory-0", "FAILPOINT_TEST_READY="+filepath.Join(c.dir, "ready"), history.EnvBase+"="+strconv.FormatInt(time.Now().UnixNano(), 10))
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	return cmd
}

// killed waits for cmd and reports whether SIGKILL ended it.
func killed(t *testing.T, cmd *exec.Cmd) bool {
	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		ws := ee.Sys().(syscall.WaitStatus)
		return ws.Signaled() && ws.Signal() == syscall.SIGKILL
	}
	if err != nil {
		t.Fatal(err)
	}
	return false
}

func crashes(t *testing.T, path string) []history.Op {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, _, err := history.Read(f, path)
	if err != nil {
		t.Fatal(err)
	}
	var out []history.Op
	for _, op := range h {
		if op.F == history.Crash {
			out = append(out, op)
		}
	}
	return out
}

// kill(2) kills two incarnations, not two per incarnation, and each
// crash is in the history naming the failpoint and the event.
func TestInjectCountsSurviveRestarts(t *testing.T) {
	dir := t.TempDir()
	c := child{t: t, state: filepath.Join(dir, "fp"), hist: filepath.Join(dir, "h.jsonl"), mode: "once", dir: dir}
	if err := failpoint.WriteState(c.state, []failpoint.Term{{Name: "after-commit-before-ack", Count: 2, Prob: 1}}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, true, false} {
		if got := killed(t, c.start()); got != want {
			t.Fatalf("run %d: killed = %v, want %v", i+1, got, want)
		}
	}
	ops := crashes(t, c.hist)
	if len(ops) != 2 {
		t.Fatalf("%d crash ops, want 2: %+v", len(ops), ops)
	}
	for _, op := range ops {
		if op.Process != "consumer-inventory-0" || op.Value.Event != "ev-1" || op.Value.Detail != "failpoint after-commit-before-ack" || op.Type != history.Info {
			t.Errorf("crash op = %+v", op)
		}
	}
	if terms, err := failpoint.ReadState(c.state); err != nil || len(terms) != 0 {
		t.Errorf("state after both crashes = %v, %v; want empty", terms, err)
	}
}

// The harness arms a running process by rewriting its state file.
func TestInjectArmedAtRuntime(t *testing.T) {
	dir := t.TempDir()
	c := child{t: t, state: filepath.Join(dir, "fp"), hist: filepath.Join(dir, "h.jsonl"), mode: "loop", dir: dir}
	if err := failpoint.WriteState(c.state, nil); err != nil {
		t.Fatal(err)
	}
	cmd := c.start()
	// Arm only once it has passed the failpoint unarmed.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatal("child never reached the failpoint")
		}
	}
	if err := failpoint.WriteState(c.state, []failpoint.Term{{Name: "after-commit-before-ack", Count: 1, Prob: 1}}); err != nil {
		t.Fatal(err)
	}
	if !killed(t, cmd) {
		t.Fatal("the process ran its 10s without the armed failpoint firing")
	}
	if n := len(crashes(t, c.hist)); n != 1 {
		t.Errorf("%d crash ops, want 1", n)
	}
}

// Outside a run (no state file named) Inject does nothing.
func TestInjectOutsideARun(t *testing.T) {
	t.Setenv(failpoint.EnvState, "")
	failpoint.Inject("after-commit-before-ack") // must return
}

func TestStateRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fp")
	in := []failpoint.Term{{Name: "a.b-c_d", Count: 3, Prob: 1}, {Name: "x", Count: -1, Prob: 0.25}, {Name: "off", Count: 0}}
	if err := failpoint.WriteState(path, in); err != nil {
		t.Fatal(err)
	}
	out, err := failpoint.ReadState(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || out[0] != in[0] || out[1] != in[1] {
		t.Fatalf("read back %+v, want %+v", out, in[:2])
	}
	if err := os.WriteFile(path, []byte("a=kill(1)\nbad name=kill(1)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := failpoint.ReadState(path); err == nil {
		t.Fatal("a bad line read without error")
	}
}
