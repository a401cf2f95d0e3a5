package process

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A command whose child outlives it and holds its output pipe still
// returns once ctx ends, and the child is gone with it.
func TestCommandKillsTheGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	// The shell prints its child's pid, then waits on it: both hold
	// stdout.
	cmd := Command(ctx, "sh", "-c", "sleep 600 & echo $!; wait")
	start := time.Now()
	out, err := cmd.Output()
	if err == nil {
		t.Fatal("a command cut short by its context returned no error")
	}
	if took := time.Since(start); took > WaitDelay {
		t.Fatalf("Output returned after %v, want at most the context's 300ms and a kill", took)
	}
	pid, perr := strconv.Atoi(strings.TrimSpace(string(out)))
	if perr != nil {
		t.Fatalf("child pid %q: %v", out, perr)
	}
	deadline := time.Now().Add(5 * time.Second)
	for Alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the forked child %d outlived its group's kill", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Without the group kill, the same command outlives its context: the
// case Command exists for (a test that can fail).
func TestCommandPlainExecHangs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	cmd := Command(ctx, "sh", "-c", "sleep 3 & wait")
	cmd.Cancel = func() error { return cmd.Process.Kill() } // os/exec's default
	cmd.WaitDelay = 0
	start := time.Now()
	_, _ = cmd.Output()
	if took := time.Since(start); took < 2*time.Second {
		t.Fatalf("the leader's kill alone ended Output after %v: the pipe is not held by the child as assumed", took)
	}
}
