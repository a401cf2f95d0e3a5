package local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/deliverycheck/deliverycheck/cluster/freeport"
	"github.com/deliverycheck/deliverycheck/cluster/probe"
	"github.com/deliverycheck/deliverycheck/process"
)

// PostgresOptions configure a local PostgreSQL server.
type PostgresOptions struct {
	Options
	// BinDir holds initdb and postgres, overriding the default: $PG_BIN,
	// else the newest /usr/lib/postgresql/<ver>/bin.
	BinDir string
	// User is the unprivileged OS user the server runs as when the
	// harness is root (PostgreSQL refuses to run as root), overriding the
	// default "postgres" (or "nobody" where no such user exists).
	User string
}

// Postgres is a PostgreSQL server run from the installed binaries as a
// child process. fsync and synchronous_commit stay on, because crash tests
// need acknowledged commits to survive kill -9; wal_level is logical for
// change data capture.
type Postgres struct {
	*base
	bin     string
	port    int
	cred    *syscall.Credential
	data    string
	logPath string

	// node is set for a node of a [PostgresCluster]: the server runs in
	// the node's network namespace with its role's settings.
	node *pgNode

	mu      sync.Mutex
	version string
	inited  bool
}

// NewPostgres prepares a server on a free port in a fresh temp dir. Nothing
// runs until Start. The caller should call Close when finished.
func NewPostgres(o PostgresOptions) (*Postgres, error) {
	ports, err := freeport.Take(1)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return newPostgres("postgres", ports[0], o)
}

// newPostgres prepares a server called name (its temp dir's and log
// lines' name) that will listen on port.
func newPostgres(name string, port int, o PostgresOptions) (*Postgres, error) {
	bin, err := PostgresBinDir(o.BinDir)
	if err != nil {
		return nil, err
	}
	b, err := newBase(name, o.Options)
	if err != nil {
		return nil, err
	}
	p := &Postgres{base: b, bin: bin, port: port, data: filepath.Join(b.dir, "data"), logPath: filepath.Join(b.dir, "postgres.log")}
	if os.Geteuid() == 0 {
		name := o.User
		if name == "" {
			name = "postgres"
			if _, err := user.Lookup(name); err != nil {
				name = "nobody"
			}
		}
		cred, err := credentialFor(name)
		if err != nil {
			b.closeBase(nil)
			return nil, fmt.Errorf("%s: %w", b.name, err)
		}
		p.cred = cred
		if err := os.Chown(b.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			b.closeBase(nil)
			return nil, fmt.Errorf("%s: %w", b.name, err)
		}
	}
	return p, nil
}

// PostgresBinDir finds the directory holding initdb and postgres: dir if
// set, else $PG_BIN, else the newest /usr/lib/postgresql/<ver>/bin.
func PostgresBinDir(dir string) (string, error) {
	if dir == "" {
		dir = os.Getenv("PG_BIN")
	}
	if dir == "" {
		vers, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
		sort.Slice(vers, func(i, j int) bool { return pgMajor(vers[i]) > pgMajor(vers[j]) })
		if len(vers) > 0 {
			dir = vers[0]
		}
	}
	if dir == "" {
		return "", fmt.Errorf("postgres: no server binaries found (install with: apt-get install -y postgresql)")
	}
	for _, b := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("postgres: %s missing in %s (install with: apt-get install -y postgresql)", b, dir)
		}
	}
	return dir, nil
}

