// Package netns gives each node of a run its own Linux network namespace,
// so replicated servers can all bind the same ports and a partition
// between them is real: packets are dropped by the kernel, not by a
// proxy the servers' own replication bypasses.
//
// [New] makes one per-run network: a namespace per node with a veth into
// a bridge, an address from a private /24 that nothing on the host uses,
// loopback up, and /etc/netns/<ns>/hosts naming every node, so node names
// resolve inside each namespace (RabbitMQ and Kafka advertise names, not
// addresses). The host gets one address on the same /24, so the harness
// reaches every node directly; nothing is forwarded, NATed or routed
// anywhere else: the namespaces have no default route, and each drops
// what does not come from the run's /24.
//
// The bridge lives in a namespace of its own, not in the host's. Two
// reasons: the host's firewall never sees traffic between nodes (with
// br_netfilter loaded, as container engines load it, bridged frames go
// through the host's FORWARD chain, which Docker sets to DROP), and
// removing a run's namespaces removes every interface it made, which is
// what makes cleanup after a SIGKILL a few shell lines in the watchdog.
//
// Faults are iptables DROP rules inside the receiving node's namespace,
// in a chain of the run's own ([Network.Drop], [Network.Partition],
// [Network.Loss]); healing deletes exactly the rules a fault added, and
// their packet counters are its evidence ([Evidence]). The host's tables
// are never read or written.
//
// Commands run inside a node's namespace through [Network.Command], an
// argv prefix: `ip netns exec` switches namespace and execs in place
// (same pid, so the process group and the parent-death signal the caller
// set survive), and it is what binds the per-namespace hosts file.
//
// Everything a Network made is removed by [Network.Close], and, if the
// harness is killed first, by the [guard.Guard] given in [Options].
package netns

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deliverycheck/deliverycheck/process/guard"
)

// Prefix starts the name of every namespace and host interface a Network
// makes ("dcn" + 8 hex digits), so leftovers are recognisable and
// parallel runs never collide.
const Prefix = "dcn"

// etcNetns is where `ip netns exec` finds the files it binds over /etc.
const etcNetns = "/etc/netns"

// faultChain is the iptables chain, in every node's namespace, that
// holds the faults' rules; INPUT jumps to it first.
const faultChain = "DC-FAULTS"

// closeTimeout bounds Close, which cannot take the caller's context: a
// Ctrl-C cancels that context, and cleanup must still run.
const closeTimeout = 30 * time.Second

// Options say what network New makes.
type Options struct {
	// Nodes are the nodes' names, also their host names inside every
	// namespace: letters, digits and '-', as a DNS label.
	Nodes []string
	// Subnet, when valid, is the IPv4 prefix to use (the host takes its
	// first address, the nodes the next ones). New still refuses it if
	// the host or another run uses it. Zero: a free /24 is picked from
	// 10.160.0.0/11.
	Subnet netip.Prefix
	// Guard, when not nil, removes the namespaces and the host's link if
	// the harness dies before Close.
	Guard *guard.Guard
	// Logger gets a line per network made and removed; nil: none.
	Logger *slog.Logger
}

// Network is one run's namespaces, bridge and addresses. Its methods are
// safe for concurrent use.
type Network struct {
	id       string // the bridge's namespace, and the prefix of every name
	subnet   netip.Prefix
	host     netip.Addr
	nodes    []string
	index    map[string]int
	ip, ipt  string // paths of ip and iptables
	restore  string // path of iptables-restore
	guard    *guard.Guard
	log      *slog.Logger
	claim    net.Listener // holds the subnet against parallel runs
	madeEtc  []string     // /etc/netns/<ns> dirs made
	closeErr error
	// attached: the namespaces are others' (see attach.go), with the
	// nodes' addresses in addrs.
	attached bool
	addrs    map[string]netip.Addr

	mu        sync.Mutex
	closed    bool
	nextFault int
	open      map[*Fault]struct{}
}

var nodeName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)

// New makes the network: it refuses bad options, then, with an
// *UnsupportedError, a machine that cannot (see [Check]); on any other
// failure it removes what it had made. The caller must Close it.
func New(ctx context.Context, o Options) (*Network, error) {
	start := time.Now()
	if len(o.Nodes) == 0 {
		return nil, errors.New("netns: no nodes")
	}
	n := &Network{
		nodes: append([]string(nil), o.Nodes...),
		index: make(map[string]int, len(o.Nodes)),
		guard: o.Guard,
		log:   o.Logger,
		open:  make(map[*Fault]struct{}),
	}
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	for i, name := range n.nodes {
		if !nodeName.MatchString(name) {
			return nil, fmt.Errorf("netns: node name %q: want letters, digits and '-' (a DNS label)", name)
		}
		if _, dup := n.index[name]; dup {
			return nil, fmt.Errorf("netns: node %q named twice", name)
		}
		n.index[name] = i
	}
	if err := Check(); err != nil {
		return nil, err
	}
	n.ip, _ = exec.LookPath("ip")
	n.ipt, _ = exec.LookPath("iptables")
	n.restore, _ = exec.LookPath("iptables-restore")
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("netns: run id: %w", err)
	}
	n.id = Prefix + hex.EncodeToString(b[:])

	var err error
	n.subnet, n.claim, err = claimSubnet(ctx, n.ip, o.Subnet, len(n.nodes))
	if err != nil {
		return nil, fmt.Errorf("netns: %w", err)
	}
	n.host = n.subnet.Addr().Next()
	if err := n.create(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("netns: create %s: %w", n.id, err), n.Close())
	}
	n.log.Info("network up", "network", n.id, "subnet", n.subnet, "host", n.host,
		"nodes", len(n.nodes), "took", time.Since(start).Round(time.Millisecond))
	return n, nil
}

