package nemesis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/cluster/netns"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/internal/backoff"
)

// LeaderSuffix ends a target that names whichever node of a replicated
// service leads when the fault starts: "kafka:leader" (the leader of the
// run's first events partition), "broker:leader".
const LeaderSuffix = ":leader"

// nodeOf splits a node target, "kafka-1", "broker-2" or "kafka:leader",
// into its service ("broker" as written) and node index (-1 for the
// leader). ok is false for anything else.
func nodeOf(target string) (service string, index int, ok bool) {
	if svc, found := strings.CutSuffix(target, LeaderSuffix); found {
		return svc, -1, isServiceName(svc)
	}
	i := strings.LastIndexByte(target, '-')
	if i <= 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(target[i+1:])
	if err != nil || n < 0 || strconv.Itoa(n) != target[i+1:] {
		return "", 0, false
	}
	return target[:i], n, isServiceName(target[:i])
}

func isServiceName(s string) bool { return s == "broker" || slices.Contains(cluster.Names(), s) }

// resolveNode is the node a target names when the fault starts: a node
// by its name, the leader looked up through Env.Leader.
func (e *Env) resolveNode(ctx context.Context, target string) (string, error) {
	svc, i, ok := nodeOf(target)
	if !ok {
		return target, nil
	}
	if svc == "broker" && e.Broker != "" {
		svc = e.Broker
	}
	if i >= 0 {
		return cluster.NodeName(svc, i), nil
	}
	if e.Leader == nil {
		return "", fmt.Errorf("%s: no way to look up the leader of %s", target, svc)
	}
	// A leader is looked up while earlier faults may still be healing
	// (a node restarting closes connections, a partition elects): the
	// lookup is tried again for a while before the fault is given up.
	lctx, cancel := context.WithTimeout(ctx, leaderLookupTimeout)
	defer cancel()
	for {
		node, err := e.Leader(lctx, svc)
		if err == nil {
			return node, nil
		}
		if backoff.Sleep(lctx, 200*time.Millisecond) != nil {
			return "", fmt.Errorf("%s: look up the leader: %w", target, err)
		}
	}
}

// leaderLookupTimeout bounds the retries of a leader lookup at a fault's
// start.
const leaderLookupTimeout = 10 * time.Second

// network is the network the nodes live in.
func (e *Env) nodeNetwork() *netns.Network {
	if e.Network != nil {
		return e.Network
	}
	if e.Cluster != nil {
		return e.Cluster.Network()
	}
	return nil
}

// serviceNodes are the nodes of service (as the network names them).
func (e *Env) serviceNodes(service string) []string {
	var out []string
	if n := e.nodeNetwork(); n != nil {
		for _, node := range n.Nodes() {
			if svc, _, ok := nodeOf(node); ok && svc == service {
				out = append(out, node)
			}
		}
	}
	return out
}

// nodeFault cuts nodes off from each other in their namespaces: isolate
// one node from the others of its service, cut it off from their
// replication alone, or split a service's nodes by a shape. Heal removes exactly its rules; the evidence is the packets
// they dropped, and a window in which no packet was dropped never bit.
func (e *Env) nodeFault(ctx context.Context, f Fault) (effect, error) {
	net := e.nodeNetwork()
	if net == nil {
		return effect{}, errors.New("no replicated service: nodes faults need a service with several nodes (broker.nodes)")
	}
	var (
		nf   *netns.Fault
		what string
		err  error
	)
	switch f.Kind {
	case Isolate, CutReplication:
		node, rerr := e.resolveNode(ctx, e.recordedTarget(f))
		if rerr != nil {
			return effect{}, rerr
		}
		svc, _, ok := nodeOf(node)
		all := e.serviceNodes(svc)
		if !ok || !slices.Contains(all, node) {
			return effect{}, fmt.Errorf("no node %s (have %s)", node, strings.Join(net.Nodes(), ", "))
		}
		peers := slices.DeleteFunc(slices.Clone(all), func(n string) bool { return n == node })
		if f.Kind == Isolate {
			nf, err = net.Partition(ctx, []string{node}, peers)
			what = node + " isolated from " + strings.Join(peers, ", ")
			break
		}
		port, perr := e.replicationPort(svc)
		if perr != nil {
			return effect{}, perr
		}
		nf, err = net.PartitionPort(ctx, port, []string{node}, peers)
		what = fmt.Sprintf("%s's replication (tcp/%d) cut from %s", node, port, strings.Join(peers, ", "))
	case Split:
		svc := e.recordedTarget(f)
		nodes := e.serviceNodes(svc)
		if len(nodes) < 3 {
			return effect{}, fmt.Errorf("split %s: %d nodes (a split needs 3 or more)", svc, len(nodes))
		}
		nf, what, err = split(ctx, net, nodes, f.Shape)
	}
	if err != nil {
		return effect{}, err
	}
	var seen netns.Evidence
	return effect{
		undo: func(ctx context.Context) error {
			ev, err := nf.Heal(ctx)
			seen = ev
			return err
		},
		bit: func() (string, error) {
			if seen.Packets() == 0 {
				return "", fmt.Errorf("%s, but no packet was dropped during the window", what)
			}
			return what + ": " + seen.String(), nil
		},
	}, nil
}

