package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/internal/testenv"
)

// TestPostgresSettings checks, on every runtime, the server settings the
// harness and the checker rely on: durable commits for the crash tests,
// logical WAL for the Debezium relay, and commit timestamps, by which the
// checker orders effects by when they committed (issue 19, rule 3).
func TestPostgresSettings(t *testing.T) {
	testenv.SkipIfShort(t, "starts a real PostgreSQL server")
	want := []struct{ name, value string }{
		{"track_commit_timestamp", "on"},
		{"fsync", "on"},
		{"synchronous_commit", "on"},
		{"full_page_writes", "on"},
		{"wal_level", "logical"},
	}
	for _, rt := range runtimesUnderTest(t) {
		t.Run(rt, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			c, err := cluster.Start(ctx, cluster.Config{Runtime: rt, Services: []string{cluster.Postgres}})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := c.Close(); err != nil {
					t.Error(err)
				}
			}()
			conn, err := pgx.Connect(ctx, c.ClientURL(cluster.Postgres))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			for _, w := range want {
				var got string
				if err := conn.QueryRow(ctx, "SELECT current_setting($1)", w.name).Scan(&got); err != nil {
					t.Fatalf("%s: %v", w.name, err)
				}
				if got != w.value {
					t.Errorf("%s = %q, want %q", w.name, got, w.value)
				}
			}
			// And it works: a committed row has a commit time.
			var ts *time.Time
			if _, err := conn.Exec(ctx, "CREATE TABLE commit_ts_probe (x int)"); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(ctx, "INSERT INTO commit_ts_probe VALUES (1)"); err != nil {
				t.Fatal(err)
			}
			if err := conn.QueryRow(ctx, "SELECT pg_xact_commit_timestamp(xmin) FROM commit_ts_probe").Scan(&ts); err != nil {
				t.Fatal(err)
			}
			if ts == nil {
				t.Error("a committed row has no commit timestamp")
			}
		})
	}
}
