package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deliverycheck/deliverycheck/cluster/netns"
	"github.com/deliverycheck/deliverycheck/internal/logtail"
	"github.com/deliverycheck/deliverycheck/process"
)

// PostgresPort is the port every node of a [PostgresCluster] listens on,
// each in its own network namespace, as servers on hosts of their own do.
const PostgresPort = 5432

// PostgresClusterOptions configure a PostgreSQL primary with a streaming
// standby.
type PostgresClusterOptions struct {
	// ReplicatedOptions name the two nodes, the primary first
	// (postgres-0, postgres-1), in their Network. Advertise is not used:
	// PostgreSQL tells its clients no address, they dial the database
	// link.
	ReplicatedOptions
	// BinDir and User are as in [PostgresOptions].
	BinDir string
	User   string
	// Sync makes the standby synchronous: the primary names it in
	// synchronous_standby_names and synchronous_commit is remote_apply, so
	// a commit is acknowledged only once the standby has applied it.
	// Otherwise the standby is asynchronous: a commit is acknowledged once
	// the primary has flushed it, and whatever the standby had not
	// received when the primary dies is gone after a failover.
	Sync bool
	// Promoted, when set, is called by Failover once the promoted node
	// accepts writes, with its name and endpoint: the cluster points the
	// database link there, so every client of the run follows. It returns
	// what it did, in words, for the failover's evidence.
	Promoted func(ctx context.Context, node, endpoint string) (string, error)
}

// PostgresCluster is a PostgreSQL primary with one streaming standby, each
// node in its own network namespace. It is a cluster.Service named
// "postgres" whose Endpoint is the current primary's; Start returns once
// the standby streams from the primary (for a synchronous standby, once
// the primary counts it as its synchronous one). Kill, Pause, Resume and
// Restart act on the current primary, as they do on a single server; its
// nodes are services of their own for faults aimed at one. Failover kills
// the primary and promotes the standby.
//
// The standby is a base backup of the primary (pg_basebackup over the
// replication protocol) with standby.signal, primary_conninfo naming the
// primary by its node name, and a physical replication slot on the
// primary, so the primary keeps every WAL segment the standby has not
// received, however long it is cut off.
type PostgresCluster struct {
	nodes    []*PostgresNode
	sync     bool
	promoted func(ctx context.Context, node, endpoint string) (string, error)
	log      *slog.Logger

	// op serializes what changes roles or starts nodes: Start, Stop,
	// Restart, Failover and the nodes' Start and Restart.
	op sync.Mutex

	mu      sync.Mutex
	primary int // index of the node that is primary now
}

// PostgresNode is one node of a [PostgresCluster]: a PostgreSQL server
// that a fault can kill, pause or restart alone. Start brings it back in
// the role it has now; a node a failover deposed is made again as a
// standby of the new primary (its data is of the old timeline).
type PostgresNode struct {
	*Postgres
	c *PostgresCluster
	i int
}

// pgNode is what a node of a PostgresCluster adds to its Postgres: the
// namespace it runs in, how its data dir is made, and its role's settings
// at each launch.
type pgNode struct {
	net      *netns.Network
	name     string
	prepare  func(ctx context.Context) error
	settings func() []string
}

// command is argv run in the node's namespace, as cred's user when set.
func (n *pgNode) command(argv []string, cred *syscall.Credential) ([]string, error) {
	if cred == nil {
		return n.net.Command(n.name, argv...)
	}
	return n.net.CommandAs(n.name, cred.Uid, cred.Gid, argv...)
}

// NewPostgresCluster prepares a primary and a standby. Nothing runs until
// Start. The caller should call Close when finished.
func NewPostgresCluster(o PostgresClusterOptions) (_ *PostgresCluster, err error) {
	if err := o.check("postgres"); err != nil {
		return nil, err
	}
	if len(o.Nodes) != 2 {
		return nil, fmt.Errorf("postgres: %d nodes: want a primary and a standby", len(o.Nodes))
	}
	l := o.Logger
	if l == nil {
		l = slog.Default()
	}
	c := &PostgresCluster{sync: o.Sync, promoted: o.Promoted, log: l.With("service", "postgres")}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close())
		}
	}()
	for i, name := range o.Nodes {
		if o.Network.Namespace(name) == "" {
			return nil, fmt.Errorf("postgres: node %s is not a node of network %s", name, o.Network.Name())
		}
		pg, err := newPostgres(name, PostgresPort, PostgresOptions{Options: o.Options, BinDir: o.BinDir, User: o.User})
		if err != nil {
			return nil, err
		}
		pg.node = &pgNode{net: o.Network, name: name, prepare: c.prepare(i), settings: c.settings(i)}
		c.nodes = append(c.nodes, &PostgresNode{Postgres: pg, c: c, i: i})
	}
	return c, nil
}

