package runner

import (
	"testing"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/pipeline/consumer"
	"github.com/deliverycheck/deliverycheck/scenarios"
)

// minRetriers is the fewest retriers a retries built-in must have had:
// under that the synchronization figure says little either way
// (docs/results.md, Retries).
const minRetriers = 8

// checkRetries asserts what the retries built-ins (issue 25) must show
// beyond their verdict: a scenario promising max-retry-sync measured the
// figure over at least minRetriers retriers, and a retry-forever
// consumer refused past the limit.
func checkRetries(t *testing.T, s scenarios.Scenario, r *checker.Result) {
	t.Helper()
	if s.Guarantees.MaxRetrySync > 0 {
		if rt := r.Retries; rt == nil || !rt.Measured || rt.Retriers < minRetriers {
			t.Errorf("max-retry-sync is promised but the figure was not measured over %d retriers: %+v", minRetriers, rt)
		}
		t.Logf("retries: %s", checker.RetriesSummary(r.Retries))
	}
	if s.Variants.Consumer == consumer.RetryForever {
		var over int64
		if r.Retries != nil {
			for _, sr := range r.Retries.Subscriptions {
				over += sr.OverRetried
			}
		}
		if over == 0 {
			t.Error("a retry-forever consumer refused nothing past the limit")
		}
		t.Logf("over-retried events: %d", over)
	}
}
