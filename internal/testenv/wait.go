package testenv

import (
	"context"
	"testing"
	"time"
)

// pollEvery is how often Eventually asks again: short next to the
// deadlines tests give (seconds), long enough not to spin a core.
const pollEvery = 20 * time.Millisecond

// Eventually asks cond until it returns nil and fails tb when d passes or
// ctx ends first, with what it waited for and cond's last error. It is
// the one way the tests wait on a condition: never a sleep that hopes.
func Eventually(tb testing.TB, ctx context.Context, d time.Duration, what string, cond func() error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			if what == "" {
				what = "condition"
			}
			tb.Fatalf("%s not met within %v: %v", what, d, err)
		case <-tick.C:
		}
	}
}
