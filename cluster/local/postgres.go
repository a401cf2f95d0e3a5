package local

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"

	"github.com/deliverycheck/deliverycheck/cluster/freeport"
	"github.com/deliverycheck/deliverycheck/cluster/probe"
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

	mu      sync.Mutex
	version string
	inited  bool
}

// NewPostgres prepares a server on a free port in a fresh temp dir. Nothing
// runs until Start. The caller should call Close when finished.
func NewPostgres(o PostgresOptions) (*Postgres, error) {
	bin, err := PostgresBinDir(o.BinDir)
	if err != nil {
		return nil, err
	}
	ports, err := freeport.Take(1)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	b, err := newBase("postgres", o.Options)
	if err != nil {
		return nil, err
	}
	p := &Postgres{base: b, bin: bin, port: ports[0], data: filepath.Join(b.dir, "data"), logPath: filepath.Join(b.dir, "postgres.log")}
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
			return nil, fmt.Errorf("postgres: %w", err)
		}
		p.cred = cred
		if err := os.Chown(b.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			b.closeBase(nil)
			return nil, fmt.Errorf("postgres: %w", err)
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
func (p *Postgres) Endpoint() string { return fmt.Sprintf("127.0.0.1:%d", p.port) }

// Logs implements cluster.Service.
func (p *Postgres) Logs() string { return p.logPath }

// Version implements cluster.Service, e.g. "PostgreSQL 15.18 (Debian 15.18-0+deb12u1)".
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
	cmd := exec.CommandContext(ctx, filepath.Join(p.bin, "initdb"),
		"-D", p.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C", "LC_ALL=C"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: p.cred}
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
	if err := p.initdb(ctx); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	proc, err := p.launch(procSpec{
		path: filepath.Join(p.bin, "postgres"),
		args: []string{"-D", p.data, "-p", strconv.Itoa(p.port),
			"-c", "listen_addresses=127.0.0.1",
			"-c", "unix_socket_directories=" + p.dir,
			"-c", "fsync=on",
			"-c", "synchronous_commit=on",
			"-c", "wal_level=logical",
			"-c", "max_wal_senders=10",
			"-c", "max_replication_slots=10",
			"-c", "max_connections=200",
			"-c", "shared_buffers=128MB",
			"-c", "logging_collector=off",
		},
		log:  p.logPath,
		cred: p.cred,
	})
	if err != nil {
		return fmt.Errorf("start postgres: %w", err)
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
		return fmt.Errorf("start postgres: %w", err)
	}
	p.log.Info("ready", "endpoint", p.Endpoint(), "version", p.Version())
	return nil
}

// Stop implements cluster.Service with PostgreSQL's fast shutdown (SIGINT):
// clients are disconnected, and everything committed is flushed.
func (p *Postgres) Stop(ctx context.Context) error { return p.stopWith(ctx, syscall.SIGINT) }

// Restart implements cluster.Service.
func (p *Postgres) Restart(ctx context.Context) error {
	if err := p.Stop(ctx); err != nil {
		return err
	}
	return p.Start(ctx)
}

// Close implements cluster.Service.
func (p *Postgres) Close() error { return p.closeBase(nil) }
