package local

import (
	"context"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/internal/testenv"
	"github.com/deliverycheck/deliverycheck/process"
)

// alive reports whether pid is a live process (zombies count as gone).
func alive(pid int) bool { return process.Alive(pid) }

// waitFor retries cond until it returns nil or the deadline passes.
func waitFor(t testing.TB, ctx context.Context, d time.Duration, cond func() error) {
	t.Helper()
	testenv.Eventually(t, ctx, d, "", cond)
}
