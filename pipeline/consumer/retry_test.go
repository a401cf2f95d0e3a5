package consumer

import (
	"testing"
	"time"
)

// The correct consumer's retries are jittered and grow to the cap; the
// known-bad fixed-retry waits the cap every time.
func TestRetryPolicy(t *testing.T) {
	cfg := Config{BackoffBase: 10 * time.Millisecond, BackoffCap: time.Second}
	fixed := cfg
	fixed.Variant = FixedRetry
	for n := range 12 {
		if d := retryPolicy(fixed).Delay(n); d != time.Second {
			t.Errorf("fixed-retry: wait %d = %v, want 1s", n, d)
		}
	}
	cfg.Variant = Inbox
	p := retryPolicy(cfg)
	if p.Ceiling(0) != 10*time.Millisecond || p.Ceiling(10) != time.Second {
		t.Errorf("inbox: ceilings %v, %v; want 10ms, 1s", p.Ceiling(0), p.Ceiling(10))
	}
	distinct := map[time.Duration]bool{}
	for range 20 {
		distinct[p.Delay(10)] = true
	}
	if len(distinct) < 10 {
		t.Errorf("inbox: 20 waits at the cap took %d values, want them jittered", len(distinct))
	}
}

// The budget starts at the first failure and is spent once it has run
// out.
func TestBudgetSpent(t *testing.T) {
	c := &Consumer{cfg: Config{RetryBudget: time.Hour}}
	var since time.Time
	if c.budgetSpent(&since) || since.IsZero() {
		t.Fatalf("first failure: spent, or no start (%v)", since)
	}
	if c.budgetSpent(&since) {
		t.Error("spent within the hour")
	}
	since = since.Add(-2 * time.Hour)
	if !c.budgetSpent(&since) {
		t.Error("not spent two hours after the first failure")
	}
}
