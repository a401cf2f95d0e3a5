package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/deliverycheck/deliverycheck/cluster/freeport"
	"github.com/deliverycheck/deliverycheck/cluster/probe"
	"github.com/deliverycheck/deliverycheck/internal/logtail"
	"github.com/deliverycheck/deliverycheck/process"
)

// RabbitMQ credentials every local node is configured with. They are
// fixed rather than the default guest/guest because guest may only log in
// over loopback, and a client of a run reaches the node through a proxy
// link, which a later runtime may not keep on loopback.
const (
	RabbitMQUser     = "deliverycheck"
	RabbitMQPassword = "deliverycheck"
)

// rabbitMQConfig is the node's rabbitmq.conf. It is deliberately small:
// every default left alone is one less thing a crash test depends on.
// Logs go to stdout (RABBITMQ_LOGS=-), so the one file LogFile names holds
// the start script's output, the node's log and any crash dump notice.
const rabbitMQConfig = `default_user = ` + RabbitMQUser + `
default_pass = ` + RabbitMQPassword + `
default_vhost = /
loopback_users = none
`

// RabbitMQ is a single RabbitMQ node run from the installed
// rabbitmq-server, with its own node name, AMQP, distribution and epmd
// ports, data dir and Erlang cookie, so it never meets another node on the
// machine (in particular not a system-wide one).
//
// The node runs two process groups: the server (the start script, the
// Erlang VM and its port helpers) and a private epmd on its own port.
// epmd is started first and in the foreground: if the VM found no epmd it
// would start one with -daemon, which setsid()s out of every process group
// and outlives the run. Kill, Pause and Resume act on the server group
// only; epmd stays up across restarts, like a host's epmd would.
type RabbitMQ struct {
	*rabbitServer
}

// rabbitServer is one RabbitMQ node and its epmd: what a single node
// ([RabbitMQ]) and a node of a cluster ([RabbitMQNode]) share. They differ
// only in names, addresses, configuration and in how a program is run
// (directly, or inside the node's network namespace).
type rabbitServer struct {
	*base

	node     string // Erlang node name, e.g. dc-1a2b3c4d@localhost
	host     string // the address AMQP, distribution and epmd listen on
	amqpPort int
	distPort int
	epmdPort int
	server   string              // path of rabbitmq-server
	epmdBin  string              // path of epmd
	cred     *syscall.Credential // nil: run as the harness's own user
	// wrap, when set, is the argv prefix that runs a program where the
	// node lives (its network namespace, as cred's user); the process is
	// then started as the harness's user, since the prefix switches.
	wrap     func(argv ...string) ([]string, error)
	cookie   string // the Erlang cookie; a cluster's nodes share one
	config   string // rabbitmq.conf
	advanced string // advanced.config, "" for none
	nodeDir  string // owned by the node's user
	logPath  string
	// scriptsDir, when set, is a slim RABBITMQ_HOME's bin dir (see
	// slimRabbitMQHome); empty means the install as it is.
	scriptsDir string
	// probe is the readiness check, given the node's direct AMQP URL; it
	// returns the version the node announces.
	probe func(ctx context.Context, url string) (string, error)

	mu      sync.Mutex
	epmd    *process.Group
	version string
}

// NewRabbitMQ prepares a node without starting it: it makes the temp dir,
// the config and the cookie, and picks the ports, so [RabbitMQ.Endpoint]
// is valid before Start (a proxy link is put in front of it first). The
// caller should call Close when finished.
//
// When the harness runs as root the node runs as the rabbitmq user (as
// Debian's own wrapper would), otherwise as the harness's user.
func NewRabbitMQ(o Options) (*RabbitMQ, error) {
	server, epmdBin, err := rabbitMQBinaries()
	if err != nil {
		return nil, err
	}
	b, err := newBase("rabbitmq", o)
	if err != nil {
		return nil, err
	}
	r, err := newRabbitMQ(b, server, epmdBin)
	if err != nil {
		_ = b.closeBase(nil)
		return nil, err
	}
	return r, nil
}

func newRabbitMQ(b *base, server, epmdBin string) (*RabbitMQ, error) {
	ports, err := freeport.Take(3)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: %w", err)
	}
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	r := &rabbitServer{
		base:     b,
		node:     "dc-" + hex.EncodeToString(id) + "@localhost",
		host:     "127.0.0.1",
		amqpPort: ports[0],
		distPort: ports[1],
		epmdPort: ports[2],
		server:   server,
		epmdBin:  epmdBin,
		cookie:   newCookie(),
		config:   rabbitMQConfig,
		probe:    probe.RabbitMQ,
	}
	if err := r.prepare(); err != nil {
		return nil, err
	}
	return &RabbitMQ{r}, nil
}

