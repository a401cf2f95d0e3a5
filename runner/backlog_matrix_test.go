package runner

import (
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/scenarios"
)

// minBurstBacklog is the fewest events a rate timeline's burst must leave
// pending for the run to have exercised backpressure at all.
const minBurstBacklog = 50

// checkBacklog checks what a scenario with a rate timeline promises of
// its backlog (checker/backlog.go): the burst bit (every subscription was
// measured and its backlog grew and aged), and no consumer process held
// more deliveries at once than its workers and batch let it.
func checkBacklog(t *testing.T, s scenarios.Scenario, r *checker.Result) {
	t.Helper()
	if len(s.Workload.RateTimeline) == 0 || r == nil {
		return
	}
	if len(r.Backlog) == 0 {
		t.Fatal("a rate timeline, and no backlog in the result")
	}
	for _, b := range r.Backlog {
		t.Logf("backlog of %s: max pending %d at %s, oldest %s at %s, waits p50 %s p99 %s max %s (%d settled)",
			b.Subscription, b.MaxPending, time.Duration(b.MaxPendingNS), time.Duration(b.MaxAgeNS), time.Duration(b.MaxAgeAtNS),
			time.Duration(b.WaitP50NS), time.Duration(b.WaitP99NS), time.Duration(b.WaitMaxNS), b.Waits)
		if !b.Measured || b.MaxPending < minBurstBacklog || b.MaxAgeNS < int64(500*time.Millisecond) {
			t.Errorf("%s: the burst did not build a backlog (measured %v, max pending %d, oldest %s)", b.Subscription, b.Measured, b.MaxPending, time.Duration(b.MaxAgeNS))
		}
	}
	if len(r.BacklogConsumers) == 0 {
		t.Error("no consumer's deliveries in flight measured")
	}
	window := int64(max(s.Workload.ConsumerWorkers, 1) * s.Workload.ConsumerBatch)
	for _, c := range r.BacklogConsumers {
		t.Logf("%s held at most %d deliveries at once", c.Process, c.MaxInFlight)
		if c.MaxInFlight < 1 || window > 0 && c.MaxInFlight > window {
			t.Errorf("%s held %d deliveries at once; its workers and batch allow %d", c.Process, c.MaxInFlight, window)
		}
	}
}
