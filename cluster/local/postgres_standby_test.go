package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deliverycheck/deliverycheck/cluster/link"
	"github.com/deliverycheck/deliverycheck/cluster/netns"
	"github.com/deliverycheck/deliverycheck/internal/testenv"
	"github.com/deliverycheck/deliverycheck/process/guard"
)

// pgPair is a primary and a standby in a network of their own, behind a
// database link that Failover points at the new primary, as the cluster
// does.
type pgPair struct {
	*PostgresCluster
	net   *netns.Network
	link  *link.Link
	links *link.Server
}

// pairNodes are the nodes of every pair: the primary first.
var pairNodes = []string{"postgres-0", "postgres-1"}

// pairNetwork makes the namespaces of a pair; cleanup removes them.
func pairNetwork(t testing.TB) *netns.Network {
	t.Helper()
	testenv.SkipIfShort(t, "starts two real PostgreSQL servers")
	testenv.MustHaveServer(t, "network namespaces", netns.Check())
	_, err := PostgresBinDir("")
	testenv.MustHaveServer(t, "postgres", err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := guard.Start(guard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := netns.New(ctx, netns.Options{Nodes: pairNodes, Guard: g})
	if err != nil {
		g.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := errors.Join(n.Close(), g.Close()); err != nil {
			t.Errorf("close network: %v", err)
		}
	})
	return n
}

// newPair makes (but does not start) a pair in n, behind a database link
// of its own.
func newPair(n *netns.Network, sync bool) (*pgPair, error) {
	s := link.NewServer()
	l, err := s.Add("postgres", "127.0.0.1:0", "127.0.0.1:1")
	if err != nil {
		return nil, err
	}
	p := &pgPair{net: n, link: l, links: s}
	p.PostgresCluster, err = NewPostgresCluster(PostgresClusterOptions{
		ReplicatedOptions: ReplicatedOptions{Network: n, Nodes: pairNodes, Advertise: []string{"", ""}},
		Sync:              sync,
		Promoted: func(ctx context.Context, node, endpoint string) (string, error) {
			return "link postgres → " + node, l.SetUpstream(endpoint)
		},
	})
	if err != nil {
		return nil, errors.Join(err, s.Close())
	}
	return p, errors.Join(l.SetUpstream(p.Endpoint()))
}

// close closes the pair and its link.
func (p *pgPair) close() error { return errors.Join(p.links.Close(), p.Close()) }

func startPair(t testing.TB, sync bool) *pgPair {
	t.Helper()
	p, err := newPair(pairNetwork(t), sync)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("primary + standby ready in %v", time.Since(start).Round(time.Millisecond))
	return p
}

// TestPostgresStandby runs each kind of standby through what a run does
// with it: stream, lose the primary with the standby cut off, fail over,
// take the deposed node back as a standby, fail over again under load.
// The asynchronous standby is issue 22's known-bad sibling: commits the
// primary acknowledged are gone after the failover. The synchronous
// (remote_apply) one acknowledges nothing it has not applied, so nothing
// acknowledged is lost.
func TestPostgresStandby(t *testing.T) {
	for _, tc := range []struct {
		mode string
		sync bool
	}{
		{"async", false},
		{"sync", true},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			p := startPair(t, tc.sync)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			var pids []int
			var dirs []string
			for _, n := range p.Nodes() {
				dirs = append(dirs, n.Dir())
			}

			t.Run("streams", func(t *testing.T) {
				wantSync := map[bool]string{false: "async", true: "sync"}[tc.sync]
				var state, syncState string
				c := pgConnect(t, ctx, p.DSN(p.link.Addr()))
				if err := c.QueryRow(ctx, "SELECT state, sync_state FROM pg_stat_replication WHERE application_name = 'postgres-1'").Scan(&state, &syncState); err != nil {
					t.Fatal(err)
				}
				if state != "streaming" || syncState != wantSync {
					t.Fatalf("standby is %s/%s, want streaming/%s", state, syncState, wantSync)
				}
				var inRecovery bool
				s := pgConnect(t, ctx, p.DSN(p.Standby().Endpoint()))
				if err := s.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil || !inRecovery {
					t.Fatalf("standby in recovery: %v, %v", inRecovery, err)
				}
				wantCommit := map[bool]string{false: "on", true: "remote_apply"}[tc.sync]
				var commit string
				if err := c.QueryRow(ctx, "SHOW synchronous_commit").Scan(&commit); err != nil || commit != wantCommit {
					t.Fatalf("synchronous_commit = %q, %v; want %s", commit, err, wantCommit)
				}
				var slot string
				if err := c.QueryRow(ctx, "SELECT slot_name FROM pg_replication_slots WHERE active").Scan(&slot); err != nil || slot != "postgres_1" {
					t.Fatalf("active slot %q, %v; want postgres_1", slot, err)
				}
			})

			t.Run("failover with the standby cut off", func(t *testing.T) {
				c := pgConnect(t, ctx, p.DSN(p.link.Addr()))
				if _, err := c.Exec(ctx, "CREATE TABLE acked (id int PRIMARY KEY)"); err != nil {
					t.Fatal(err)
				}
				before := insertRange(t, ctx, c, 1, 100)
				waitCaughtUp(t, ctx, p)
				cut, err := p.net.Partition(ctx, []string{"postgres-0"}, []string{"postgres-1"})
				if err != nil {
					t.Fatal(err)
				}
				// Each commit on a connection of its own, bounded: a
				// synchronous one waits for a standby it cannot reach,
				// and is never acknowledged.
				var acked []int
				for id := 101; id <= 105; id++ {
					if commitOne(ctx, p.DSN(p.link.Addr()), id, 500*time.Millisecond) == nil {
						acked = append(acked, id)
					}
				}
				evidence, err := p.Failover(ctx)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("evidence: %s", evidence)
				for _, want := range []string{"postgres-0 killed (signal: killed)", "postgres-1 promoted (timeline 2)", "link postgres → postgres-1"} {
					if !strings.Contains(evidence, want) {
						t.Errorf("evidence %q does not say %q", evidence, want)
					}
				}
				if _, err := cut.Heal(ctx); err != nil {
					t.Fatal(err)
				}
				got := readIDs(t, ctx, p.DSN(p.link.Addr()), "acked")
				if lost := missing(before, got); len(lost) > 0 {
					t.Errorf("rows committed and replicated before the cut lost: %v", lost)
				}
				lost := missing(acked, got)
				t.Logf("%s: %d commits acknowledged while the standby was cut off, %d of them lost", tc.mode, len(acked), len(lost))
				if tc.sync {
					if len(acked) > 0 {
						t.Errorf("synchronous standby cut off, yet commits %v were acknowledged", acked)
					}
				} else if len(acked) != 5 || len(lost) != len(acked) {
					t.Errorf("asynchronous standby: acknowledged %v, lost %v; want all 5 acknowledged and lost", acked, lost)
				}
				if p.Primary().Name() != "postgres-1" || p.Endpoint() != p.nodes[1].Endpoint() || p.link.Upstream() != p.Endpoint() {
					t.Errorf("primary %s at %s, link to %s", p.Primary().Name(), p.Endpoint(), p.link.Upstream())
				}
			})

			t.Run("start makes the deposed node a standby of the new primary", func(t *testing.T) {
				if err := p.Start(ctx); err != nil {
					t.Fatal(err)
				}
				var state, syncState string
				c := pgConnect(t, ctx, p.DSN(p.link.Addr()))
				if err := c.QueryRow(ctx, "SELECT state, sync_state FROM pg_stat_replication WHERE application_name = 'postgres-0'").Scan(&state, &syncState); err != nil {
					t.Fatal(err)
				}
				if state != "streaming" || (tc.sync && syncState != "sync") {
					t.Fatalf("postgres-0 is %s/%s", state, syncState)
				}
			})

			t.Run("failover under load", func(t *testing.T) {
				c := pgConnect(t, ctx, p.DSN(p.link.Addr()))
				if _, err := c.Exec(ctx, "CREATE TABLE load (id int PRIMARY KEY)"); err != nil {
					t.Fatal(err)
				}
				w := startWriters(ctx, p.DSN(p.link.Addr()), 4)
				w.waitAcked(t, ctx, 50)
				evidence, err := p.Failover(ctx)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("evidence: %s", evidence)
				if !strings.Contains(evidence, "postgres-0 promoted (timeline 3)") {
					t.Errorf("evidence %q: want postgres-0 promoted (timeline 3)", evidence)
				}
				// The writers reconnect through the same address and
				// commit on the new primary.
				w.waitAcked(t, ctx, w.count()+50)
				acked := w.stop()
				got := readIDs(t, ctx, p.DSN(p.link.Addr()), "load")
				lost := missing(acked, got)
				t.Logf("%s: %d commits acknowledged, %d lost", tc.mode, len(acked), len(lost))
				if tc.sync && len(lost) > 0 {
					t.Errorf("synchronous standby: acknowledged commits lost: %v", lost)
				}
			})

			t.Run("close leaves no process, temp dir or shared memory", func(t *testing.T) {
				shmBefore := shmFiles(t)
				pids = append(pids, p.PIDs()...)
				var postmasters []int
				for _, n := range p.Nodes() {
					n.mu.Lock()
					if n.p != nil {
						postmasters = append(postmasters, n.p.PGID())
					}
					n.mu.Unlock()
				}
				if err := p.Close(); err != nil {
					t.Fatal(err)
				}
				for _, pid := range pids {
					if alive(pid) {
						t.Errorf("pid %d outlived Close", pid)
					}
				}
				for _, d := range dirs {
					if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("temp dir %s outlived Close: %v", d, err)
					}
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
					if f := strings.Fields(l); len(f) > 4 && slices.Contains(postmasters, atoi(f[4])) {
						t.Errorf("System V segment %s (created by postmaster %s) left behind", f[1], f[4])
					}
				}
			})
		})
	}
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// insertRange commits rows from..to, one transaction each, and returns
// their ids.
func insertRange(t *testing.T, ctx context.Context, c *pgx.Conn, from, to int) []int {
	t.Helper()
	var ids []int
	for id := from; id <= to; id++ {
		if _, err := c.Exec(ctx, "INSERT INTO acked VALUES ($1)", id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// commitOne commits row id into acked on a connection of its own; nil
// means the commit was acknowledged.
func commitOne(ctx context.Context, dsn string, id int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	_, err = c.Exec(ctx, "INSERT INTO acked VALUES ($1)", id)
	return err
}

// waitCaughtUp waits until the standby has replayed everything the
// primary has flushed.
func waitCaughtUp(t *testing.T, ctx context.Context, p *pgPair) {
	t.Helper()
	flushed, err := lsnOf(ctx, p.Primary().Postgres, 5*time.Second, "SELECT pg_current_wal_flush_lsn()::text")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, 30*time.Second, func() error {
		replayed, err := lsnOf(ctx, p.Standby().Postgres, 5*time.Second, "SELECT pg_last_wal_replay_lsn()::text")
		if err != nil {
			return err
		}
		if replayed < flushed {
			return fmt.Errorf("standby replayed %s of %s", replayed, flushed)
		}
		return nil
	})
}

// readIDs is every id in table, read through dsn.
func readIDs(t *testing.T, ctx context.Context, dsn, table string) map[int]bool {
	t.Helper()
	c := pgConnect(t, ctx, dsn)
	rows, err := c.Query(ctx, "SELECT id FROM "+table)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]bool{}
	for _, id := range ids {
		out[id] = true
	}
	return out
}

func missing(ids []int, got map[int]bool) []int {
	var out []int
	for _, id := range ids {
		if !got[id] {
			out = append(out, id)
		}
	}
	return out
}

// writers commit rows into load as fast as they can, each on its own
// connection, reconnecting after any error, and remember which commits
// were acknowledged.
type writers struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	acked  []int
}