// replicationPort is the port service's nodes replicate over
// (cluster.ReplicationPorter).
func (e *Env) replicationPort(service string) (int, error) {
	if e.ReplicationPort > 0 {
		return e.ReplicationPort, nil
	}
	if e.Cluster == nil {
		return 0, fmt.Errorf("no cluster to ask %s's replication port", service)
	}
	rp, err := e.Cluster.ReplicationPorter(service)
	if err != nil {
		return 0, err
	}
	return rp.ReplicationPort(), nil
}

// ableToCutReplication says why f, a cut-replication, cannot run on this
// cluster, before the run starts: its service has no listener of its
// own for replication (RabbitMQ, a single Kafka).
func (e *Env) ableToCutReplication(f Fault) error {
	svc, _, ok := nodeOf(e.recordedTarget(f))
	if !ok || e.Cluster == nil || e.service(svc) == nil {
		return nil // no such node: the fault says so when it starts
	}
	_, err := e.Cluster.ReplicationPorter(svc)
	return err
}

// split cuts nodes by shape (see the Shape constants) as one fault.
func split(ctx context.Context, net *netns.Network, nodes []string, shape string) (*netns.Fault, string, error) {
	n := len(nodes)
	switch shape {
	case "", ShapeHalves:
		a, b := nodes[:n/2], nodes[n/2:]
		f, err := net.Partition(ctx, a, b)
		return f, strings.Join(a, ",") + " | " + strings.Join(b, ","), err
	case ShapeBridge:
		mid := n / 2
		a, b := nodes[:mid], nodes[mid+1:]
		f, err := net.Partition(ctx, a, b)
		return f, fmt.Sprintf("%s | %s, bridged by %s", strings.Join(a, ","), strings.Join(b, ","), nodes[mid]), err
	case ShapeRing:
		// Node i hears from itself and the next n/2 nodes, a majority
		// of n/2+1, a different one for each node; it drops the rest.
		var pairs [][2]string
		for i, to := range nodes {
			for k := n/2 + 1; k < n; k++ {
				pairs = append(pairs, [2]string{nodes[(i+k)%n], to})
			}
		}
		f, err := net.DropPairs(ctx, pairs)
		return f, "majorities ring over " + strings.Join(nodes, ","), err
	}
	return nil, "", fmt.Errorf("unknown shape %q (want %s)", shape, strings.Join(Shapes(), ", "))
}

// failover fails the database over to its standby (cluster.Failoverer).
func (e *Env) failover(ctx context.Context, f Fault) (effect, error) {
	name := e.recordedTarget(f)
	if e.Cluster == nil {
		return effect{}, errors.New("no cluster")
	}
	fo, err := e.Cluster.Failoverer(name)
	if err != nil {
		return effect{}, err
	}
	ev, err := fo.Failover(ctx)
	if err != nil {
		return effect{}, err
	}
	e.record(history.Info, history.Crash, history.Value{Target: name, Fault: string(Failover), Detail: "primary killed by the nemesis's failover"})
	svc := e.service(name)
	return effect{undo: func(ctx context.Context) error {
		if err := svc.Start(ctx); err != nil {
			return fmt.Errorf("rejoin %s's deposed primary: %w", name, err)
		}
		e.record(history.OK, history.Restart, history.Value{Target: name, Detail: "deposed primary rejoined as a standby"})
		return nil
	}, bit: evidence(ev)}, nil
}

// wipe replaces a node with one whose disk is empty (cluster.Wiper): the
// node killed and its data removed now, rejoined as a new member at the
// heal. Its evidence is what the wipe removed and how the node came back.
func (e *Env) wipe(ctx context.Context, f Fault) (effect, error) {
	if e.Cluster == nil {
		return effect{}, errors.New("no cluster")
	}
	name, err := e.resolveNode(ctx, e.recordedTarget(f))
	if err != nil {
		return effect{}, err
	}
	w, err := e.Cluster.Wiper(name)
	if err != nil {
		return effect{}, err
	}
	wiped, err := w.Wipe(ctx)
	// Down from here on even if the wipe failed half-way: HealAll
	// starts it, and a wiped node's start rejoins it.
	e.mark(&e.killed, name, true)
	if err != nil {
		return effect{}, err
	}
	e.record(history.Info, history.Crash, history.Value{Target: name, Fault: string(Wipe), Detail: "kill -9 and disk wiped by the nemesis"})
	var rejoined string
	return effect{undo: func(ctx context.Context) error {
		ev, err := w.Rejoin(ctx)
		if err != nil {
			return fmt.Errorf("rejoin %s: %w", name, err)
		}
		rejoined = ev
		e.mark(&e.killed, name, false)
		e.record(history.OK, history.Restart, history.Value{Target: name, Detail: "rejoined with an empty disk"})
		if e.Rejoined != nil {
			did, err := e.Rejoined(ctx, name)
			if err != nil {
				return fmt.Errorf("after %s rejoined: %w", name, err)
			}
			if did != "" {
				rejoined += "; " + did
			}
		}
		return nil
	}, bit: func() (string, error) { return wiped + "; " + rejoined, nil }}, nil
}
