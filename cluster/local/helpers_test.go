package local

import (
	"context"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/process"
)

// alive reports whether pid is a live process (zombies count as gone).
func alive(pid int) bool { return process.Alive(pid) }

// waitFor retries cond until it returns nil or the deadline passes.
func waitFor(t testing.TB, ctx context.Context, d time.Duration, cond func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var err error
	for {
		if err = cond(); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("condition not met within %v: %v", d, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
