package local

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/process"
)

// A start whose server never gets ready (the heal that launched it was
// cut short by the run's end) must not leave it running: the retry would
// find it "already running" and never wait for it.
func TestFailedStartLeavesNothingRunning(t *testing.T) {
	b, err := newBase("stub", Options{TempRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.g.Close() })
	log := filepath.Join(b.dir, "stub.log")
	spec := process.Spec{Path: "/bin/sleep", Args: []string{"60"}, Log: log}

	p, err := b.launch(spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err = b.waitReady(ctx, p, log, func(context.Context) error { return errors.New("not yet") })
	if err == nil || !strings.Contains(err.Error(), "not ready") {
		t.Fatalf("waitReady = %v, want not ready", err)
	}
	if len(p.PIDs()) != 0 || !p.Exited() {
		t.Fatalf("half-started server still running: pids %v", p.PIDs())
	}
	if _, err := b.running(); err == nil {
		t.Fatal("base still reports a running server")
	}

	p2, err := b.launch(spec)
	if err != nil {
		t.Fatalf("start again after a failed start: %v", err)
	}
	if err := b.waitReady(context.Background(), p2, log, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := b.Kill(context.Background()); err != nil {
		t.Fatal(err)
	}
}