// Name implements cluster.Service.
func (c *PostgresCluster) Name() string { return "postgres" }

// Nodes are the nodes, in the order given (the first is the first
// primary).
func (c *PostgresCluster) Nodes() []*PostgresNode { return c.nodes }

// Primary is the node that is primary now.
func (c *PostgresCluster) Primary() *PostgresNode { return c.nodes[c.primaryIndex()] }

// Leader is the name of the node that is primary now ("postgres-0"): the
// node a replicated database's clients write to, as a replicated
// broker's leader is the one they publish to.
func (c *PostgresCluster) Leader() string { return c.Primary().Name() }

// Standby is the node that is the standby now (or was made to be one).
func (c *PostgresCluster) Standby() *PostgresNode { return c.nodes[1-c.primaryIndex()] }

func (c *PostgresCluster) primaryIndex() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.primary
}

// Endpoint implements cluster.Service: the current primary's.
func (c *PostgresCluster) Endpoint() string { return c.Primary().Endpoint() }

// DSN is as [Postgres.DSN].
func (c *PostgresCluster) DSN(addr string) string { return c.nodes[0].DSN(addr) }

// LogFile implements cluster.LogFiler: the current primary's log (each
// node has its own).
func (c *PostgresCluster) LogFile() string { return c.Primary().LogFile() }

// Version implements cluster.Versioner.
func (c *PostgresCluster) Version() string { return c.Primary().Version() }

// ExitStatus is the current primary's, as [base.ExitStatus].
func (c *PostgresCluster) ExitStatus() string { return c.Primary().ExitStatus() }

// PIDs implements cluster.PIDer: every node's.
func (c *PostgresCluster) PIDs() []int {
	var out []int
	for _, n := range c.nodes {
		out = append(out, n.PIDs()...)
	}
	return out
}

// Start implements cluster.Service: it starts the primary (initdb the
// first time), then the standby (a base backup of the primary the first
// time, and after a failover deposed it), and waits until the standby
// streams.
func (c *PostgresCluster) Start(ctx context.Context) error {
	c.op.Lock()
	defer c.op.Unlock()
	p := c.primaryIndex()
	if err := c.startNode(ctx, p); err != nil {
		return err
	}
	return c.startNode(ctx, 1-p)
}

// Stop implements cluster.Service: the primary first (a fast shutdown
// sends the standby everything it wrote), then the standby.
func (c *PostgresCluster) Stop(ctx context.Context) error {
	c.op.Lock()
	defer c.op.Unlock()
	p := c.primaryIndex()
	return errors.Join(c.nodes[p].Postgres.Stop(ctx), c.nodes[1-p].Postgres.Stop(ctx))
}

// Restart implements cluster.Restarter: the primary is restarted in place
// and the standby, which kept running, streams from it again.
func (c *PostgresCluster) Restart(ctx context.Context) error {
	c.op.Lock()
	defer c.op.Unlock()
	p := c.primaryIndex()
	if err := c.nodes[p].Postgres.Stop(ctx); err != nil {
		return err
	}
	if err := c.startNode(ctx, p); err != nil {
		return err
	}
	if c.nodes[1-p].isRunning() {
		return c.waitStreaming(ctx, 1-p)
	}
	return nil
}

// Kill implements cluster.Killer: kill -9 of the primary.
func (c *PostgresCluster) Kill(ctx context.Context) error { return c.Primary().Kill(ctx) }

// Pause implements cluster.Pauser: the primary is frozen.
func (c *PostgresCluster) Pause(ctx context.Context) error { return c.Primary().Pause(ctx) }

