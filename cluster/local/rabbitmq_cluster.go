package local

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/deliverycheck/deliverycheck/cluster/probe"
	"github.com/deliverycheck/deliverycheck/process"
)

// The ports every node of a cluster uses. Each node has a network
// namespace of its own, so all can use RabbitMQ's standard ports, and
// peers find each other the standard way: epmd on 4369 of the peer's
// host name.
const (
	rabbitAMQPPort = 5672
	rabbitDistPort = 25672
	rabbitEPMDPort = 4369
)

// rabbitNetTicktime is the cluster's net_ticktime, in seconds (see
// rabbitMQClusterConfig).
const rabbitNetTicktime = 10

// viewTimeout bounds the question to one node in a question to all (a
// paused node never answers).
const viewTimeout = 3 * time.Second

// RabbitMQClusterOptions configure a replicated RabbitMQ cluster.
type RabbitMQClusterOptions struct {
	ReplicatedOptions
}

// RabbitMQCluster is a RabbitMQ cluster, each node in its own network
// namespace with its own epmd. It is a cluster.Service (Start waits until
// every node runs and has joined); its nodes are services of their own,
// which a fault can target one by one.
//
// Every quorum queue declared while all nodes run has a member on each
// (quorum_cluster_size is the number of nodes), so it survives a
// minority of its nodes down or cut off. A classic queue lives on one
// node only and dies with it.
type RabbitMQCluster struct {
	nodes   []*RabbitMQNode
	log     *slog.Logger
	erlCall string // path of erl_call
	cookie  string

	mu sync.Mutex
	// formed is set once node 0 has started: from then on the nodes
	// have (or will find) a cluster, and may start in any order.
	formed bool
}

// RabbitMQNode is one node of a [RabbitMQCluster], a service of its own:
// Kill, Pause, Resume and Restart act on this node only (its epmd stays
// up, as a host's would). A node started again after a kill or a stop
// keeps its node name and data and rejoins the cluster by itself.
type RabbitMQNode struct {
	*rabbitServer
	cluster *RabbitMQCluster
	netName string // the node's name in the network, e.g. rabbitmq-0
	runNS   func(argv ...string) ([]string, error)

	wipeMu sync.Mutex
	// wiped is set by Wipe and cleared once the node has rejoined.
	wiped bool
	// forgot is what the last rejoin's forget did, for the evidence of
	// a rejoin that goes on from an attempt cut short.
	forgot string
}