// newCookie is a random Erlang cookie.
func newCookie() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// rabbitMQUser is the uid and gid a node runs as: the rabbitmq user when
// the harness is root and that user exists (as Debian's own wrapper
// would: the node could run as root, but its files would then be root's,
// and Debian's tools expect the rabbitmq user), otherwise -1, -1: the
// harness's own user.
func rabbitMQUser() (uid, gid int) {
	if os.Geteuid() != 0 {
		return -1, -1
	}
	u, err := user.Lookup("rabbitmq")
	if err != nil {
		return -1, -1
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return uid, gid
}

// prepare fills in the paths, makes the node's dirs and files, and the
// slim home, once names, addresses and configuration are set.
func (r *rabbitServer) prepare() error {
	r.nodeDir = filepath.Join(r.dir, "node")
	r.logPath = filepath.Join(r.dir, "rabbitmq.log")
	uid, gid := rabbitMQUser()
	if uid >= 0 {
		r.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}
	}
	if err := r.prepareDirs(uid, gid); err != nil {
		return fmt.Errorf("%s: %w", r.name, err)
	}
	scripts, err := slimRabbitMQHome(filepath.Join(r.dir, "rabbitmq-home"), r.server)
	if err != nil {
		// Only a start-up optimisation: the full install works too.
		r.log.Debug("using the full rabbitmq install", "reason", err)
	}
	r.scriptsDir = scripts
	return nil
}

// slimRabbitMQHome builds, under dir, a RABBITMQ_HOME whose plugins dir
// holds links to only the Erlang applications the core broker depends on
// (rabbit and the closure of its .app dependencies), and returns its
// scripts dir for RABBITMQ_SCRIPTS_DIR.
//
// Why: with no plugin enabled, the node still loads every application it
// finds in the plugins dir and scans all their modules for feature flags
// and boot steps. Debian ships 70 applications (1052 modules) there; the
// core needs 20 (439). Leaving the rest out takes about 1.6 s off every
// start on a 2-core machine, and changes nothing the node does: those
// applications are plugins that are not enabled anyway.
//
// Anything unexpected (plugins packed as .ez archives, a missing .app)
// returns an error and the caller uses the install as it is.
func slimRabbitMQHome(dir, server string) (string, error) {
	real, err := filepath.EvalSymlinks(server)
	if err != nil {
		return "", fmt.Errorf("slim home: %w", err)
	}
	scripts := filepath.Dir(real)
	plugins := filepath.Join(filepath.Dir(scripts), "plugins")
	ents, err := os.ReadDir(plugins)
	if err != nil {
		return "", fmt.Errorf("slim home: %w", err)
	}
	apps := map[string]string{} // application name -> its dir
	for _, e := range ents {
		n := e.Name()
		if strings.HasSuffix(n, ".ez") {
			return "", fmt.Errorf("slim home: %s is an archive", n)
		}
		if !e.IsDir() {
			continue
		}
		name, _, _ := strings.Cut(n, "-")
		if prev, ok := apps[name]; !ok || n > filepath.Base(prev) {
			apps[name] = filepath.Join(plugins, n)
		}
	}
	need := map[string]bool{}
	todo := []string{"rabbit"}
	for len(todo) > 0 {
		a := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if need[a] {
			continue
		}
		d, ok := apps[a]
		if !ok {
			if a == "rabbit" {
				return "", fmt.Errorf("slim home: no rabbit application in %s", plugins)
			}
			continue // an OTP application, found in Erlang's own lib dir
		}
		need[a] = true
		deps, err := appDependencies(filepath.Join(d, "ebin", a+".app"))
		if err != nil {
			return "", fmt.Errorf("slim home: %w", err)
		}
		todo = append(todo, deps...)
	}
	bin := filepath.Join(dir, "sbin")
	lib := filepath.Join(dir, "plugins")
	for _, d := range []string{bin, lib} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", fmt.Errorf("slim home: %w", err)
		}
	}
	// rabbitmq-env sources rabbitmq-defaults from RABBITMQ_SCRIPTS_DIR and
	// sets RABBITMQ_HOME to its parent, whose plugins dir becomes ERL_LIBS.
	if err := os.Symlink(filepath.Join(scripts, "rabbitmq-defaults"), filepath.Join(bin, "rabbitmq-defaults")); err != nil {
		return "", fmt.Errorf("slim home: %w", err)
	}
	for a := range need {
		if err := os.Symlink(apps[a], filepath.Join(lib, filepath.Base(apps[a]))); err != nil {
			return "", fmt.Errorf("slim home: %w", err)
		}
	}
	return bin, nil
}