// Resume implements cluster.Pauser.
func (c *PostgresCluster) Resume(ctx context.Context) error { return c.Primary().Resume(ctx) }

// Close implements cluster.Service: every node is closed (shut down,
// its shared memory released, its temp dir removed).
func (c *PostgresCluster) Close() error {
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Go(func() { errs[i] = n.Postgres.Close() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Start implements cluster.Service for one node, in the role it has now.
func (n *PostgresNode) Start(ctx context.Context) error {
	n.c.op.Lock()
	defer n.c.op.Unlock()
	return n.c.startNode(ctx, n.i)
}

// Restart implements cluster.Restarter for one node.
func (n *PostgresNode) Restart(ctx context.Context) error {
	n.c.op.Lock()
	defer n.c.op.Unlock()
	if err := n.Postgres.Stop(ctx); err != nil {
		return err
	}
	return n.c.startNode(ctx, n.i)
}

func (n *PostgresNode) isRunning() bool {
	_, err := n.running()
	return err == nil
}

// startNode starts node i unless it runs; a standby is ready once it
// streams from the primary.
func (c *PostgresCluster) startNode(ctx context.Context, i int) error {
	n := c.nodes[i]
	if i == c.primaryIndex() {
		if n.isRunning() {
			return nil
		}
		return n.Postgres.Start(ctx)
	}
	if !n.isRunning() {
		if !c.nodes[1-i].isRunning() {
			return fmt.Errorf("start standby %s: primary %s is not running", n.Name(), c.nodes[1-i].Name())
		}
		if err := n.Postgres.Start(ctx); err != nil {
			return err
		}
	}
	return c.waitStreaming(ctx, i)
}

// prepare makes node i's data dir if it has none: initdb on the first
// primary, a base backup of the primary on a standby.
func (c *PostgresCluster) prepare(i int) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		pg := c.nodes[i].Postgres
		pg.mu.Lock()
		inited := pg.inited
		pg.mu.Unlock()
		switch {
		case inited:
			return nil
		case i != c.primaryIndex():
			return c.baseBackup(ctx, i)
		}
		if err := pg.initdb(ctx); err != nil {
			return err
		}
		// Defined from the first boot, so no commit is ever acknowledged
		// without the standby before the standby exists.
		auto := ""
		if c.sync {
			auto = syncStandbyNames(c.nodes[1-i].Name())
		}
		return errors.Join(c.allowNodes(pg), writeAutoConf(pg, auto))
	}
}

// settings are node i's role's settings, at each of its launches.
func (c *PostgresCluster) settings(i int) func() []string {
	return func() []string {
		var out []string
		if c.sync {
			out = append(out, "-c", "synchronous_commit=remote_apply")
		}
		if p := c.primaryIndex(); i != p {
			self := c.nodes[i].Name()
			out = append(out,
				"-c", fmt.Sprintf("primary_conninfo=host=%s port=%d user=postgres application_name=%s connect_timeout=2",
					c.nodes[p].Name(), PostgresPort, self),
				"-c", "primary_slot_name="+slotName(self),
				// Reconnect to a restarted primary within a tenth of a
				// second, not the default five.
				"-c", "wal_retrieve_retry_interval=100ms")
		}
		return out
	}
}

// slotName is the replication slot, on the primary, of standby node:
// slot names take lowercase letters, digits and '_'.
func slotName(node string) string { return strings.ReplaceAll(node, "-", "_") }

// syncStandbyNames is the postgresql.auto.conf line making node the
// synchronous standby (double-quoted: a name with '-' is no identifier).
func syncStandbyNames(node string) string {
	return fmt.Sprintf("synchronous_standby_names = '\"%s\"'\n", node)
}

// allowNodes lets the other nodes and the harness (all on the run's
// subnet, which each namespace is fenced to) connect, for queries and
// for replication.
func (c *PostgresCluster) allowNodes(pg *Postgres) error {
	path := filepath.Join(pg.data, "pg_hba.conf")
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	subnet := pg.node.net.Subnet().String()
	rules := fmt.Sprintf("host all all %s trust\nhost replication all %s trust\n", subnet, subnet)
	if strings.Contains(string(b), rules) {
		return nil
	}
	return os.WriteFile(path, append(b, rules...), 0o600)
}

// writeAutoConf replaces pg's postgresql.auto.conf (what ALTER SYSTEM
// writes) with lines.
func writeAutoConf(pg *Postgres, lines string) error {
	return writeOwned(pg, "postgresql.auto.conf",
		"# Do not edit this file manually!\n# It will be overwritten by the ALTER SYSTEM command.\n"+lines)
}

// writeOwned writes a file of pg's data dir, owned by the server's user.
func writeOwned(pg *Postgres, name, content string) error {
	path := filepath.Join(pg.data, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		return err
	}
	if pg.cred != nil {
		return os.Chown(path, int(pg.cred.Uid), int(pg.cred.Gid))
	}
	return nil
}

// baseBackup makes node i's data dir a standby of the primary: any old
// one is removed (with the shared memory a killed server left), the
// primary's slot for it made afresh, pg_basebackup run from the node's
// own namespace (so it reaches the primary by name, as replication
// will), and standby.signal written. In sync mode the primary then names
// the node as its synchronous standby.
func (c *PostgresCluster) baseBackup(ctx context.Context, i int) error {
	pg, from := c.nodes[i].Postgres, c.nodes[1-i].Postgres
	start := time.Now()
	if err := pg.removeStaleSegment(); err != nil {
		return err
	}
	var errs []error
	for attempt := 1; ; attempt++ {
		err := c.baseBackupOnce(ctx, pg, from)
		if err == nil {
			break
		}
		errs = append(errs, fmt.Errorf("attempt %d: %w", attempt, err))
		if attempt == baseBackupAttempts || ctx.Err() != nil {
			return errors.Join(errs...)
		}
		c.log.Warn("base backup failed, trying again", "node", pg.name, "from", from.name, "attempt", attempt, "err", err)
	}
	// The primary's synchronous_standby_names stays the primary's: a
	// promoted standby must accept writes with no standby of its own.
	if err := errors.Join(writeAutoConf(pg, ""), writeOwned(pg, "standby.signal", "")); err != nil {
		return fmt.Errorf("base backup: %w", err)
	}
	pg.mu.Lock()
	pg.inited = true
	pg.mu.Unlock()
	if c.sync {
		// After a failover: the new primary learns its new standby's name
		// at runtime. Until its checkpointer has taken the reload (within
		// milliseconds), a commit may be acknowledged without waiting, as
		// on any PostgreSQL whose synchronous standby changes.
		if err := exec1(ctx, from, "ALTER SYSTEM SET synchronous_standby_names = '\""+pg.name+"\"'"); err != nil {
			return fmt.Errorf("name %s the synchronous standby: %w", pg.name, err)
		}
		if err := exec1(ctx, from, "SELECT pg_reload_conf()"); err != nil {
			return fmt.Errorf("name %s the synchronous standby: %w", pg.name, err)
		}
	}
	c.log.Debug("base backup made", "node", pg.name, "from", from.name, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// A base backup of a test database takes well under a second. Each
// attempt still gets baseBackupAttemptTimeout, and a hung or failed one
// is tried again from scratch, baseBackupAttempts times in all: a heal
// must end (nemesis.HealTimeout), and a stuck one should not fail it.
const (
	baseBackupAttempts       = 3
	baseBackupAttemptTimeout = 30 * time.Second
)

// baseBackupOnce is one attempt of [PostgresCluster.baseBackup]: pg's
// data dir emptied, its slot on from made afresh, pg_basebackup run.
func (c *PostgresCluster) baseBackupOnce(ctx context.Context, pg, from *Postgres) error {
	ctx, cancel := context.WithTimeout(ctx, baseBackupAttemptTimeout)
	defer cancel()
	if err := os.RemoveAll(pg.data); err != nil {
		return fmt.Errorf("base backup: %w", err)
	}
	slot := slotName(pg.name)
	if err := exec1(ctx, from, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", slot); err != nil {
		return fmt.Errorf("base backup: drop old slot %s on %s: %w", slot, from.name, err)
	}
	argv, err := pg.node.command([]string{filepath.Join(pg.bin, "pg_basebackup"),
		"-h", from.name, "-p", strconv.Itoa(PostgresPort), "-U", "postgres",
		"-D", pg.data, "-X", "stream", "--checkpoint=fast", "--no-sync", "--verbose",
		"--create-slot", "--slot=" + slot}, pg.cred)
	if err != nil {
		return fmt.Errorf("base backup: %w", err)
	}
	// When ctx ends, the whole group goes (process.Command): pg_basebackup
	// forks a child that streams the WAL, shares its output pipe and
	// stops only when its parent tells it to. Killing the parent alone
	// left the child streaming for ever and holding the pipe, which hung
	// a failover's heal for 12 and 22 minutes when a run's end cut the
	// heal short mid-backup (bad-async-standby).
	cmd := process.Command(ctx, argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C", "LC_ALL=C"}
	if out, err := cmd.CombinedOutput(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (no end after %v)", err, baseBackupAttemptTimeout)
		}
		return fmt.Errorf("base backup of %s: %w\n%s", from.name, err, out)
	}
	return nil
}

// waitStreaming waits until the primary lists standby node i in
// pg_stat_replication as streaming, and, for a synchronous standby, as
// its synchronous one.
func (c *PostgresCluster) waitStreaming(ctx context.Context, i int) error {
	standby, primary := c.nodes[i], c.nodes[1-i]
	want := "streaming"
	if c.sync {
		want += "/sync"
	}
	var last string
	err := poll(ctx, func(ctx context.Context) error {
		if !standby.isRunning() {
			return errStop{fmt.Errorf("%s exited (%s)", standby.Name(), standby.ExitStatus())}
		}
		conn, err := pgx.Connect(ctx, primary.DSN(primary.Endpoint()))
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		var state, syncState string
		err = conn.QueryRow(ctx, "SELECT state, sync_state FROM pg_stat_replication WHERE application_name = $1", standby.Name()).Scan(&state, &syncState)
		if errors.Is(err, pgx.ErrNoRows) {
			last = "not connected"
			return errors.New(last)
		}
		if err != nil {
			return err
		}
		last = state
		if c.sync {
			last += "/" + syncState
		}
		if last != want {
			return fmt.Errorf("%s", last)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("standby %s not %s on %s: %w\n%s", standby.Name(), want, primary.Name(), err, tailOf(standby.Postgres))
	}
	c.log.Info("standby streaming", "standby", standby.Name(), "primary", primary.Name(), "sync", c.sync)
	return nil
}

// Failover implements cluster.Failoverer: kill -9 of the primary,
// promotion of the standby (pg_promote), a wait until it accepts writes,
// then Promoted (the database link follows). The evidence says what
// happened in words, with the WAL positions that tell whether the standby
// had everything the primary had flushed, e.g. "postgres-0 killed
// (signal: killed) with WAL flushed to 0/3000148; postgres-1 promoted
// (timeline 2) having replayed to 0/3000060, 232 bytes short". The
// deposed node stays down; Start makes it a standby of the new primary.
func (c *PostgresCluster) Failover(ctx context.Context) (string, error) {
	c.op.Lock()
	defer c.op.Unlock()
	old := c.primaryIndex()
	o, s := c.nodes[old], c.nodes[1-old]
	if !s.isRunning() {
		return "", fmt.Errorf("postgres failover: standby %s is not running", s.Name())
	}
	// A frozen standby cannot be promoted.
	if err := s.Resume(ctx); err != nil {
		return "", fmt.Errorf("postgres failover: resume %s: %w", s.Name(), err)
	}
	var words []string
	var flushed lsn
	var ferr error = errors.New("not running")
	if o.isRunning() {
		// What the primary had flushed, if it still answers: the
		// yardstick of what the standby may lack.
		flushed, ferr = lsnOf(ctx, o.Postgres, time.Second, "SELECT pg_current_wal_flush_lsn()::text")
		if err := o.Kill(ctx); err != nil {
			return "", fmt.Errorf("postgres failover: %w", err)
		}
		w := o.Name() + " killed (" + o.ExitStatus() + ")"
		if ferr == nil {
			w += ", its WAL flushed to " + flushed.String() + " just before"
		}
		words = append(words, w)
	} else {
		words = append(words, o.Name()+" was down already ("+o.ExitStatus()+")")
	}
	replayed, rerr := lsnOf(ctx, s.Postgres, 5*time.Second, "SELECT pg_last_wal_replay_lsn()::text")
	if err := promote(ctx, s.Postgres); err != nil {
		return "", fmt.Errorf("postgres failover: promote %s: %w", s.Name(), err)
	}
	var timeline int64
	err := poll(ctx, func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, s.DSN(s.Endpoint()))
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		// An xid is what a server in recovery cannot assign.
		var tli string
		if err := conn.QueryRow(ctx, "SELECT substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8) FROM (SELECT pg_current_xact_id()) x").Scan(&tli); err != nil {
			return err
		}
		timeline, err = strconv.ParseInt(tli, 16, 64)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("postgres failover: %s does not accept writes: %w\n%s", s.Name(), err, tailOf(s.Postgres))
	}
	c.mu.Lock()
	c.primary = 1 - old
	c.mu.Unlock()
	// The deposed node's data is of the old timeline: Start makes it again.
	o.Postgres.mu.Lock()
	o.inited = false
	o.Postgres.mu.Unlock()
	w := fmt.Sprintf("%s promoted (timeline %d)", s.Name(), timeline)
	if rerr == nil {
		w += " having replayed to " + replayed.String()
		if ferr == nil && replayed < flushed {
			w += fmt.Sprintf(": %d bytes short", flushed-replayed)
		}
	}
	words = append(words, w)
	c.log.Info("failover", "from", o.Name(), "to", s.Name(), "timeline", timeline)
	if c.promoted != nil {
		more, err := c.promoted(ctx, s.Name(), s.Endpoint())
		if err != nil {
			return strings.Join(words, "; "), fmt.Errorf("postgres failover: %s promoted, but: %w", s.Name(), err)
		}
		words = append(words, more)
	}
	return strings.Join(words, "; "), nil
}

// promote ends pg's recovery (pg_promote) and waits until it has.
func promote(ctx context.Context, pg *Postgres) error {
	conn, err := pgx.Connect(ctx, pg.DSN(pg.Endpoint()))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_promote(true, 60)").Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return errors.New("still in recovery after 60s")
	}
	return nil
}

// lsn is a WAL position (pg_lsn).
type lsn uint64

func (l lsn) String() string { return fmt.Sprintf("%X/%X", uint64(l)>>32, uint64(l)&0xffffffff) }

func parseLSN(s string) (lsn, error) {
	hi, lo, ok := strings.Cut(s, "/")
	h, herr := strconv.ParseUint(hi, 16, 32)
	l, lerr := strconv.ParseUint(lo, 16, 32)
	if !ok || herr != nil || lerr != nil {
		return 0, fmt.Errorf("bad WAL position %q", s)
	}
	return lsn(h<<32 | l), nil
}

// lsnOf is the WAL position query returns on pg, within timeout.
func lsnOf(ctx context.Context, pg *Postgres, timeout time.Duration, query string) (lsn, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.DSN(pg.Endpoint()))
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	var s *string
	if err := conn.QueryRow(ctx, query).Scan(&s); err != nil {
		return 0, err
	}
	if s == nil {
		return 0, errors.New("no WAL position")
	}
	return parseLSN(*s)
}

// exec1 runs one statement on pg, on a connection of its own.
func exec1(ctx context.Context, pg *Postgres, sql string, args ...any) error {
	conn, err := pgx.Connect(ctx, pg.DSN(pg.Endpoint()))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

// errStop is what f returns to poll when trying again is pointless.
type errStop struct{ error }

func (e errStop) Unwrap() error { return e.error }

// poll retries f, each try bounded, until it succeeds, returns an
// errStop, or ctx ends; the error is then ctx's with f's last.
func poll(ctx context.Context, f func(context.Context) error) error {
	delay := 10 * time.Millisecond
	for {
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := f(tctx)
		cancel()
		var stop errStop
		if err == nil || errors.As(err, &stop) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(delay):
		}
		delay = min(delay*2, 100*time.Millisecond)
	}
}

// tailOf is the end of pg's log, for errors that need explaining.
func tailOf(pg *Postgres) string { return logtail.File(pg.logPath, 20) }