// NewRabbitMQCluster creates a stopped cluster: every node's dirs,
// configuration and the cookie they share. Endpoints are valid before
// Start. The caller should call Close when finished.
func NewRabbitMQCluster(o RabbitMQClusterOptions) (_ *RabbitMQCluster, err error) {
	if err := o.check("rabbitmq"); err != nil {
		return nil, err
	}
	server, epmdBin, err := rabbitMQBinaries()
	if err != nil {
		return nil, err
	}
	erlCall, err := erlCallBinary()
	if err != nil {
		return nil, err
	}
	l := o.Logger
	if l == nil {
		l = slog.Default()
	}
	c := &RabbitMQCluster{log: l.With("service", "rabbitmq"), erlCall: erlCall, cookie: newCookie()}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close())
		}
	}()
	config := rabbitMQClusterConfig(o.Nodes)
	advanced := rabbitMQClusterAdvanced(len(o.Nodes))
	for _, name := range o.Nodes {
		addr := o.Network.Addr(name)
		if !addr.IsValid() {
			return nil, fmt.Errorf("rabbitmq: node %s is not in network %s", name, o.Network.Name())
		}
		b, err := newBase(name, o.Options)
		if err != nil {
			return nil, err
		}
		r := &rabbitServer{
			base:     b,
			node:     "rabbit@" + name,
			host:     addr.String(),
			amqpPort: rabbitAMQPPort,
			distPort: rabbitDistPort,
			epmdPort: rabbitEPMDPort,
			server:   server,
			epmdBin:  epmdBin,
			cookie:   c.cookie,
			config:   config,
			advanced: advanced,
			probe:    probeNode("deliverycheck.ready." + name),
		}
		n := &RabbitMQNode{rabbitServer: r, cluster: c, netName: name}
		n.runNS = func(argv ...string) ([]string, error) { return o.Network.Command(name, argv...) }
		// The node runs as the rabbitmq user when prepare finds one
		// (rabbitMQUser); ip netns exec must run as root, so the switch
		// of user comes after it.
		r.wrap = func(argv ...string) ([]string, error) {
			if r.cred != nil {
				return o.Network.CommandAs(name, r.cred.Uid, r.cred.Gid, argv...)
			}
			return o.Network.Command(name, argv...)
		}
		c.nodes = append(c.nodes, n)
		if err := r.prepare(); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// rabbitMQClusterConfig is every node's rabbitmq.conf: the single node's,
// and how the nodes find each other and behave when cut off.
//
// Peer discovery is classic_config, the list of every node: the simplest
// backend, with nothing to run beside the nodes. It has one weakness:
// it takes no lock, so nodes booting from nothing at the same moment can
// each find no peer ready and form clusters of their own. Start avoids
// it rather than racing it: node 0 starts first and alone, then the
// others, which find it and join (all at once: a join is serialised by
// the node joined). join_cluster would need the VMs booted twice (stop_app,
// join, start_app) and a CLI VM per join. A node that has data ignores
// discovery and rejoins the cluster it belonged to, so restarts of one
// node, or of all, need nothing. So no node ever needs discovery's
// retries, which only give peers booting at the same time a chance
// to find each other.
//
// Partition handling is autoheal. Quorum queues do not depend on it:
// Raft commits, and so confirms, only what a majority of members wrote,
// and elects a new leader within seconds of losing one (its own failure
// detector), whatever Mnesia does. The mode decides the rest: the
// metadata in Mnesia and the classic queues, once Mnesia itself has seen
// a peer down, which takes net_ticktime (a peer silent for 0.75 to 1.25
// times it). With the default mode, ignore, Mnesia
// then stays split after a heal until someone restarts a side.
// pause_minority (a node that sees itself in a minority stops serving)
// was tried first and is wrong here: a node frozen (SIGSTOP) for longer
// than that reconnects the moment it thaws, so it never sees itself in a
// minority, while its peers had declared it down; Mnesia then reports the
// partition on every node and pause_minority does nothing about it (seen
// with 3.10.8: the cluster stayed split, and a queue declared afterwards
// existed on one side only). autoheal acts on exactly that report: once
// the nodes meet again it picks a winning side (most clients, then most
// nodes) and restarts the others' rabbit application, which rejoins with
// the winner's metadata. The price, which a scenario may look for: during
// a partition a minority node still accepts clients (their publishes to a
// quorum queue stay unconfirmed), classic queues' state on the losing
// side is what its node kept on disk, and 3.10.8's autoheal sometimes
// needs a second round, 60 s later, when the nodes saw the partition at
// different moments.
//
// net_ticktime is 10 s, not the default 60: a quorum queue whose leader
// is frozen or cut off elects a new one only once its followers see the
// leader's node down (seen with 3.10.8: about a net_ticktime after the
// fault), so the default would stall a queue for up to 75 s per fault, and
// make Mnesia-level partitions, and so autoheal, reachable only by faults
// longer than a test's window. Not lower: on a 2-core machine running
// several VMs a busy node may really miss ticks for a few seconds, and
// every false detection is a partition, healed by restarting a side.
func rabbitMQClusterConfig(nodes []string) string {
	var b strings.Builder
	b.WriteString(rabbitMQConfig)
	b.WriteString("cluster_partition_handling = autoheal\n")
	fmt.Fprintf(&b, "net_ticktime = %d\n", rabbitNetTicktime)
	b.WriteString("cluster_formation.peer_discovery_backend = classic_config\n")
	// A node finding no peer ready retries 10 times, 500 ms apart, before
	// it forms a cluster of its own: 5 s of node 0's first boot, which
	// waits on peers that Start does not boot until it is up.
	b.WriteString("cluster_formation.discovery_retry_limit = 1\n")
	b.WriteString("cluster_formation.discovery_retry_interval = 100\n")
	for i, n := range nodes {
		fmt.Fprintf(&b, "cluster_formation.classic_config.nodes.%d = rabbit@%s\n", i+1, n)
	}
	return b.String()
}

// RabbitMQClusterConfig is every node's rabbitmq.conf in a cluster of
// nodes (see rabbitMQClusterConfig), for another runtime's nodes; with
// RabbitMQClusterAdvanced, both runtimes' clusters are configured alike.
func RabbitMQClusterConfig(nodes []string) string { return rabbitMQClusterConfig(nodes) }

// RabbitMQClusterAdvanced is every node's advanced.config in a cluster
// of n nodes.
func RabbitMQClusterAdvanced(n int) string { return rabbitMQClusterAdvanced(n) }

// RabbitMQNodeProbe is the readiness check of a cluster node (see
// probeNode) with its own queue name.
func RabbitMQNodeProbe(node string) func(ctx context.Context, url string) (string, error) {
	return probeNode("deliverycheck.ready." + node)
}

// rabbitMQClusterAdvanced is every node's advanced.config: quorum queues
// get a member on every node (the default is 3; a queue may still ask for
// fewer with x-quorum-initial-group-size). rabbitmq.conf has no key for it.
func rabbitMQClusterAdvanced(nodes int) string {
	return fmt.Sprintf("[{rabbit, [{quorum_cluster_size, %d}]}].\n", nodes)
}

// erlCallBinary finds erl_call, the Erlang C client the cluster queries
// its nodes with: it speaks the distribution protocol itself, so a query
// takes milliseconds where rabbitmqctl boots a VM (a second or more of
// CPU on a small machine).
func erlCallBinary() (string, error) {
	if p, err := exec.LookPath("erl_call"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/lib/erlang/bin/erl_call", "/usr/local/lib/erlang/bin/erl_call"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("rabbitmq: erl_call not found (install erlang-base)")
}

// probeNode is a cluster node's readiness check: connect, then declare
// and delete a quorum queue of one member, which is this node (the
// declaring node is always a member). Like the single node's probe, it
// proves the node's Raft system runs; unlike it, it leaves nothing
// behind whose members could be down the next time a node starts (an
// existing quorum queue answers a declare only through its leader).
func probeNode(queue string) func(ctx context.Context, url string) (string, error) {
	return func(ctx context.Context, url string) (string, error) {
		conn, err := probe.DialAMQP(ctx, url)
		if err != nil {
			return "", err
		}
		defer conn.CloseDeadline(time.Now().Add(time.Second))
		ch, err := conn.Channel()
		if err != nil {
			return "", fmt.Errorf("open channel: %w", err)
		}
		args := amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum, "x-quorum-initial-group-size": 1}
		if _, err := ch.QueueDeclare(queue, true, false, false, false, args); err != nil {
			return "", fmt.Errorf("declare quorum queue: %w", err)
		}
		if _, err := ch.QueueDelete(queue, false, false, false); err != nil {
			return "", fmt.Errorf("delete quorum queue: %w", err)
		}
		v, _ := conn.Properties["version"].(string)
		return "RabbitMQ " + v, nil
	}
}

// Nodes are the cluster's nodes, in order.
func (c *RabbitMQCluster) Nodes() []*RabbitMQNode { return c.nodes }

// Name implements cluster.Service.
func (c *RabbitMQCluster) Name() string { return "rabbitmq" }

// Endpoint implements cluster.Service: node 0's AMQP address.
func (c *RabbitMQCluster) Endpoint() string { return c.nodes[0].Endpoint() }

// URL is the AMQP URL of a client that dials addr (a node's link).
func (c *RabbitMQCluster) URL(addr string) string { return amqpURL(addr) }

// Version implements cluster.Versioner: the nodes run the same install.
func (c *RabbitMQCluster) Version() string {
	for _, n := range c.nodes {
		if v := n.Version(); v != "" {
			return v
		}
	}
	return ""
}

// Start implements cluster.Service: it starts every node that does not
// run, all at once except the very first time (see
// rabbitMQClusterConfig), and returns once each answers AMQP and sees
// every node running in one cluster with no partition.
func (c *RabbitMQCluster) Start(ctx context.Context) error {
	start := time.Now()
	c.mu.Lock()
	formed := c.formed
	c.mu.Unlock()
	nodes := c.nodes
	if !formed {
		// epmds first, all at once: node 0's discovery then asks its peers'
		// epmds and hears "no such node" at once instead of waiting on
		// connections to nothing.
		if err := parallelNodes(ctx, c.nodes, (*RabbitMQNode).startEPMD); err != nil {
			return fmt.Errorf("start rabbitmq: %w", err)
		}
		if err := c.nodes[0].Start(ctx); err != nil {
			return fmt.Errorf("start rabbitmq: %w", err)
		}
		c.mu.Lock()
		c.formed = true
		c.mu.Unlock()
		nodes = c.nodes[1:]
	}
	if err := parallelNodes(ctx, nodes, func(n *RabbitMQNode, ctx context.Context) error {
		if _, err := n.running(); err == nil {
			return nil
		}
		return n.Start(ctx)
	}); err != nil {
		return fmt.Errorf("start rabbitmq: %w", err)
	}
	if err := c.WaitWhole(ctx); err != nil {
		return fmt.Errorf("start rabbitmq: %w", err)
	}
	c.log.Info("cluster ready", "nodes", len(c.nodes), "version", c.Version(), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// parallelNodes runs f on every node at once and joins their errors.
func parallelNodes(ctx context.Context, nodes []*RabbitMQNode, f func(*RabbitMQNode, context.Context) error) error {
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { errs[i] = f(n, ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Stop implements cluster.Service: every node stops cleanly, at once.
// Start brings them back together (nodes wait at boot for the peers they
// last saw running).
func (c *RabbitMQCluster) Stop(ctx context.Context) error {
	return parallelNodes(ctx, c.nodes, (*RabbitMQNode).Stop)
}

// Close implements cluster.Service: it kills every node and epmd and
// removes their dirs. Stopped nodes are not told: a cluster torn down
// leaves nothing to tell.
func (c *RabbitMQCluster) Close() error {
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Go(func() { errs[i] = n.Close() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// PIDs implements cluster.PIDer: every node's processes.
func (c *RabbitMQCluster) PIDs() []int {
	var out []int
	for _, n := range c.nodes {
		out = append(out, n.PIDs()...)
	}
	return out
}

// Node returns the node of that name (rabbitmq-1), or nil.
func (c *RabbitMQCluster) Node(name string) *RabbitMQNode {
	for _, n := range c.nodes {
		if n.Name() == name {
			return n
		}
	}
	return nil
}

// WaitWhole waits until [RabbitMQCluster.CheckWhole] passes or ctx ends,
// e.g. after a heal, and then returns its last error.
func (c *RabbitMQCluster) WaitWhole(ctx context.Context) error {
	return RabbitMQWaitWhole(ctx, viewers(c.nodes))
}

// CheckWhole reports whether the cluster is whole: every node runs,
// answers, and sees every node running in its cluster (Mnesia's running
// nodes: after a partition each side leaves the other out until one
// side restarts, which autoheal does). Otherwise the error says each
// node's view. A node's record of partitions is not part of the check:
// RabbitMQ keeps it until the node restarts, also once the partition
// was healed (seen with 3.10.8: one node still listed a peer for minutes
// after every node ran in one cluster again).
func (c *RabbitMQCluster) CheckWhole(ctx context.Context) error {
	return RabbitMQCheckWhole(ctx, viewers(c.nodes))
}

// RabbitMQViewer is a node of a RabbitMQ cluster that can be asked for
// its view of the cluster and of a quorum queue (both runtimes' nodes:
// the questions, and what their answers mean, are in one place here).
type RabbitMQViewer interface {
	Name() string
	ClusterView(ctx context.Context) (running, partitions []string, err error)
	QueueLeader(ctx context.Context, vhost, name string) (leader string, members []string, err error)
}

func viewers(nodes []*RabbitMQNode) []RabbitMQViewer {
	out := make([]RabbitMQViewer, len(nodes))
	for i, n := range nodes {
		out[i] = n
	}
	return out
}

// RabbitMQCheckWhole is [RabbitMQCluster.CheckWhole] over any nodes.
func RabbitMQCheckWhole(ctx context.Context, nodes []RabbitMQViewer) error {
	var names []string
	for _, n := range nodes {
		names = append(names, n.Name())
	}
	slices.Sort(names)
	views := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, viewTimeout)
			defer cancel()
			running, partitions, err := n.ClusterView(ctx)
			if err == nil && !slices.Equal(running, names) {
				err = fmt.Errorf("running nodes %v (partitioned from %v)", running, partitions)
			}
			if err != nil {
				views[i] = fmt.Errorf("%s: %w", n.Name(), err)
			}
		})
	}
	wg.Wait()
	return errors.Join(views...)
}

// RabbitMQWaitWhole waits until RabbitMQCheckWhole passes or ctx ends,
// and then returns its last error.
func RabbitMQWaitWhole(ctx context.Context, nodes []RabbitMQViewer) error {
	delay := 50 * time.Millisecond
	for {
		err := RabbitMQCheckWhole(ctx, nodes)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rabbitmq: cluster not whole: %w (%w)", err, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

// QueueLeader returns the node that leads quorum queue name in vhost, and
// the queue's members, as a majority of the nodes sees it: every node is
// asked at once, and a leader counts only when more than half the nodes
// name it (a node cut off may still believe in the leader it last knew).
// The error says each node's view when no leader has a majority, e.g.
// during an election: poll until it returns one.
func (c *RabbitMQCluster) QueueLeader(ctx context.Context, vhost, name string) (leader string, members []string, err error) {
	return RabbitMQQueueLeader(ctx, viewers(c.nodes), vhost, name)
}

// RabbitMQQueueLeader is [RabbitMQCluster.QueueLeader] over any nodes.
func RabbitMQQueueLeader(ctx context.Context, nodes []RabbitMQViewer, vhost, name string) (leader string, members []string, err error) {
	type view struct {
		leader  string
		members []string
		err     error
	}
	views := make([]view, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			// A paused node would hold the answer up to ctx's end.
			ctx, cancel := context.WithTimeout(ctx, viewTimeout)
			defer cancel()
			l, m, err := n.QueueLeader(ctx, vhost, name)
			views[i] = view{l, m, err}
		})
	}
	wg.Wait()
	votes := map[string]int{}
	var errs []error
	for i, v := range views {
		if v.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", nodes[i].Name(), v.err))
			continue
		}
		votes[v.leader]++
		if votes[v.leader] > len(nodes)/2 {
			return v.leader, v.members, nil
		}
		errs = append(errs, fmt.Errorf("%s: leader %s", nodes[i].Name(), v.leader))
	}
	return "", nil, fmt.Errorf("rabbitmq: queue %q in %q: no leader a majority of nodes agrees on: %w", name, vhost, errors.Join(errs...))
}

// WaitQuorumQueueDurable waits until every member of quorum queue name in
// vhost has saved the queue's Raft registration (see
// [RabbitMQ.WaitQuorumQueueDurable]): a member killed before then does
// not come back with the queue.
func (c *RabbitMQCluster) WaitQuorumQueueDurable(ctx context.Context, vhost, name string) error {
	var members []string
	for {
		var err error
		if _, members, err = c.QueueLeader(ctx, vhost, name); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rabbitmq: quorum queue %q: members: %w", name, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	for _, m := range members {
		n := c.Node(m)
		if n == nil {
			return fmt.Errorf("rabbitmq: quorum queue %q has a member on %s, not a node of this cluster", name, m)
		}
		if err := n.WaitQuorumQueueDurable(ctx, vhost, name); err != nil {
			return err
		}
	}
	return nil
}

// Endpoint implements cluster.Service: the node's AMQP address in its
// namespace (its link on the host forwards there).
func (n *RabbitMQNode) Endpoint() string {
	return net.JoinHostPort(n.host, strconv.Itoa(n.amqpPort))
}

// ClusterView is the node's own view of its cluster: the nodes it sees
// running (itself included) and those it recorded a partition from since
// it started (a record, not the present), by name (rabbitmq-1), sorted;
// an error while its rabbit application is down or autoheal is at work
// on it (RabbitMQClusterView). It asks the node from inside its
// namespace, so a partition does not stop the question, only the node's
// answer to it.
func (n *RabbitMQNode) ClusterView(ctx context.Context) (running, partitions []string, err error) {
	return RabbitMQClusterView(ctx, n.eval)
}

// RabbitMQEval evaluates an Erlang expression ending in '.' whose value
// is a flat ASCII string on a node, and returns that string.
type RabbitMQEval func(ctx context.Context, expr string) (string, error)

// RabbitMQClusterView is a node's view of its cluster, asked through eval
// (see [RabbitMQNode.ClusterView]).
func RabbitMQClusterView(ctx context.Context, eval RabbitMQEval) (running, partitions []string, err error) {
	// The third field is the rabbit application's state and the fourth
	// autoheal's (field 7 of rabbit_node_monitor's state record, the same
	// from 3.x to 4.0): not_healing when idle.
	out, err := eval(ctx, `lists:flatten([`+
		`lists:join(",", [atom_to_list(N) || N <- lists:sort(rabbit_mnesia:cluster_nodes(running))]), "|", `+
		`lists:join(",", [atom_to_list(N) || N <- lists:sort(rabbit_node_monitor:partitions())]), "|", `+
		`atom_to_list(rabbit:is_running()), "|", `+
		`io_lib:format("~w", [case catch sys:get_state(rabbit_node_monitor, 2000) of S when is_tuple(S), tuple_size(S) >= 7 -> element(7, S); Other -> Other end])]).`)
	if err != nil {
		return nil, nil, err
	}
	f := strings.SplitN(out, "|", 4)
	if len(f) != 4 {
		return nil, nil, fmt.Errorf("cluster view: unexpected answer %q", out)
	}
	// A node autoheal is about to restart, or is restarting, may still
	// list every node as running: it is not part of a whole cluster.
	if f[2] != "true" {
		return nil, nil, errors.New("cluster view: the rabbit application is not running")
	}
	if f[3] != "not_healing" {
		return nil, nil, fmt.Errorf("cluster view: autoheal in progress (%s)", f[3])
	}
	return nodeNames(f[0]), nodeNames(f[1]), nil
}

// QueueLeader is the node's view of quorum queue name in vhost: its
// leader and members, by name, as the node's copy of the queue's record
// says (what rabbitmqctl list_queues leader members shows), which the new
// leader updates once elected. It is a local read, so it answers at once
// even while the leader is frozen, where asking Raft would wait on the
// leader. For a classic queue, which lives on one node, that node is its
// leader and only member (also while it is down: the record stays).
func (n *RabbitMQNode) QueueLeader(ctx context.Context, vhost, name string) (leader string, members []string, err error) {
	return RabbitMQNodeQueueLeader(ctx, n.eval, vhost, name)
}

// RabbitMQNodeQueueLeader is a node's view of queue name in vhost (a
// quorum queue's leader and members, a classic queue's node), asked
// through eval (see [RabbitMQNode.QueueLeader]).
func RabbitMQNodeQueueLeader(ctx context.Context, eval RabbitMQEval, vhost, name string) (leader string, members []string, err error) {
	out, err := eval(ctx, `{ok, Q} = rabbit_amqqueue:lookup(rabbit_misc:r(`+erlBinary(vhost)+`, queue, `+erlBinary(name)+`)), `+
		`{Leader, Members} = case amqqueue:get_pid(Q) of `+
		`P when is_pid(P) -> {node(P), [node(P)]}; `+
		`{_, L} -> #{nodes := M} = amqqueue:get_type_state(Q), {L, M} end, `+
		`lists:flatten([atom_to_list(Leader), "|", lists:join(",", [atom_to_list(M) || M <- lists:sort(Members)])]).`)
	if err != nil {
		return "", nil, err
	}
	l, m, ok := strings.Cut(out, "|")
	if !ok {
		return "", nil, fmt.Errorf("queue leader: unexpected answer %q", out)
	}
	return strings.TrimPrefix(l, "rabbit@"), nodeNames(m), nil
}

// nodeNames turns "rabbit@a,rabbit@b" into [a b].
func nodeNames(s string) []string {
	if s == "" {
		return nil
	}
	out := strings.Split(s, ",")
	for i, n := range out {
		out[i] = strings.TrimPrefix(n, "rabbit@")
	}
	return out
}

// erlBinary is s as an Erlang UTF-8 binary literal.
func erlBinary(s string) string {
	var b strings.Builder
	b.WriteString(`<<"`)
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r > 0x7e:
			fmt.Fprintf(&b, `\x{%x}`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteString(`"/utf8>>`)
	return b.String()
}

// eval evaluates expr, an Erlang expression ending in '.' whose value is
// a flat ASCII string without '"' or '\', on the node, and returns that
// string. erl_call runs inside the node's namespace (where its name
// resolves) as a hidden node, which the cluster never counts as a member.
func (n *RabbitMQNode) eval(ctx context.Context, expr string) (string, error) {
	argv, err := n.runNS(append([]string{n.cluster.erlCall}, erlCallArgs(ctx, 5, n.node, n.cookie)...)...)
	if err != nil {
		return "", err
	}
	return runErlCall(ctx, argv, nil, expr)
}

// erlCallArgs are erl_call's arguments to evaluate stdin on node: as a
// hidden node, with a timeout of what is left of ctx (def seconds if it
// has no deadline). Each call takes a name of its own: erl_call's -r
// draws from few names, and two calls at once to a node under one name
// (the leader sampler's and a fault's) have the second refused ("failed
// to connect to node").
func erlCallArgs(ctx context.Context, def int, node, cookie string) []string {
	timeout := def
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(1, int(time.Until(dl).Seconds()))
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	return []string{"-sname", node, "-c", cookie, "-h", "dc_" + hex.EncodeToString(id[:]), "-timeout", strconv.Itoa(timeout), "-e"}
}

// runErlCall runs argv (an erl_call, see erlCallArgs) with env added to
// the harness's, feeding it expr, and returns the string it yields (see
// erlCallResult).
func runErlCall(ctx context.Context, argv, env []string, expr string) (string, error) {
	cmd := process.Command(ctx, argv[0], argv[1:]...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdin = strings.NewReader(expr + "\n") // erl_call reads forms ending in ".\n"
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	out := strings.TrimSpace(string(b))
	if err != nil {
		return "", fmt.Errorf("erl_call: %w: %s", err, strings.TrimSpace(stderr.String()+" "+out))
	}
	return erlCallResult(out)
}

// RabbitMQErlCallResult is erlCallResult, for another runtime's erl_call.
func RabbitMQErlCallResult(out string) (string, error) { return erlCallResult(out) }

// erlCallResult is the string erl_call -e printed as its result, or an
// error with what it printed instead. erl_call prints {ok, Value}, Value
// as ~p would: our strings as "...", the empty one as [].
func erlCallResult(out string) (string, error) {
	v, ok := strings.CutPrefix(out, "{ok,")
	v = strings.TrimSpace(v)
	switch {
	case !ok:
	case v == "[]}":
		return "", nil
	case len(v) >= 3 && strings.HasPrefix(v, `"`) && strings.HasSuffix(v, `"}`):
		return v[1 : len(v)-2], nil
	}
	return "", fmt.Errorf("erl_call: %s", out)
}

// Start implements cluster.Service: the node boots with the data it
// has and rejoins its cluster by itself; a wiped node rejoins as Rejoin
// says.
func (n *RabbitMQNode) Start(ctx context.Context) error {
	n.wipeMu.Lock()
	wiped := n.wiped
	n.wipeMu.Unlock()
	if wiped {
		_, err := n.Rejoin(ctx)
		return err
	}
	return n.rabbitServer.Start(ctx)
}

// Restart implements cluster.Restarter: a clean stop, then Start.
func (n *RabbitMQNode) Restart(ctx context.Context) error {
	if err := n.Stop(ctx); err != nil {
		return fmt.Errorf("restart %s: %w", n.Name(), err)
	}
	return n.Start(ctx)
}

// Wipe implements cluster.Wiper: kill -9 (if the node runs), then remove
// everything in the node's data dir (RABBITMQ_MNESIA_BASE: its copy of
// the cluster's metadata, its classic queues and their messages, its
// quorum queues' Raft logs, its feature flags), as a pod rescheduled
// without its volume has lost it. Its configuration, cookie and epmd
// stay, as a pod's would. The node stays down until Rejoin (or Start).
func (n *RabbitMQNode) Wipe(ctx context.Context) (string, error) {
	what := "was down"
	if _, err := n.running(); err == nil {
		if err := n.Kill(ctx); err != nil {
			return "", fmt.Errorf("%s: wipe: %w", n.Name(), err)
		}
		what = "killed (" + n.ExitStatus() + ")"
	}
	n.wipeMu.Lock()
	n.wiped = true
	n.wipeMu.Unlock()
	w, err := wipeDir(n.mnesiaBase())
	if err != nil {
		return "", fmt.Errorf("%s: %w", n.Name(), err)
	}
	n.log.Info("wiped", "removed", w.String())
	return fmt.Sprintf("%s %s; disk wiped: %s (Mnesia, message stores, quorum queue logs)", n.Name(), what, w), nil
}

// Rejoin implements cluster.Wiper. A node with no data cannot join a
// cluster that still counts a node of its name as a member, so it goes
// as an operator replacing a lost node does:
//
//  1. a running peer forgets the old member (what rabbitmqctl
//     forget_cluster_node does: rabbit_mnesia:forget_cluster_node, then
//     rabbit_quorum_queue:shrink_all). Its classic queues go with it: a
//     classic queue lives on one node, and the forgotten node's are
//     deleted, with their bindings. Its quorum queues lose their member
//     there and keep their majority elsewhere.
//  2. The node starts empty, finds its peers by peer discovery as a new
//     node does, and joins; Rejoin waits until every node sees every
//     node running.
//  3. Every quorum queue gets a member on it again (what rabbitmq-queues
//     grow <node> all does), which replicates the queue from its
//     leader, so each is on every node once more.
//
// A rejoin cut short after its start (a heal whose context ended while
// the node booted; the final heal calls Rejoin again) finds the node
// running: forgotten and started already, it goes on from step 2's wait.
// Forgetting a running node would fail until the heal's time ran out.
func (n *RabbitMQNode) Rejoin(ctx context.Context) (string, error) {
	n.wipeMu.Lock()
	forgot := n.forgot + " (an earlier attempt)"
	n.wipeMu.Unlock()
	if _, err := n.running(); err != nil {
		if forgot, err = n.forget(ctx); err != nil {
			return "", fmt.Errorf("%s: rejoin: %w", n.Name(), err)
		}
		n.wipeMu.Lock()
		n.forgot = forgot
		n.wipeMu.Unlock()
		if err := n.rabbitServer.Start(ctx); err != nil {
			return "", fmt.Errorf("%s: rejoin: %w", n.Name(), err)
		}
	}
	n.wipeMu.Lock()
	n.wiped = false
	n.wipeMu.Unlock()
	if err := n.cluster.WaitWhole(ctx); err != nil {
		return "", fmt.Errorf("%s: rejoin: %w", n.Name(), err)
	}
	grown, err := n.grow(ctx)
	if err != nil {
		return "", fmt.Errorf("%s: rejoin: %w", n.Name(), err)
	}
	return fmt.Sprintf("%s; %s started empty and joined as a new member; %s", forgot, n.Name(), grown), nil
}

// forget makes a running peer forget this node (RabbitMQForget).
func (n *RabbitMQNode) forget(ctx context.Context) (string, error) {
	var peers []RabbitMQPeer
	for _, peer := range n.cluster.nodes {
		if peer != n {
			peers = append(peers, RabbitMQPeer{Name: peer.Name(), Eval: peer.eval, Up: func() bool { _, err := peer.running(); return err == nil }})
		}
	}
	return RabbitMQForget(ctx, n.log, n.node, n.Name(), peers)
}

// grow adds a member on this node to every quorum queue that has none
// there (RabbitMQGrow).
func (n *RabbitMQNode) grow(ctx context.Context) (string, error) {
	return RabbitMQGrow(ctx, n.eval, n.node, n.Name())
}