// appDependencies reads the applications list of an Erlang .app file.
func appDependencies(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.Index(s, "{applications")
	if i < 0 {
		return nil, nil
	}
	s = s[i:]
	open, end := strings.IndexByte(s, '['), strings.IndexByte(s, ']')
	if open < 0 || end < open {
		return nil, fmt.Errorf("%s: cannot read applications list", path)
	}
	var out []string
	for _, f := range strings.Split(s[open+1:end], ",") {
		if f = strings.Trim(strings.TrimSpace(f), "'"); f != "" {
			out = append(out, f)
		}
	}
	return out, nil
}

// rabbitMQBinaries finds rabbitmq-server and epmd. RABBITMQ_HOME points at
// a generic-unix install (sbin/rabbitmq-server); otherwise Debian's layout
// is used. The Debian /usr/sbin/rabbitmq-server is not: it su's to the
// rabbitmq user, which loses our environment.
func rabbitMQBinaries() (server, epmdBin string, err error) {
	server = "/usr/lib/rabbitmq/bin/rabbitmq-server"
	if h := os.Getenv("RABBITMQ_HOME"); h != "" {
		server = filepath.Join(h, "sbin", "rabbitmq-server")
	}
	if _, err := os.Stat(server); err != nil {
		return "", "", fmt.Errorf("rabbitmq: rabbitmq-server not found (install the rabbitmq-server package or set RABBITMQ_HOME): %w", err)
	}
	epmdBin, err = exec.LookPath("epmd")
	if err != nil {
		epmdBin = "/usr/lib/erlang/bin/epmd"
		if _, serr := os.Stat(epmdBin); serr != nil {
			return "", "", fmt.Errorf("rabbitmq: epmd not found (install erlang-base): %w", err)
		}
	}
	return server, epmdBin, nil
}

// prepareDirs makes the node's dirs, config and cookie, owned by the user
// the node runs as (uid -1: leave ownership alone).
func (r *rabbitServer) prepareDirs(uid, gid int) error {
	dirs := []string{r.nodeDir, r.mnesiaBase(), r.logBase(), r.home()}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return fmt.Errorf("make %s: %w", d, err)
		}
	}
	type file struct {
		path string
		data string
		mode os.FileMode
	}
	files := []file{
		{filepath.Join(r.home(), ".erlang.cookie"), r.cookie, 0o400},
		{r.configFile(), r.config, 0o640},
		{r.pluginsFile(), "[].\n", 0o640},
		{r.envFile(), "", 0o640},
	}
	if r.advanced != "" {
		files = append(files, file{r.advancedFile(), r.advanced, 0o640})
	}
	for _, f := range files {
		if err := os.WriteFile(f.path, []byte(f.data), f.mode); err != nil {
			return fmt.Errorf("write %s: %w", f.path, err)
		}
	}
	if uid < 0 {
		return nil
	}
	return filepath.WalkDir(r.nodeDir, func(path string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(path, uid, gid); err != nil {
			return fmt.Errorf("chown %s: %w", path, err)
		}
		return nil
	})
}

func (r *rabbitServer) mnesiaBase() string  { return filepath.Join(r.nodeDir, "mnesia") }
func (r *rabbitServer) logBase() string     { return filepath.Join(r.nodeDir, "log") }
func (r *rabbitServer) home() string        { return filepath.Join(r.nodeDir, "home") }
func (r *rabbitServer) configFile() string  { return filepath.Join(r.nodeDir, "rabbitmq.conf") }
func (r *rabbitServer) pluginsFile() string { return filepath.Join(r.nodeDir, "enabled_plugins") }
func (r *rabbitServer) envFile() string     { return filepath.Join(r.nodeDir, "rabbitmq-env.conf") }
func (r *rabbitServer) advancedFile() string {
	return filepath.Join(r.nodeDir, "advanced.config")
}