func pgMajor(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// credentialFor looks up an OS user for running a child as that user.
func credentialFor(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("look up user %s: %w", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// Endpoint implements cluster.Service.
func (p *Postgres) Endpoint() string {
	if p.node != nil {
		return net.JoinHostPort(p.node.net.Addr(p.node.name).String(), strconv.Itoa(p.port))
	}
	return fmt.Sprintf("127.0.0.1:%d", p.port)
}

// LogFile implements cluster.LogFiler.
func (p *Postgres) LogFile() string { return p.logPath }

// Version implements cluster.Versioner, e.g. "PostgreSQL 15.18 (Debian 15.18-0+deb12u1)".
func (p *Postgres) Version() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.version
}

// DSN returns a connection string for the server reached at addr, which is
// the server's Endpoint or a proxy in front of it.
func (p *Postgres) DSN(addr string) string {
	return fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&connect_timeout=5", addr)
}

// initdb creates the cluster on first start.
func (p *Postgres) initdb(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inited {
		return nil
	}
	// initdb runs postgres in bootstrap mode as its child.
	cmd := process.Command(ctx, filepath.Join(p.bin, "initdb"),
		"-D", p.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C", "LC_ALL=C"}
	cmd.SysProcAttr.Credential = p.cred
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}
	p.inited = true
	return nil
}

// Start implements cluster.Service: initdb on first start, then postgres,
// ready when a pgx connection succeeds.
func (p *Postgres) Start(ctx context.Context) error {
	prepare, listen := p.initdb, "127.0.0.1"
	if p.node != nil {
		// Every address of its own namespace: lo and the node's.
		prepare, listen = p.node.prepare, "*"
	}
	if err := prepare(ctx); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	argv := []string{filepath.Join(p.bin, "postgres"),
		"-D", p.data, "-p", strconv.Itoa(p.port),
		"-c", "listen_addresses=" + listen,
		"-c", "unix_socket_directories=" + p.dir,
		"-c", "fsync=on",
		"-c", "synchronous_commit=on",
		"-c", "wal_level=logical",
		"-c", "max_wal_senders=10",
		"-c", "max_replication_slots=10",
		"-c", "max_connections=200",
		"-c", "shared_buffers=128MB",
		"-c", "logging_collector=off",
		// Dynamic shared memory in files under the data dir
		// (pg_dynshmem/), not in /dev/shm: a server that never
		// got to shut down (kill -9 by a nemesis, then the end
		// of the run) leaves its segments behind, and there
		// they go with the temp dir instead of piling up.
		"-c", "dynamic_shared_memory_type=mmap",
		// Each row's commit time, for judging order by when
		// effects committed (pg_xact_commit_timestamp).
		"-c", "track_commit_timestamp=on",
	}
	spec := process.Spec{Log: p.logPath, Cred: p.cred, ShutdownSig: syscall.SIGQUIT}
	if p.node != nil {
		var err error
		if argv, err = p.node.command(append(argv, p.node.settings()...), p.cred); err != nil {
			return fmt.Errorf("start %s: %w", p.name, err)
		}
		spec.Cred = nil // ip needs root; setpriv switches user after it
	}
	spec.Path, spec.Args = argv[0], argv[1:]
	proc, err := p.launch(spec)
	if err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	err = p.waitReady(ctx, proc, p.logPath, func(ctx context.Context) error {
		v, err := probe.Postgres(ctx, p.DSN(p.Endpoint()))
		if err != nil {
			return err
		}
		p.mu.Lock()
		p.version = v
		p.mu.Unlock()
		return nil
	})
	if err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	p.log.Info("ready", "endpoint", p.Endpoint(), "version", p.Version())
	return nil
}

// Stop implements cluster.Service with PostgreSQL's fast shutdown (SIGINT):
// clients are disconnected, and everything committed is flushed.
func (p *Postgres) Stop(ctx context.Context) error { return p.stopWith(ctx, syscall.SIGINT) }

// Restart implements cluster.Restarter.
func (p *Postgres) Restart(ctx context.Context) error {
	if err := p.Stop(ctx); err != nil {
		return err
	}
	return p.Start(ctx)
}

// closeShutdown bounds Close's shutdown before the server is killed.
const closeShutdown = 15 * time.Second

// Close implements cluster.Service. The server is shut down, not killed:
// a PostgreSQL killed with SIGKILL never releases its System V shared
// memory segment, which outlives the run (issue 19). Immediate shutdown
// (SIGQUIT) is enough, and fast: the shutdown checkpoint a fast shutdown
// makes is pointless for a data dir about to be removed. With Keep the
// data dir stays, so it gets a fast shutdown and is left clean. Either
// is bounded by closeShutdown, then the group is killed; a segment left
// by a server that was killed earlier (and never restarted) is removed.
func (p *Postgres) Close() error {
	sig := syscall.SIGQUIT
	if p.keep {
		sig = syscall.SIGINT
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeShutdown)
	defer cancel()
	serr := p.stopWith(ctx, sig)
	return errors.Join(serr, p.closeBase(p.removeStaleSegment))
}

// removeStaleSegment removes the System V shared memory segment of a
// server that died without shutting down. Its postmaster.pid is still in
// the data dir then, and names the segment (key and id, line 7); the
// segment is removed only if it still has that key and no process is
// attached to it, so a reused id is never touched.
func (p *Postgres) removeStaleSegment() error {
	b, err := os.ReadFile(filepath.Join(p.data, "postmaster.pid"))
	if errors.Is(err, os.ErrNotExist) {
		return nil // shut down cleanly, or never started
	}
	if err != nil {
		return fmt.Errorf("postgres: stale shared memory: %w", err)
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 7 {
		return nil
	}
	f := strings.Fields(lines[6])
	if len(f) != 2 {
		return nil
	}
	seg, ok := sysvSegment(f[1])
	if !ok || seg.key != f[0] || seg.nattch != 0 {
		return nil
	}
	id, _ := strconv.Atoi(f[1])
	if _, _, errno := syscall.Syscall(syscall.SYS_SHMCTL, uintptr(id), ipcRMID, 0); errno != 0 && errno != syscall.EINVAL {
		return fmt.Errorf("postgres: remove stale shared memory segment %d: %w", id, errno)
	}
	p.log.Debug("removed the shared memory segment of a killed server", "shmid", id)
	return nil
}

// ipcRMID is IPC_RMID from <sys/ipc.h> (the syscall package lacks it).
const ipcRMID = 0

// sysvInfo is a System V shared memory segment as /proc/sysvipc/shm
// lists it (key in decimal).
type sysvInfo struct {
	key    string
	nattch int
}

// sysvSegment looks up segment id in /proc/sysvipc/shm.
func sysvSegment(id string) (sysvInfo, bool) {
	b, err := os.ReadFile("/proc/sysvipc/shm")
	if err != nil {
		return sysvInfo{}, false
	}
	for _, l := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(l) // key shmid perms size cpid lpid nattch ...
		if len(f) > 6 && f[1] == id {
			n, err := strconv.Atoi(f[6])
			if err != nil {
				return sysvInfo{}, false
			}
			return sysvInfo{key: f[0], nattch: n}, true
		}
	}
	return sysvInfo{}, false
}