func startWriters(ctx context.Context, dsn string, n int) *writers {
	ctx, cancel := context.WithCancel(ctx)
	w := &writers{cancel: cancel}
	for i := range n {
		w.wg.Go(func() {
			var c *pgx.Conn
			defer func() {
				if c != nil {
					c.Close(context.Background())
				}
			}()
			for id := i; ctx.Err() == nil; id += n {
				if c == nil {
					var err error
					if c, err = pgx.Connect(ctx, dsn); err != nil {
						c = nil
						select { // the link is being re-pointed
						case <-ctx.Done():
						case <-time.After(20 * time.Millisecond):
						}
						continue
					}
				}
				if _, err := c.Exec(ctx, "INSERT INTO load VALUES ($1)", id); err != nil {
					c.Close(context.Background())
					c = nil
					continue
				}
				w.mu.Lock()
				w.acked = append(w.acked, id)
				w.mu.Unlock()
			}
		})
	}
	return w
}

func (w *writers) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

func (w *writers) waitAcked(t *testing.T, ctx context.Context, n int) {
	t.Helper()
	waitFor(t, ctx, 60*time.Second, func() error {
		if got := w.count(); got < n {
			return fmt.Errorf("%d commits acknowledged, want %d", got, n)
		}
		return nil
	})
}

// stop stops the writers and returns every acknowledged id.
func (w *writers) stop() []int {
	w.cancel()
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.acked)
}

// BenchmarkPostgresStandbyColdStart measures a primary and a standby from
// nothing (initdb, start, base backup, start) until the standby streams
// (and, sync, is the synchronous one). The network is made once, outside
// the timing; teardown is not timed. Issue 22's budget is 5 s.
func BenchmarkPostgresStandbyColdStart(b *testing.B) {
	for _, mode := range []struct {
		name string
		sync bool
	}{{"async", false}, {"sync", true}} {
		b.Run(mode.name, func(b *testing.B) {
			n := pairNetwork(b)
			ctx := context.Background()
			for b.Loop() {
				b.StopTimer()
				p, err := newPair(n, mode.sync)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				err = p.Start(ctx)
				b.StopTimer()
				if err := errors.Join(err, p.close()); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