// Endpoint implements cluster.Service: the node's AMQP address.
func (r *rabbitServer) Endpoint() string {
	return net.JoinHostPort(r.host, strconv.Itoa(r.amqpPort))
}

// URL returns the amqp URL for reaching this node at addr (host:port),
// with the node's credentials and the default vhost "/", e.g.
// amqp://deliverycheck:deliverycheck@127.0.0.1:5672. Pass a proxy link's
// address to go through the link, or Endpoint to go direct. The URL has
// no path on purpose: by the AMQP URI spec a trailing "/" names the empty
// vhost "", which some clients honour.
func (r *rabbitServer) URL(addr string) string { return amqpURL(addr) }

// amqpURL is the AMQP URL of the harness's user at addr.
func amqpURL(addr string) string {
	u := url.URL{Scheme: "amqp", User: url.UserPassword(RabbitMQUser, RabbitMQPassword), Host: addr}
	return u.String()
}

// NodeName is the node's Erlang name (unique per instance; kept across
// restarts because a quorum queue's data belongs to its node name).
func (r *rabbitServer) NodeName() string { return r.node }

// LogFile implements cluster.LogFiler.
func (r *rabbitServer) LogFile() string { return r.logPath }

// Version implements cluster.Versioner, e.g. "RabbitMQ 3.10.8": the version
// the node itself announces to an AMQP client.
func (r *rabbitServer) Version() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.version
}

// env is the node's environment. Every path and port the start script
// would otherwise take from /etc/rabbitmq or a default is set here, so
// nothing is shared with a system-wide node.
func (r *rabbitServer) env() []string {
	env := []string{
		"HOME=" + r.home(),
		"RABBITMQ_NODENAME=" + r.node,
		"RABBITMQ_USE_LONGNAME=false",
		"RABBITMQ_NODE_IP_ADDRESS=" + r.host,
		"RABBITMQ_NODE_PORT=" + strconv.Itoa(r.amqpPort),
		"RABBITMQ_DIST_PORT=" + strconv.Itoa(r.distPort),
		"ERL_EPMD_PORT=" + strconv.Itoa(r.epmdPort),
		"ERL_EPMD_ADDRESS=" + r.host,
		"RABBITMQ_MNESIA_BASE=" + r.mnesiaBase(),
		"RABBITMQ_LOG_BASE=" + r.logBase(),
		"RABBITMQ_LOGS=-",
		"RABBITMQ_CONFIG_FILE=" + r.configFile(),
		"RABBITMQ_ADVANCED_CONFIG_FILE=" + r.advancedFile(),
		"RABBITMQ_CONF_ENV_FILE=" + r.envFile(),
		"RABBITMQ_ENABLED_PLUGINS_FILE=" + r.pluginsFile(),
		"RABBITMQ_PID_FILE=" + filepath.Join(r.nodeDir, "rabbitmq.pid"),
		// Distribution listens on the node's address only, like AMQP.
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {" + strings.ReplaceAll(r.host, ".", ",") + "}",
	}
	if r.scriptsDir != "" {
		env = append(env, "RABBITMQ_SCRIPTS_DIR="+r.scriptsDir)
	}
	return env
}

