package process

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// startTree starts a shell running script and waits until it and its two
// children run.
func startTree(t *testing.T, script string) *Group {
	t.Helper()
	g, err := Start(Spec{
		Path: "/bin/sh",
		Args: []string{"-c", script},
		Dir:  t.TempDir(),
		Log:  filepath.Join(t.TempDir(), "out.log"),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Kill(context.Background()) })
	deadline := time.Now().Add(10 * time.Second)
	for len(g.PIDs()) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("tree not up: pids %v", g.PIDs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return g
}

func TestKillLeavesNothing(t *testing.T) {
	// One child in a session of its own (setsid, as PostgreSQL's
	// backends do), one in the group.
	g := startTree(t, "setsid sleep 600 & sleep 600 & wait")
	pids := g.PIDs()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if Alive(pid) {
			t.Errorf("pid %d outlived Kill (the tree was %v)", pid, pids)
		}
	}
	if !g.Exited() || g.Err() == nil {
		t.Errorf("after Kill: exited %v, err %v; want exited by a signal", g.Exited(), g.Err())
	}
	if got := g.PIDs(); len(got) != 0 {
		t.Errorf("PIDs after Kill = %v", got)
	}
}

func TestStopWakesAPausedTree(t *testing.T) {
	g := startTree(t, "sleep 600 & sleep 600 & wait")
	if err := g.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	// The shell dies of SIGTERM; its children do not (only the leader
	// gets it), so Stop ends by killing the group when ctx ends, and says
	// the graceful stop failed.
	if err := g.Stop(ctx, syscall.SIGTERM); err == nil {
		t.Error("Stop reported a graceful stop of children that ignore the leader's signal")
	}
	select {
	case <-g.Done():
	default:
		t.Fatal("leader not reaped after Stop")
	}
	if got := g.PIDs(); len(got) != 0 {
		t.Errorf("PIDs after Stop = %v", got)
	}
}
