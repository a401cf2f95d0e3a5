package pipeline

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/pipeline/producer"
)

// A drain with a relay that cannot say it is idle ends by quiet; events
// still missing then are lost only when a fact shows nothing is pending
// (the team's pending query, the broker empty); otherwise they are
// unseen and the verdict unknown. The team's relay here publishes
// nothing at all, so every committed event is missing.
func TestDrainEndsByQuietOnlyOnFacts(t *testing.T) {
	t.Parallel() // no fault on the servers (main_test.go)
	for _, tc := range []struct {
		name    string
		pending string
		drained bool
		verdict checker.Validity
	}{
		{"no pending query", "", false, checker.Unknown},
		{"pending rows left", "SELECT count(*) FROM outbox WHERE published_at IS NULL", false, checker.Unknown},
		{"nothing pending", "SELECT 0", true, checker.Invalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Each waits out a team relay's 10 s quiet on the same
			// servers, which no case breaks: the three wait at once.
			t.Parallel()
			cl := servers.Get(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cfg := Config{Broker: "kafka", Producers: 1, Rate: 50, Subscriptions: []string{"inventory"},
				Name: "d_" + strconv.FormatInt(time.Now().UnixNano(), 36), Quiet: time.Second, DrainTimeout: time.Minute,
				System: System{Relay: &External{Command: []string{"sleep", "600"}}, PendingQuery: tc.pending}}
			r, err := Start(ctx, cl, t.TempDir(), cfg, workerCmd(), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			waitCommitted(t, ctx, r, 20)
			drained, err := r.Finish(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if drained != tc.drained {
				t.Errorf("drained %v, want %v", drained, tc.drained)
			}
			files, err := r.HistoryFiles()
			if err != nil {
				t.Fatal(err)
			}
			res, err := checker.CheckFiles(files, checker.Options{Guarantees: checker.Guarantees{Loss: checker.None, DuplicateEffects: checker.None, Subscriptions: cfg.Subscriptions}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Valid != tc.verdict {
				t.Errorf("verdict %s %v, want %s", res.Valid, res.Reasons, tc.verdict)
			}
			var drain history.Op
			for _, op := range runHistory(t, r) {
				if op.F == history.Drain && op.Type != history.Invoke {
					drain = op
				}
			}
			if quiet := drain.Value.Reason == history.ReasonQuiet; quiet == tc.drained {
				t.Errorf("drain %s reason %q: a drain ended by quiet without the facts must say so (reason %s)", drain.Type, drain.Value.Reason, history.ReasonQuiet)
			}
			if drain.Value.Detail == "" {
				t.Error("the drain op says nothing")
			} else {
				t.Logf("drain: %s %s", drain.Type, drain.Value.Detail)
			}
		})
	}
}

// The status line's commits count a team's own transaction too: it writes
// no row of the built-in outbox, and the line read 0 committed all run.
func TestCountsCommitsOfATeamTransaction(t *testing.T) {
	cl := servers.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := producer.Bind("INSERT INTO team_outbox (id, body) VALUES (:event_id, :payload)")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Broker: "kafka", Producers: 1, Rate: 50, Subscriptions: []string{"inventory"},
		Name: "n_" + strconv.FormatInt(time.Now().UnixNano(), 36), Quiet: time.Second, DrainTimeout: time.Minute,
		System: System{Setup: "CREATE TABLE team_outbox (id text PRIMARY KEY, body text)",
			Transaction: []producer.Statement{st}, Relay: &External{Command: []string{"sleep", "600"}}}}
	r, err := Start(ctx, cl, t.TempDir(), cfg, workerCmd(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	waitCommitted(t, ctx, r, 20)
	var rows int64
	if err := r.DB().QueryRow(ctx, "SELECT count(*) FROM team_outbox").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows == 0 {
		t.Fatal("the team's transaction wrote nothing: the test proves nothing")
	}
}

// waitCommitted waits until the status line's count of committed
// transactions reaches n.
func waitCommitted(t *testing.T, ctx context.Context, r *Deployment, n int64) {
	t.Helper()
	waitUntil(t, 30*time.Second, func() error {
		c, err := r.Counts(ctx)
		if err == nil && c.Committed < n {
			err = fmt.Errorf("status counts %d committed, want %d", c.Committed, n)
		}
		return err
	})
}