// Start implements cluster.Service. It starts epmd if it is not running,
// then the node, and returns once a client can connect and declare a
// quorum queue (quorum queues need the node's Ra system, which comes up
// late in boot, so a bare connection is not proof enough).
func (r *rabbitServer) Start(ctx context.Context) error {
	if err := r.startEPMD(ctx); err != nil {
		return fmt.Errorf("start %s: %w", r.name, err)
	}
	spec, err := r.spec(r.logPath, r.server)
	if err != nil {
		return fmt.Errorf("start %s: %w", r.name, err)
	}
	spec.Env = r.env()
	p, err := r.launch(spec)
	if err != nil {
		return fmt.Errorf("start %s: %w", r.name, err)
	}
	start := time.Now()
	if err := r.waitReady(ctx, p, r.logPath, r.ready); err != nil {
		return fmt.Errorf("start %s: %w", r.name, err)
	}
	r.log.Info("ready", "node", r.node, "endpoint", r.Endpoint(), "version", r.Version(), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// startEPMD starts the node's private epmd unless it runs already, and
// waits until it accepts connections: the node must find it at boot or it
// would daemonize its own.
func (r *rabbitServer) startEPMD(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.epmd != nil && !r.epmd.Exited() {
		return nil
	}
	r.base.mu.Lock()
	closed := r.base.closed
	r.base.mu.Unlock()
	if closed {
		return fmt.Errorf("%s: closed", r.name)
	}
	// epmd listens on loopback too, whatever -address says: the VM
	// registers there.
	spec, err := r.spec(filepath.Join(r.dir, "epmd.log"), r.epmdBin, "-port", strconv.Itoa(r.epmdPort), "-address", r.host)
	if err != nil {
		return fmt.Errorf("epmd: %w", err)
	}
	p, err := process.Start(spec, r.g)
	if err != nil {
		return fmt.Errorf("epmd: %w", err)
	}
	r.epmd = p
	addr := net.JoinHostPort(r.host, strconv.Itoa(r.epmdPort))
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-p.Done():
			return fmt.Errorf("epmd exited (%v)\n%s", p.Err(), logtail.File(filepath.Join(r.dir, "epmd.log"), 10))
		case <-ctx.Done():
			return fmt.Errorf("epmd not listening on %s: %w", addr, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// spec is how to start argv as the node's user, where the node lives,
// logging to log.
func (r *rabbitServer) spec(log string, argv ...string) (process.Spec, error) {
	s := process.Spec{Dir: r.home(), Log: log, Cred: r.cred}
	if r.wrap != nil {
		var err error
		if argv, err = r.wrap(argv...); err != nil {
			return process.Spec{}, err
		}
		s.Cred = nil
	}
	s.Path, s.Args = argv[0], argv[1:]
	return s, nil
}

// ready is the readiness check: r.probe over a direct connection, e.g.
// connect and declare a quorum queue.
func (r *rabbitServer) ready(ctx context.Context) error {
	v, err := r.probe(ctx, r.URL(r.Endpoint()))
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.version = v
	r.mu.Unlock()
	return nil
}

// WaitQuorumQueueDurable waits until the node has saved the Raft
// registration of quorum queue name in vhost, so that the queue comes back
// after a kill -9. Call it after declaring the queues of a run and before
// crashing the node.
//
// Why: RabbitMQ fsyncs a quorum queue's messages before confirming them,
// but the queue's Raft member is registered in a table (Ra's names.dets)
// that is only saved every 500 ms. Seen with 3.10.8: a queue declared, fed
// a confirmed message and then killed within that window does not recover
// ("leader not known", every operation times out), and its confirmed
// messages are unreachable. That is worth a scenario of its own; a setup
// that merely forgot to wait should not look like one.
func (r *rabbitServer) WaitQuorumQueueDurable(ctx context.Context, vhost, name string) error {
	// rabbit_quorum_queue names the Raft cluster after the vhost and the
	// queue; dets stores the atom's bytes as they are.
	ra := vhost + "_" + name
	if vhost == "/" {
		ra = "%2F_" + name
	}
	path := filepath.Join(r.mnesiaBase(), r.node, "quorum", r.node, "names.dets")
	for {
		b, err := os.ReadFile(path)
		if err == nil && strings.Contains(string(b), ra) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rabbitmq: quorum queue %s not saved in %s: %w", ra, path, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop implements cluster.Service. SIGTERM goes to the start script, which
// forwards it to the VM; RabbitMQ treats it as a clean shutdown (queues
// closed, Ra logs flushed) and the script exits once the VM has.
func (r *rabbitServer) Stop(ctx context.Context) error {
	return r.stopWith(ctx, syscall.SIGTERM)
}

// Restart implements cluster.Restarter: same node name, ports and data.
func (r *rabbitServer) Restart(ctx context.Context) error {
	if err := r.Stop(ctx); err != nil {
		return fmt.Errorf("restart %s: %w", r.name, err)
	}
	return r.Start(ctx)
}

// PIDs implements cluster.PIDer: the server group, the guard and epmd.
func (r *rabbitServer) PIDs() []int {
	out := r.base.PIDs()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.epmd != nil {
		out = append(out, r.epmd.PIDs()...)
	}
	return out
}

// Close implements cluster.Service. epmd goes after the node, so the node
// never sees it vanish and starts a daemonized one.
func (r *rabbitServer) Close() error {
	return r.closeBase(func() error {
		r.mu.Lock()
		p := r.epmd
		r.mu.Unlock()
		if p == nil {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Kill(ctx); err != nil {
			return fmt.Errorf("epmd: %w", err)
		}
		return nil
	})
}
