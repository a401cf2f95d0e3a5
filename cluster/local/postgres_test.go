package local

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/cluster/link"
	"github.com/deliverycheck/deliverycheck/internal/testenv"
	"github.com/jackc/pgx/v5"
)

func startPostgres(t testing.TB) *Postgres {
	t.Helper()
	testenv.SkipIfShort(t, "starts a real PostgreSQL server")
	pg, err := NewPostgres(PostgresOptions{})
	testenv.MustHaveServer(t, "postgres", err)
	t.Cleanup(func() {
		if err := pg.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return pg
}

func pgConnect(t *testing.T, ctx context.Context, dsn string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func TestPostgres(t *testing.T) {
	pg := startPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if v := pg.Version(); v == "" {
		t.Fatal("empty version")
	} else {
		t.Logf("version: %s", v)
	}
	var pids []int

	t.Run("kill -9 keeps committed rows", func(t *testing.T) {
		c := pgConnect(t, ctx, pg.DSN(pg.Endpoint()))
		if _, err := c.Exec(ctx, "CREATE TABLE acked (id int PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Exec(ctx, "INSERT INTO acked VALUES (42)"); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pg.PIDs()...)
		if err := pg.Kill(ctx); err != nil {
			t.Fatal(err)
		}
		for _, pid := range pids {
			if alive(pid) && pid != pg.g.PID() {
				t.Fatalf("pid %d still alive after kill", pid)
			}
		}
		if err := pg.Start(ctx); err != nil {
			t.Fatal(err)
		}
		c2 := pgConnect(t, ctx, pg.DSN(pg.Endpoint()))
		var n int
		if err := c2.QueryRow(ctx, "SELECT count(*) FROM acked WHERE id = 42").Scan(&n); err != nil || n != 1 {
			t.Fatalf("acknowledged row after kill -9: n=%d err=%v", n, err)
		}
	})

	t.Run("a start cut short is finished by the next", func(t *testing.T) {
		// A nemesis heal whose window ends while the server boots
		// leaves it booting; the final heal's Start must finish that
		// start, not refuse it as already running.
		if err := pg.Kill(ctx); err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithCancel(ctx)
		cancel()
		if err := pg.Start(short); err == nil {
			t.Fatal("a start with its context ended said the server was ready")
		}
		if err := pg.Start(ctx); err != nil {
			t.Fatalf("the start after one cut short: %v", err)
		}
		c := pgConnect(t, ctx, pg.DSN(pg.Endpoint()))
		if _, err := c.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("pause makes a call time out, resume heals the same client", func(t *testing.T) {
		c := pgConnect(t, ctx, pg.DSN(pg.Endpoint()))
		if err := pg.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		qctx, qcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err := c.Exec(qctx, "SELECT 1")
		qcancel()
		if err == nil {
			t.Fatal("query answered while paused")
		}
		if err := pg.Resume(ctx); err != nil {
			t.Fatal(err)
		}
		// pgx closes a connection whose query was cancelled mid-flight;
		// "the same client" is the same DSN and pool, so reconnect.
		waitFor(t, ctx, 10*time.Second, func() error {
			c2, err := pgx.Connect(ctx, pg.DSN(pg.Endpoint()))
			if err != nil {
				return err
			}
			defer c2.Close(ctx)
			_, err = c2.Exec(ctx, "SELECT 1")
			return err
		})
	})

	t.Run("partition through the proxy hangs, heal restores; latency shows", func(t *testing.T) {
		s := link.NewServer()
		defer s.Close()
		l, err := s.Add("postgres", "127.0.0.1:0", pg.Endpoint())
		if err != nil {
			t.Fatal(err)
		}
		c := pgConnect(t, ctx, pg.DSN(l.Addr()))
		base := timeQuery(t, ctx, c)
		if err := l.Latency(link.Downstream, 100*time.Millisecond, 0); err != nil {
			t.Fatal(err)
		}
		if d := timeQuery(t, ctx, c); d < 100*time.Millisecond {
			t.Fatalf("round trip with 100ms latency: %v (without: %v)", d, base)
		}
		if err := l.Heal(); err != nil {
			t.Fatal(err)
		}
		if err := l.Partition(link.Both); err != nil {
			t.Fatal(err)
		}
		qctx, qcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err = c.Exec(qctx, "SELECT 1")
		qcancel()
		if err == nil {
			t.Fatal("query answered through a partition")
		}
		if err := l.Heal(); err != nil {
			t.Fatal(err)
		}
		c2 := pgConnect(t, ctx, pg.DSN(l.Addr()))
		timeQuery(t, ctx, c2)
	})

	t.Run("restart keeps data and port", func(t *testing.T) {
		ep := pg.Endpoint()
		if err := pg.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		if pg.Endpoint() != ep {
			t.Fatalf("endpoint moved: %s → %s", ep, pg.Endpoint())
		}
		c := pgConnect(t, ctx, pg.DSN(pg.Endpoint()))
		var n int
		if err := c.QueryRow(ctx, "SELECT count(*) FROM acked").Scan(&n); err != nil || n != 1 {
			t.Fatalf("after restart: n=%d err=%v", n, err)
		}
	})

	t.Run("close leaves no process and no temp dir", func(t *testing.T) {
		pids = append(pids, pg.PIDs()...)
		dir := pg.Dir()
		if err := pg.Close(); err != nil {
			t.Fatal(err)
		}
		for _, pid := range pids {
			if alive(pid) {
				t.Errorf("pid %d outlived Close", pid)
			}
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("temp dir %s outlived Close: %v", dir, err)
		}
	})
}

func timeQuery(t *testing.T, ctx context.Context, c *pgx.Conn) time.Duration {
	t.Helper()
	start := time.Now()
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := c.Exec(qctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

func BenchmarkPostgresColdStart(b *testing.B) {
	ctx := context.Background()
	for b.Loop() {
		pg, err := NewPostgres(PostgresOptions{})
		testenv.MustHaveServer(b, "postgres", err)
		if err := pg.Start(ctx); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		pg.Close()
		b.StartTimer()
	}
}

func BenchmarkPostgresRestart(b *testing.B) {
	pg := startPostgres(b)
	ctx := context.Background()
	for b.Loop() {
		if err := pg.Restart(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// TestPostgresCloseLeavesNoSharedMemory: however a server's life ends
// before Close, nothing of its shared memory outlives it: no System V
// segment, no /dev/shm file (issue 19: a killed PostgreSQL leaves both).
func TestPostgresCloseLeavesNoSharedMemory(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before func(ctx context.Context, pg *Postgres) error
	}{
		{"running", func(context.Context, *Postgres) error { return nil }},
		{"paused", func(ctx context.Context, pg *Postgres) error { return pg.Pause(ctx) }},
		{"killed with -9", func(ctx context.Context, pg *Postgres) error { return pg.Kill(ctx) }},
		{"stopped", func(ctx context.Context, pg *Postgres) error { return pg.Stop(ctx) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testenv.SkipIfShort(t, "starts a real PostgreSQL server")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			shmBefore := shmFiles(t)
			pg, err := NewPostgres(PostgresOptions{})
			testenv.MustHaveServer(t, "postgres", err)
			if err := pg.Start(ctx); err != nil {
				pg.Close()
				t.Fatal(err)
			}
			pg.mu.Lock()
			postmaster := pg.p.PGID() // the group leader
			pg.mu.Unlock()
			if err := tc.before(ctx, pg); err != nil {
				pg.Close()
				t.Fatal(err)
			}
			if err := pg.Close(); err != nil {
				t.Fatal(err)
			}
			for name := range shmFiles(t) {
				if !shmBefore[name] {
					t.Errorf("/dev/shm/%s left behind", name)
				}
			}
			b, err := os.ReadFile("/proc/sysvipc/shm")
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range strings.Split(string(b), "\n")[1:] {
				if f := strings.Fields(l); len(f) > 4 && f[4] == strconv.Itoa(postmaster) {
					t.Errorf("System V segment %s (created by the postmaster, pid %d) left behind", f[1], postmaster)
				}
			}
		})
	}
}

// shmFiles is the set of PostgreSQL.* files in /dev/shm.
func shmFiles(t *testing.T) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir("/dev/shm")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "PostgreSQL.") {
			out[e.Name()] = true
		}
	}
	return out
}
