package cluster_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/cluster/netns"
	"github.com/deliverycheck/deliverycheck/internal/testenv"
)

// startStandby starts PostgreSQL with a standby of kind; cleanup closes it.
func startStandby(t testing.TB, kind string) *cluster.Cluster {
	t.Helper()
	testenv.SkipIfShort(t, "starts two real PostgreSQL servers")
	testenv.MustHaveServer(t, "network namespaces", netns.Check())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Config{Runtime: cluster.Local, Services: []string{cluster.Postgres}, Standby: kind})
	testenv.MustHaveServer(t, "postgres", err)
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return c
}

// A synchronous standby through the cluster: its nodes are services of
// their own, clients reach the primary through the database link, and
// after a failover every row committed through that link is on the new
// primary, read through the same address.
func TestStandbyFailover(t *testing.T) {
	c := startStandby(t, cluster.StandbySync)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var names []string
	for _, n := range c.Nodes(cluster.Postgres) {
		names = append(names, n.Name())
		if c.Link(n.Name()) == nil || c.Link(n.Name()).Upstream() != n.Endpoint() {
			t.Errorf("node %s: no link to it", n.Name())
		}
	}
	if !slices.Equal(names, []string{"postgres-0", "postgres-1"}) {
		t.Fatalf("nodes %v", names)
	}
	for _, name := range []string{"postgres", "postgres-0", "postgres-1"} {
		if _, err := c.Killer(name); err != nil {
			t.Errorf("Killer(%s): %v", name, err)
		}
	}
	dsn := c.ClientURL(cluster.Postgres)
	if !strings.Contains(dsn, c.Link(cluster.Postgres).Addr()) {
		t.Fatalf("ClientURL %s is not through the database link %s", dsn, c.Link(cluster.Postgres).Addr())
	}

	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE acked (id int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	for id := range 200 {
		if _, err := conn.Exec(ctx, "INSERT INTO acked VALUES ($1)", id); err != nil {
			t.Fatal(err)
		}
	}
	conn.Close(ctx)

	f, err := c.Failoverer(cluster.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	evidence, err := f.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("evidence: %s", evidence)
	if !strings.Contains(evidence, "link postgres → postgres-1") {
		t.Errorf("evidence %q does not say where the link points", evidence)
	}
	if got := c.ClientURL(cluster.Postgres); got != dsn {
		t.Errorf("ClientURL moved: %s → %s", dsn, got)
	}
	if up, want := c.Link(cluster.Postgres).Upstream(), c.Nodes(cluster.Postgres)[1].Endpoint(); up != want {
		t.Errorf("database link points at %s, want postgres-1 at %s", up, want)
	}
	conn, err = pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	var inRecovery bool
	if err := conn.QueryRow(ctx, "SELECT count(*), pg_is_in_recovery() FROM acked").Scan(&n, &inRecovery); err != nil {
		t.Fatal(err)
	}
	if n != 200 || inRecovery {
		t.Fatalf("after failover: %d of 200 committed rows, in recovery %v", n, inRecovery)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO acked VALUES (200)"); err != nil {
		t.Fatalf("new primary refuses a write: %v", err)
	}
}

// Without a standby there is nothing to fail over to, and the cluster
// says so; a standby is refused where it cannot run.
func TestStandbyRefused(t *testing.T) {
	ctx := context.Background()
	_, err := cluster.Start(ctx, cluster.Config{Runtime: cluster.Containers, Services: []string{cluster.Postgres}, Standby: cluster.StandbySync})
	if err == nil || !strings.Contains(err.Error(), "runs a single postgres") {
		t.Errorf("standby on containers: %v", err)
	}
	if testing.Short() {
		return
	}
	c, err := cluster.Start(ctx, cluster.Config{Runtime: cluster.Local, Services: []string{cluster.Postgres}})
	testenv.MustHaveServer(t, "postgres", err)
	defer c.Close()
	if _, err := c.Failoverer(cluster.Postgres); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Failoverer on a single postgres: %v, want unsupported", err)
	}
}

// However the harness ends, a standby's servers, namespaces, temp dirs
// and shared memory go with it.
func TestStandbyCleanup(t *testing.T) {
	testenv.SkipIfShort(t, "starts two real PostgreSQL servers")
	testenv.MustHaveServer(t, "network namespaces", netns.Check())
	for _, mode := range []string{"signal", "panic", "kill"} {
		t.Run(mode, func(t *testing.T) {
			cleanupCase(t, cluster.Local, mode, cluster.Postgres, childEnv+"_STANDBY="+cluster.StandbyAsync)
		})
	}
}

// BenchmarkStandbyColdStart measures PostgreSQL with a standby from
// nothing (network namespaces, links, initdb, start, base backup, start)
// until the standby streams, through cluster.Start. Issue 22's budget is
// 5 s.
func BenchmarkStandbyColdStart(b *testing.B) {
	for _, kind := range []string{cluster.StandbyAsync, cluster.StandbySync} {
		b.Run(kind, func(b *testing.B) {
			testenv.MustHaveServer(b, "network namespaces", netns.Check())
			for b.Loop() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				c, err := cluster.Start(ctx, cluster.Config{Runtime: cluster.Local, Services: []string{cluster.Postgres}, Standby: kind})
				cancel()
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := c.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
