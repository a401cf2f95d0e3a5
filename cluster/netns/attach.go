package netns

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os/exec"
	"strconv"
	"time"

	"github.com/deliverycheck/deliverycheck/process/guard"
)

// Attached networks: the namespaces of someone else's processes, such as
// the containers of a run on the containers runtime, adopted so that the
// same faults (and the same rule, evidence and heal code) work there.
//
// [Attach] names each node's existing namespace the way Pumba enters a
// container's from the host: `ip netns attach <name> <pid>` bind-mounts
// /proc/<pid>/ns/net at /run/netns/<name>, after which every command of
// this package (`ip netns exec`, iptables-restore inside it) runs there
// as it does in a namespace New made. The namespace belongs to its
// process, not to the Network: Close only removes the names (the
// namespace lives on until its last process exits) and the fault chain's
// rules go with it. Nothing else is made: no bridge, veth, address,
// hosts file or fence rule; the nodes' network is whoever made it.

// AttachedNode is one node of an attached network.
type AttachedNode struct {
	// Name is the node's name, as faults name it (a DNS label).
	Name string
	// PID is a process in the node's network namespace; the namespace
	// must outlive every fault (a container that holds it, not the
	// server that may be killed).
	PID int
	// Addr is the node's address in the network the nodes share.
	Addr netip.Addr
}

// AttachOptions say which namespaces Attach adopts.
type AttachOptions struct {
	Nodes []AttachedNode
	// Subnet is the prefix the nodes' addresses are in, and Host the
	// host's address on it (what the nodes see the harness as).
	Subnet netip.Prefix
	Host   netip.Addr
	// Guard, when not nil, removes the names if the harness dies.
	Guard *guard.Guard
	// Logger gets a line per network attached and detached; nil: none.
	Logger *slog.Logger
}

// Attach adopts existing namespaces as a Network (see above): it refuses
// bad options, then, with an *UnsupportedError, a machine that cannot
// (see [Check]); on any other failure it removes the names it had made.
// The caller must Close it.
func Attach(ctx context.Context, o AttachOptions) (*Network, error) {
	start := time.Now()
	if len(o.Nodes) == 0 {
		return nil, errors.New("netns: attach: no nodes")
	}
	n := &Network{
		attached: true,
		subnet:   o.Subnet,
		host:     o.Host,
		index:    make(map[string]int, len(o.Nodes)),
		addrs:    make(map[string]netip.Addr, len(o.Nodes)),
		guard:    o.Guard,
		log:      o.Logger,
		open:     make(map[*Fault]struct{}),
	}
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	for i, node := range o.Nodes {
		_, dup := n.index[node.Name]
		switch {
		case !nodeName.MatchString(node.Name):
			return nil, fmt.Errorf("netns: attach: node name %q: want letters, digits and '-' (a DNS label)", node.Name)
		case dup:
			return nil, fmt.Errorf("netns: attach: node %q named twice", node.Name)
		case node.PID <= 0:
			return nil, fmt.Errorf("netns: attach: node %s: no pid", node.Name)
		case !node.Addr.IsValid():
			return nil, fmt.Errorf("netns: attach: node %s: no address", node.Name)
		}
		n.index[node.Name] = i
		n.addrs[node.Name] = node.Addr
		n.nodes = append(n.nodes, node.Name)
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
	err := parallel(len(o.Nodes), func(i int) error {
		ns := n.Namespace(o.Nodes[i].Name)
		if err := n.guard.TrackNetns(ns); err != nil {
			return err
		}
		if _, err := n.run(ctx, "", n.ip, "netns", "attach", ns, strconv.Itoa(o.Nodes[i].PID)); err != nil {
			return err
		}
		// The chain faults go in, jumped to first from INPUT.
		rules := fmt.Sprintf("*filter\n:%s - [0:0]\n-I INPUT 1 -j %s\nCOMMIT\n", faultChain, faultChain)
		_, err := n.run(ctx, rules, n.inNS(ns, n.restore, "--noflush")...)
		return err
	})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("netns: attach %s: %w", n.id, err), n.Close())
	}
	n.log.Info("network attached", "network", n.id, "subnet", n.subnet, "nodes", len(n.nodes),
		"took", time.Since(start).Round(time.Millisecond))
	return n, nil
}

// Attached reports whether the network adopted namespaces it did not
// make ([Attach]).
func (n *Network) Attached() bool { return n.attached }

// detach is Close of an attached network: the fault chain emptied (a
// namespace that lives on keeps no rule of the run) and the names
// removed; the namespaces stay their owners'.
func (n *Network) detach(ctx context.Context) error {
	var errs []error
	for _, ns := range n.namespaces() {
		if _, ok := nsInode(ns); !ok {
			_ = n.guard.UntrackNetns(ns)
			continue
		}
		// The owner may be gone already (its namespace with it): only
		// the name's removal counts.
		_, _ = n.run(ctx, "", n.inNS(ns, n.ipt, "-w", "-F", faultChain)...)
		if _, err := n.run(ctx, "", n.ip, "netns", "delete", ns); err != nil {
			errs = append(errs, err)
		}
		_ = n.guard.UntrackNetns(ns)
	}
	n.log.Info("network detached", "network", n.id, "errors", len(errs))
	if len(errs) > 0 {
		n.closeErr = fmt.Errorf("netns: close %s: %w", n.id, errors.Join(errs...))
	}
	return n.closeErr
}