// create makes everything, in as few commands as it can (ip -batch): the
// cold start of a cluster pays for each.
func (n *Network) create(ctx context.Context) error {
	// Tell the guard first: a harness killed halfway leaves nothing.
	if err := n.guard.TrackLink(n.HostLink()); err != nil {
		return err
	}
	for _, ns := range n.namespaces() {
		if err := n.guard.TrackNetns(ns); err != nil {
			return err
		}
	}
	if err := n.writeHosts(); err != nil {
		return err
	}
	bits := strconv.Itoa(n.subnet.Bits())
	var host strings.Builder
	for _, ns := range n.namespaces() {
		fmt.Fprintf(&host, "netns add %s\n", ns)
	}
	fmt.Fprintf(&host, "link add name %s type veth peer name uplink netns %s\n", n.HostLink(), n.id)
	fmt.Fprintf(&host, "addr add %s/%s dev %s\n", n.host, bits, n.HostLink())
	fmt.Fprintf(&host, "link set dev %s up\n", n.HostLink())
	if _, err := n.run(ctx, host.String(), n.ip, "-batch", "-"); err != nil {
		return err
	}
	var sw strings.Builder
	sw.WriteString("link add name br0 type bridge\nlink set dev br0 up\nlink set dev uplink master br0 up\n")
	for i := range n.nodes {
		fmt.Fprintf(&sw, "link add name port%d type veth peer name eth0 netns %s\n", i, n.Namespace(n.nodes[i]))
		fmt.Fprintf(&sw, "link set dev port%d master br0 up\n", i)
	}
	if _, err := n.run(ctx, sw.String(), n.ip, "-n", n.id, "-batch", "-"); err != nil {
		return err
	}
	// Each node's namespace: its address, and the chain faults go in,
	// after a rule that drops anything not from this run's subnet (the
	// host may forward; nothing from outside may reach a node).
	return parallel(len(n.nodes), func(i int) error {
		ns := n.Namespace(n.nodes[i])
		addr := n.Addr(n.nodes[i])
		links := fmt.Sprintf("addr add %s/%s dev eth0\nlink set dev eth0 up\nlink set dev lo up\n", addr, bits)
		if _, err := n.run(ctx, links, n.ip, "-n", ns, "-batch", "-"); err != nil {
			return err
		}
		rules := fmt.Sprintf("*filter\n:%s - [0:0]\n-A INPUT -j %s\n"+
			"-A INPUT ! -i lo ! -s %s -m comment --comment deliverycheck:fence -j DROP\nCOMMIT\n",
			faultChain, faultChain, n.subnet)
		_, err := n.run(ctx, rules, n.inNS(ns, n.restore, "--noflush")...)
		return err
	})
}

