package guard

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// sleeper starts a process in its own group that lives until killed.
func sleeper(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// exited waits (bounded) for cmd to end and reports whether it did.
func exited(cmd *exec.Cmd, d time.Duration) bool {
	done := make(chan struct{})
	go func() { _, _ = cmd.Process.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

func TestHarnessDeathCleansUp(t *testing.T) {
	g, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "server")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tracked, untracked := sleeper(t), sleeper(t)
	for _, err := range []error{
		g.TrackDir(dir),
		g.TrackGroup(tracked.Process.Pid),
		g.TrackGroup(untracked.Process.Pid),
		g.UntrackGroup(untracked.Process.Pid),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	// The harness dies: its end of the pipe closes without "exit".
	g.mu.Lock()
	g.w.Close()
	g.w = nil
	g.mu.Unlock()
	if err := g.cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if !exited(tracked, 10*time.Second) {
		t.Error("tracked process group outlived the harness")
	}
	if exited(untracked, 200*time.Millisecond) {
		t.Error("the guard killed a group it was told was gone")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("tracked dir left behind: %v", err)
	}
}

func TestCleanCloseTouchesNothing(t *testing.T) {
	g, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := sleeper(t)
	if err := g.TrackDir(dir); err != nil {
		t.Fatal(err)
	}
	if err := g.TrackGroup(p.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if exited(p, 200*time.Millisecond) {
		t.Error("a clean close killed a tracked group")
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("a clean close removed a tracked dir: %v", err)
	}
	if err := g.TrackDir(dir); err == nil {
		t.Error("tracking after Close succeeded")
	}
}

func TestNilGuardAndBadArguments(t *testing.T) {
	var g *Guard
	if g.TrackDir("/x") != nil || g.TrackContainer("abc") != nil || g.Close() != nil || g.PID() != 0 || g.Open() {
		t.Error("a nil guard must accept every call and do nothing")
	}
	live, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	for _, bad := range []string{"", "a\nexit"} {
		if err := live.TrackDir(bad); err == nil {
			t.Errorf("TrackDir(%q) accepted", bad)
		}
	}
}
