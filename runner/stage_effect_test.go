package runner

import (
	"testing"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/pipeline/processor"
	"github.com/deliverycheck/deliverycheck/scenarios"
)

// checkStageBoundary checks, for a scenario whose processor writes a
// database effect, that the result says both halves of "exactly once,
// of what?": Kafka's topics exactly once either way; the database at
// least once without an inbox (some event's effect written twice), and
// exactly once with one, after inputs were read again (the inbox had
// something to turn away).
func checkStageBoundary(t *testing.T, s scenarios.Scenario, r *checker.Result) {
	t.Helper()
	if s.Stage == nil || !s.Stage.Effect.Writes() {
		return
	}
	st := r.TxnStage
	if st == nil || st.Database == nil {
		t.Fatalf("stage effect %s: no database half in the result (stage %+v)", s.Stage.Effect, st)
	}
	t.Logf("boundary: %s; database %+v; %d inputs retried", st.Boundary, *st.Database, st.Retried)
	want, db := "exactly once on Kafka's topics; exactly once on the database", checker.ExactlyOnce
	if s.Stage.Effect == processor.PlainEffect {
		want, db = "exactly once on Kafka's topics; at least once on the database", checker.AtLeastOnce
	}
	if st.Boundary != want || st.Delivery != checker.ExactlyOnce || st.Database.Delivery != db {
		t.Errorf("boundary %q (topics %s, database %s), want %q", st.Boundary, st.Delivery, st.Database.Delivery, want)
	}
	if st.Database.Subscription != "processor" || st.Database.Events != r.Counts.Committed {
		t.Errorf("database half %+v: want the effects of processor for all %d committed events", *st.Database, r.Counts.Committed)
	}
	if st.Retried == 0 {
		t.Error("no input was read again: the effect's duplicates (or the inbox's dedupe) were never exercised")
	}
}