// writeHosts writes /etc/netns/<ns>/hosts for every node: localhost and
// every node's name.
func (n *Network) writeHosts() error {
	var b strings.Builder
	b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	for _, name := range n.nodes {
		fmt.Fprintf(&b, "%s\t%s\n", n.Addr(name), name)
	}
	for _, name := range n.nodes {
		dir := filepath.Join(etcNetns, n.Namespace(name))
		// Another run's Close may remove an empty /etc/netns between
		// MkdirAll's steps: try again.
		var err error
		for range 3 {
			if err = os.MkdirAll(dir, 0o755); err == nil || !errors.Is(err, os.ErrNotExist) {
				break
			}
		}
		if err != nil {
			return err
		}
		n.madeEtc = append(n.madeEtc, dir)
		if err := os.WriteFile(filepath.Join(dir, "hosts"), []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Close removes every namespace, the veths and bridge with them, the
// host's link and address, and the hosts files, then releases the
// subnet. It does not take a context: it must run after a Ctrl-C
// cancelled the run's, so it bounds itself. Stop the processes running
// in the namespaces first: a namespace lives on while a process is in
// it, which Close reports. Safe to call more than once.
func (n *Network) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return n.closeErr
	}
	n.closed = true
	n.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if n.attached {
		return n.detach(ctx)
	}
	var errs []error
	inodes := map[uint64]string{}
	var batch strings.Builder
	if _, err := net.InterfaceByName(n.HostLink()); err == nil {
		fmt.Fprintf(&batch, "link del dev %s\n", n.HostLink())
	}
	for _, ns := range n.namespaces() {
		if ino, ok := nsInode(ns); ok {
			inodes[ino] = ns
			fmt.Fprintf(&batch, "netns del %s\n", ns)
		}
	}
	if len(inodes) > 0 {
		if pids := processesIn(inodes); len(pids) > 0 {
			errs = append(errs, fmt.Errorf("processes still in the namespaces, which live on until they exit: %s", strings.Join(pids, ", ")))
		}
	}
	if batch.Len() > 0 {
		// -force: go on past a failed line, so one failure leaves no more
		// behind than it must.
		if _, err := n.run(ctx, batch.String(), n.ip, "-force", "-batch", "-"); err != nil {
			errs = append(errs, err)
		}
	}
	for _, dir := range n.madeEtc {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	_ = os.Remove(etcNetns) // only if empty: other runs' dirs stay
	if n.claim != nil {
		n.claim.Close()
	}
	// The guard is told only after the fact; its errors mean it is closed.
	_ = n.guard.UntrackLink(n.HostLink())
	for _, ns := range n.namespaces() {
		_ = n.guard.UntrackNetns(ns)
	}
	n.log.Info("network removed", "network", n.id, "errors", len(errs))
	if len(errs) > 0 {
		n.closeErr = fmt.Errorf("netns: close %s: %w", n.id, errors.Join(errs...))
	}
	return n.closeErr
}

// Name is the run's network id: the bridge's namespace, and the prefix
// of every name it made.
func (n *Network) Name() string { return n.id }

// Nodes are the nodes' names, in the order given.
func (n *Network) Nodes() []string { return append([]string(nil), n.nodes...) }

// Subnet is the run's prefix.
func (n *Network) Subnet() netip.Prefix { return n.subnet }

// HostAddr is the host's address on the bridge: what the nodes see the
// harness as.
func (n *Network) HostAddr() netip.Addr { return n.host }

// HostLink is the name of the host's veth into the bridge.
func (n *Network) HostLink() string { return n.id + "h" }

// Addr is node's address, reachable from the host and every other node;
// the zero Addr for a name that is not a node.
func (n *Network) Addr(node string) netip.Addr {
	if n.attached {
		return n.addrs[node]
	}
	i, ok := n.index[node]
	if !ok {
		return netip.Addr{}
	}
	a := n.host
	for range i + 1 {
		a = a.Next()
	}
	return a
}

// Namespace is the name of node's namespace (as `ip netns` lists it);
// "" for a name that is not a node.
func (n *Network) Namespace(node string) string {
	if _, ok := n.index[node]; !ok {
		return ""
	}
	return n.id + "-" + node
}

// namespaces are every namespace the network makes: the bridge's, then
// the nodes'.
func (n *Network) namespaces() []string {
	var out []string
	if !n.attached {
		out = append(out, n.id)
	}
	for _, name := range n.nodes {
		out = append(out, n.Namespace(name))
	}
	return out
}

// Command is argv run inside node's namespace: `ip netns exec <ns>`
// prefixed. ip switches namespace and execs argv in place, so the pid
// the caller starts is argv's own: a process group (Setpgid) and a
// parent-death signal (Pdeathsig) set on it hold for argv. It also binds
// /etc/netns/<ns>/hosts over /etc/hosts, which a setns done by the
// harness itself would not. Do not combine it with a SysProcAttr
// Credential: ip needs root; use CommandAs.
func (n *Network) Command(node string, argv ...string) ([]string, error) {
	ns := n.Namespace(node)
	if ns == "" {
		return nil, fmt.Errorf("netns: no node %q", node)
	}
	if len(argv) == 0 {
		return nil, errors.New("netns: empty command")
	}
	return n.inNS(ns, argv...), nil
}

// CommandAs is Command run as uid and gid (PostgreSQL refuses root):
// setpriv switches user after ip switched namespace, and restores the
// parent-death signal the change of user clears.
func (n *Network) CommandAs(node string, uid, gid uint32, argv ...string) ([]string, error) {
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		return nil, fmt.Errorf("netns: run as uid %d: %w", uid, err)
	}
	return n.Command(node, append([]string{setpriv,
		"--reuid=" + strconv.FormatUint(uint64(uid), 10),
		"--regid=" + strconv.FormatUint(uint64(gid), 10),
		"--clear-groups", "--pdeathsig=keep", "--"}, argv...)...)
}

func (n *Network) inNS(ns string, argv ...string) []string {
	return append([]string{n.ip, "netns", "exec", ns}, argv...)
}

// run runs argv with stdin, returning its stdout; the error names the
// command and has its stderr.
func (n *Network) run(ctx context.Context, stdin string, argv ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		what := filepath.Base(argv[0]) + " " + strings.Join(argv[1:], " ")
		if stdin != "" {
			what += " <<" + strconv.Quote(stdin)
		}
		return out, fmt.Errorf("%s: %w: %s", what, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// parallel runs f(0) to f(n-1) concurrently and joins their errors.
func parallel(n int, f func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = f(i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
