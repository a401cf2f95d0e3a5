package local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sync/errgroup"

	"github.com/deliverycheck/deliverycheck/cluster/netns"
)

// Ports every node of a Kafka cluster listens on, inside its own network
// namespace: each node is alone there, so all use the same ones.
const (
	kafkaClientPort     = 9092 // PLAINTEXT, advertised as the node's proxy link
	kafkaBrokerPort     = 9093 // BROKER, inter-broker, advertised by node name
	kafkaControllerPort = 9094 // CONTROLLER, the KRaft quorum's
)

// Defaults of a replicated Kafka, the settings that keep acknowledged
// records (acks=all) through the loss of any one node.
const (
	kafkaClusterHeapMB = 384
	kafkaClusterMinISR = 2
	// kafkaClusterSessionMS is broker.session.timeout.ms: how long a node
	// that stopped heartbeating (killed, paused, cut off from the
	// controller) keeps its partitions before it is fenced and loses its
	// leaderships, and how long a node restarted after kill -9 waits
	// before the controller takes its registration. Kafka's 9 s makes
	// every fault slow to take effect; 3 s leaves a loaded 2-core machine
	// six missed heartbeats of slack.
	kafkaClusterSessionMS = 3000
	// kafkaClusterLagMS is replica.lag.time.max.ms: a follower that
	// reaches the controller but not its leader (a cut between two
	// brokers only) leaves the ISR after this long, and up to half as
	// long again (the leader checks every half of it). Kafka's 30 s
	// would stall acks=all writes for that long under every such cut;
	// 2 s lets a scenario of 10 s cut a leader's replication, see its
	// ISR shrink to itself (then it acknowledges alone, under a min ISR
	// of 1) and kill it (measured: the ISR shrinks 3.1 to 4.7 s after a
	// cut at 3 s). A follower that falls behind for 2 s on a loaded
	// machine leaves the ISR and rejoins once caught up, which costs
	// correct settings (min ISR 2 of 3) nothing.
	kafkaClusterLagMS = 2000
)

// KafkaClusterOptions configure a replicated Kafka cluster.
type KafkaClusterOptions struct {
	ReplicatedOptions
	// Version is the Apache Kafka release, as in [KafkaOptions].
	Version string
	// HeapMB is each JVM's maximum heap in MiB, overriding the default 384.
	HeapMB int
	// ReplicationFactor is default.replication.factor, the replicas of a
	// topic a client creates without saying, overriding the default of
	// one per node up to 3. A scenario sets 1 to show what an empty disk
	// does to an unreplicated topic.
	ReplicationFactor int
	// MinInsyncReplicas is min.insync.replicas, how many replicas must
	// have an acks=all record before it is acknowledged, overriding the
	// default 2 (capped at the replication factor). 1 is the known-bad
	// setting: a leader alone acknowledges, and its loss loses the record.
	MinInsyncReplicas int
	// UncleanLeaderElection sets unclean.leader.election.enable: an
	// out-of-sync replica may become leader, truncating what the old
	// leader acknowledged. Known-bad; false by default.
	UncleanLeaderElection bool
}

// KafkaCluster is a KRaft cluster of combined broker+controller nodes,
// each a JVM in its own network namespace of [ReplicatedOptions.Network].
// It is a cluster.Service (Start waits until every node serves and the
// controller quorum has a leader); its nodes are services of their own,
// which a fault can target one by one.
//
// Each node has three listeners: the client listener, advertised as the
// node's proxy link on the host, so clients reach every node through its
// own link; the inter-broker listener, advertised by node name, so a
// partition between namespaces cuts replication while the node's link
// still carries its clients (the cut that loses acknowledged writes under
// known-bad settings); and the controller listener, named in
// controller.quorum.voters. Internal topics (offsets, transactions) are
// replicated on up to three nodes with a min ISR of 2 whatever the
// options say: the options are about the topics a scenario writes.
type KafkaCluster struct {
	own       *base // the dir holding the nodes' dirs; it runs nothing
	net       *netns.Network
	nodes     []*KafkaNode
	version   string
	heapMB    int
	clusterID string

	prepMu sync.Mutex // held while fetching and preparing, which can take long
	prep   *kafkaPrep
}

// KafkaNode is one node of a [KafkaCluster]: a cluster.Service named by
// its node name ("kafka-1", broker and controller id 1) that can be
// killed, paused and restarted alone. Its data survives all three, so a
// node started again rejoins the cluster with the log it had.
type KafkaNode struct {
	*base
	c         *KafkaCluster
	id        int32
	advertise string
	data      string
	logPath   string

	mu      sync.Mutex
	version string // exact version, set once Start succeeded
	// wiped is set by Wipe and cleared once the node has started again.
	wiped bool
}

// NewKafkaCluster creates a stopped cluster: every node's config written
// and its temp dir made, nothing running. Endpoint and every node's
// Endpoint are valid at once, so links can be put in front of them
// before Start. The caller should call Close when finished.
func NewKafkaCluster(o KafkaClusterOptions) (*KafkaCluster, error) {
	cfgs, err := o.configs()
	if err != nil {
		return nil, err
	}
	if o.Version == "" {
		o.Version = DefaultKafkaVersion
	}
	if o.HeapMB <= 0 {
		o.HeapMB = kafkaClusterHeapMB
	}
	own, err := newBase("kafka", o.Options)
	if err != nil {
		return nil, err
	}
	c := &KafkaCluster{own: own, net: o.Network, version: o.Version, heapMB: o.HeapMB, clusterID: KafkaUUID()}
	for i, name := range o.Nodes {
		// The nodes' dirs are in the cluster's, so one dir holds a run's
		// Kafka; each node's guard still removes its own.
		nodeOpts := o.Options
		nodeOpts.TempRoot = own.dir
		b, err := newBase(name, nodeOpts)
		if err != nil {
			return nil, errors.Join(err, c.Close())
		}
		node := &KafkaNode{
			base:      b,
			c:         c,
			id:        int32(i),
			advertise: o.Advertise[i],
			data:      filepath.Join(b.dir, "data"),
			logPath:   filepath.Join(b.dir, "kafka.log"),
		}
		c.nodes = append(c.nodes, node)
		cfgs[i].data = node.data
		if err := cfgs[i].write(b.dir); err != nil {
			return nil, errors.Join(fmt.Errorf("%s: %w", name, err), c.Close())
		}
	}
	return c, nil
}

// configs checks o and returns each node's server.properties, all but
// its log dir.
func (o KafkaClusterOptions) configs() ([]kafkaConfig, error) {
	if err := o.check("kafka"); err != nil {
		return nil, err
	}
	if _, _, _, err := o.replication(); err != nil {
		return nil, err
	}
	var listen []string
	for _, name := range o.Nodes {
		if !o.Network.Addr(name).IsValid() {
			return nil, fmt.Errorf("kafka: node %s is not in network %s", name, o.Network.Name())
		}
		listen = append(listen, o.Network.Addr(name).String())
	}
	return o.nodeConfigs(listen)
}

// nodeConfigs are the nodes' configs, all but their log dirs, with node i
// listening on listen[i] (an address in its own namespace).
func (o KafkaClusterOptions) nodeConfigs(listen []string) ([]kafkaConfig, error) {
	n := len(o.Nodes)
	if len(o.Advertise) != n || len(listen) != n {
		return nil, fmt.Errorf("kafka: %d nodes, %d advertised and %d listen addresses (want one each)", n, len(o.Advertise), len(listen))
	}
	rf, minISR, internal, err := o.replication()
	if err != nil {
		return nil, err
	}
	var voters []string
	for i, name := range o.Nodes {
		voters = append(voters, fmt.Sprintf("%d@%s:%d", i, name, kafkaControllerPort))
	}
	var out []kafkaConfig
	for i, name := range o.Nodes {
		out = append(out, kafkaConfig{
			comment:    fmt.Sprintf("Node %s of a %d-node KRaft cluster: broker and controller in one process.", name, n),
			nodeID:     i,
			voters:     strings.Join(voters, ","),
			listeners:  fmt.Sprintf("PLAINTEXT://%[1]s:%[2]d,BROKER://%[1]s:%[3]d,CONTROLLER://%[1]s:%[4]d", listen[i], kafkaClientPort, kafkaBrokerPort, kafkaControllerPort),
			advertised: fmt.Sprintf("PLAINTEXT://%s,BROKER://%s:%d", o.Advertise[i], name, kafkaBrokerPort),
			replicas:   rf, minISR: minISR,
			internalReplicas: internal, internalMinISR: min(2, internal),
			unclean:   o.UncleanLeaderElection,
			sessionMS: kafkaClusterSessionMS,
			lagMS:     kafkaClusterLagMS,
		})
	}
	return out, nil
}

// replication is the topics' replication factor and min ISR, and the
// internal topics' replication factor, the options' or the defaults.
func (o KafkaClusterOptions) replication() (rf, minISR, internal int, err error) {
	n := len(o.Nodes)
	internal = min(3, n)
	rf = o.ReplicationFactor
	if rf <= 0 {
		rf = internal
	}
	if rf > n {
		return 0, 0, 0, fmt.Errorf("kafka: replication factor %d on %d nodes", rf, n)
	}
	minISR = o.MinInsyncReplicas
	if minISR <= 0 {
		minISR = kafkaClusterMinISR
	}
	return rf, min(minISR, rf), internal, nil
}

// KafkaClusterProperties is the server.properties text of every node of
// a replicated Kafka that another runtime runs (cluster/containers), so
// both runtimes' clusters have the same settings, ports and node names:
// node i of o.Nodes (o.Network is not used) listens on listen[i] in its
// own namespace, advertises o.Advertise[i] to clients, and keeps its log
// in data. KafkaClientPort is the port its link forwards to.
func KafkaClusterProperties(o KafkaClusterOptions, listen []string, data string) ([]string, error) {
	if len(o.Nodes) < 2 {
		return nil, fmt.Errorf("kafka: replicated: %d nodes (want 2 or more)", len(o.Nodes))
	}
	cfgs, err := o.nodeConfigs(listen)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range cfgs {
		c.data = data
		out = append(out, c.properties())
	}
	return out, nil
}

// KafkaClientPort is the client listener's port on every node of a
// replicated Kafka, the one its link forwards to; KafkaBrokerPort the
// inter-broker listener's.
const (
	KafkaClientPort = kafkaClientPort
	KafkaBrokerPort = kafkaBrokerPort
)

// KafkaClusterHeapMB is the default maximum heap of a replicated Kafka's
// JVMs, in MiB.
const KafkaClusterHeapMB = kafkaClusterHeapMB

// Name implements cluster.Service.
func (c *KafkaCluster) Name() string { return "kafka" }

// Dir is the cluster's temp dir, which holds every node's.
func (c *KafkaCluster) Dir() string { return c.own.dir }

// ReplicationPort implements cluster.ReplicationPorter: the inter-broker
// listener's, over which followers fetch from leaders (the controller
// quorum has its own, clients theirs).
func (c *KafkaCluster) ReplicationPort() int { return kafkaBrokerPort }

// Nodes are the cluster's nodes, in order: node i has broker id i.
func (c *KafkaCluster) Nodes() []*KafkaNode { return c.nodes }

// Endpoint implements cluster.Service: node 0's client listener.
func (c *KafkaCluster) Endpoint() string { return c.nodes[0].Endpoint() }

// Version implements cluster.Versioner: the release every node runs, once
// Start succeeded.
func (c *KafkaCluster) Version() string {
	for _, n := range c.nodes {
		if v := n.Version(); v != "" {
			return v
		}
	}
	return ""
}

// Start implements cluster.Service: it starts every node that does not
// run, concurrently (a KRaft quorum cannot form one node at a time), and
// returns once every node lists all the others as live brokers and the
// controller quorum has a leader. If any node fails, every node is
// killed.
func (c *KafkaCluster) Start(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, kafkaStartTimeout)
		defer cancel()
	}
	// Fetch and prepare once before the nodes race for it.
	if _, err := c.prepare(ctx); err != nil {
		return fmt.Errorf("start kafka: %w", err)
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, n := range c.nodes {
		if _, err := n.running(); err == nil {
			continue // e.g. the others of a node that was killed
		}
		g.Go(func() error { return n.Start(gctx) })
	}
	err := g.Wait()
	if err == nil {
		err = c.waitReady(ctx)
	}
	if err != nil {
		return errors.Join(fmt.Errorf("start kafka: %w", err), c.killAll())
	}
	c.own.log.Info("ready", "nodes", len(c.nodes), "endpoint", c.Endpoint(), "version", c.Version())
	return nil
}

// waitReady polls until every node's metadata lists every node and the
// quorum has a leader, or ctx ends.
func (c *KafkaCluster) waitReady(ctx context.Context) error {
	var last error
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		last = c.ready(pctx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not ready: %w (last probe: %v)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ready asks each node directly (not through its link, which may not be
// up yet) for its brokers, and one of them for the quorum's leader.
func (c *KafkaCluster) ready(ctx context.Context) error {
	for _, n := range c.nodes {
		ids, err := n.brokers(ctx)
		if err != nil {
			return fmt.Errorf("%s: metadata: %w", n.name, err)
		}
		if len(ids) != len(c.nodes) {
			return fmt.Errorf("%s: lists brokers %v, want %d", n.name, ids, len(c.nodes))
		}
	}
	leader, err := c.nodes[0].QuorumLeader(ctx)
	if err != nil {
		return err
	}
	if leader < 0 {
		return errors.New("controller quorum has no leader")
	}
	return nil
}

// errNoQuorumLeft ends the stop of a cluster's last node whose
// controlled shutdown can no longer be granted (see KafkaCluster.Stop).
var errNoQuorumLeft = errors.New("the other nodes have stopped: no controller quorum is left to grant its controlled shutdown")

// lastNodeGrace is how long a cluster's last running node may still take
// to stop by itself once every other node has exited.
const lastNodeGrace = 5 * time.Second

// Stop implements cluster.Service: every node is sent SIGTERM at once.
// Together, not one by one: a node's broker shuts down before its
// controller, so the brokers' controlled shutdowns are granted by a
// quorum that is still there. But a node whose grant has not come when
// the other two have exited (a race the concurrent stop usually, not
// always, wins) waits for a quorum that is gone: five minutes in Kafka
// 4.1. That node is killed lastNodeGrace after the others exited, and it
// is no error: its log is in the page cache, so the next start recovers
// every record it had, which is what a whole-cluster stop promises.
func (c *KafkaCluster) Stop(ctx context.Context) error {
	errs := make([]error, len(c.nodes))
	ctxs := make([]context.Context, len(c.nodes))
	cancels := make([]context.CancelCauseFunc, len(c.nodes))
	for i := range c.nodes {
		ctxs[i], cancels[i] = context.WithCancelCause(ctx)
		defer cancels[i](nil)
	}
	done := make(chan int, len(c.nodes))
	for i, n := range c.nodes {
		go func() { errs[i] = n.Stop(ctxs[i]); done <- i }()
	}
	stopped := make([]bool, len(c.nodes))
	var grace <-chan time.Time
	for left, graced := len(c.nodes), false; left > 0; {
		select {
		case i := <-done:
			stopped[i] = true
			left--
		case <-grace:
			grace = nil
			for j, ok := range stopped {
				if !ok {
					cancels[j](errNoQuorumLeft)
				}
			}
		}
		if left == 1 && !graced {
			grace, graced = time.After(lastNodeGrace), true
		}
	}
	for i, n := range c.nodes {
		if errs[i] != nil && context.Cause(ctxs[i]) == errNoQuorumLeft && !n.alive() {
			c.own.log.Warn("killed the last node of a cluster stop", "node", n.Name(), "why", errNoQuorumLeft)
			errs[i] = nil
		}
	}
	return errors.Join(errs...)
}

// killAll kills every node that runs (after a failed start).
func (c *KafkaCluster) killAll() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var errs []error
	for _, n := range c.nodes {
		if _, err := n.running(); err == nil {
			errs = append(errs, n.Kill(ctx))
		}
	}
	return errors.Join(errs...)
}

// PIDs implements cluster.PIDer: every node's JVM and every guard.
func (c *KafkaCluster) PIDs() []int {
	out := c.own.PIDs()
	for _, n := range c.nodes {
		out = append(out, n.PIDs()...)
	}
	return out
}

// Close implements cluster.Service: it kills every node and removes every
// dir. The network is the caller's and stays.
func (c *KafkaCluster) Close() error {
	errs := make([]error, len(c.nodes)+1)
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Go(func() { errs[i] = n.Close() })
	}
	wg.Wait()
	errs[len(c.nodes)] = c.own.closeBase(nil)
	return errors.Join(errs...)
}

// prepare finds java and the jars and the per-machine cache, once per
// cluster.
func (c *KafkaCluster) prepare(ctx context.Context) (*kafkaPrep, error) {
	c.prepMu.Lock()
	defer c.prepMu.Unlock()
	if c.prep != nil {
		return c.prep, nil
	}
	p, err := prepareKafka(ctx, c.version, c.own.g, c.own.log)
	if err != nil {
		return nil, err
	}
	c.prep = p
	return p, nil
}

// ID is the node's broker and controller id, as Kafka's metadata names
// it (a partition's leader, its ISR).
func (n *KafkaNode) ID() int32 { return n.id }

// Endpoint implements cluster.Service: the client listener at the node's
// address in its namespace, which the host reaches directly; the node's
// link forwards there.
func (n *KafkaNode) Endpoint() string {
	return net.JoinHostPort(n.c.net.Addr(n.name).String(), strconv.Itoa(kafkaClientPort))
}

// Advertised is the host:port the node hands out to clients: its link's.
func (n *KafkaNode) Advertised() string { return n.advertise }

// LogFile implements cluster.LogFiler: the node's log4j2 output and the
// JVM's stdout and stderr, in one file.
func (n *KafkaNode) LogFile() string { return n.logPath }

// Version implements cluster.Versioner, e.g. "Apache Kafka 4.1.1".
func (n *KafkaNode) Version() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.version
}

// Start implements cluster.Service: the node's JVM in its namespace,
// ready once it answers metadata listing itself (registered with the
// controller and unfenced, so caught up with the metadata log). The first
// start formats its storage with the cluster's id; later ones, after a
// kill, a stop or a pause, reuse its data, so the node rejoins with its
// log. Alone, a node cannot get ready: a quorum needs a majority of the
// nodes ([KafkaCluster.Start] starts them together).
func (n *KafkaNode) Start(ctx context.Context) error {
	prep, err := n.c.prepare(ctx)
	if err != nil {
		return fmt.Errorf("%s: start: %w", n.name, err)
	}
	n.mu.Lock()
	wiped := n.wiped
	n.mu.Unlock()
	if wiped {
		if err := n.waitLeaderElsewhere(ctx); err != nil {
			return fmt.Errorf("%s: start after a wipe: %w", n.name, err)
		}
	}
	if err := formatKafka(prep, n.data, int(n.id), n.c.clusterID); err != nil {
		return fmt.Errorf("%s: start: %w", n.name, err)
	}
	spec := prep.brokerSpec(n.dir, n.c.heapMB, n.logPath, "")
	argv, err := n.c.net.Command(n.name, append([]string{spec.Path}, spec.Args...)...)
	if err != nil {
		return fmt.Errorf("%s: start: %w", n.name, err)
	}
	spec.Path, spec.Args = argv[0], argv[1:]
	if err := runKafka(ctx, n.base, spec, n.Endpoint(), n.id, n.logPath); err != nil {
		return fmt.Errorf("%s: start: %w", n.name, err)
	}
	n.mu.Lock()
	n.version = "Apache Kafka " + prep.version
	n.wiped = false
	n.mu.Unlock()
	n.log.Info("ready", "endpoint", n.Endpoint(), "advertised", n.advertise)
	return nil
}

// Stop implements cluster.Service: SIGTERM, a controlled shutdown (the
// controller moves the node's leaderships first, its logs are closed
// cleanly). A node not gone after 30 s, or when ctx ends, is killed.
func (n *KafkaNode) Stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, kafkaStopTimeout)
	defer cancel()
	if err := n.stopWith(ctx, syscall.SIGTERM); err != nil {
		return fmt.Errorf("%s: %w", n.name, err)
	}
	return nil
}

// alive reports whether the node's server runs.
func (n *KafkaNode) alive() bool {
	_, err := n.running()
	return err == nil
}

// Restart implements cluster.Restarter: a controlled shutdown, then a
// start with the same data.
func (n *KafkaNode) Restart(ctx context.Context) error {
	if err := n.Stop(ctx); err != nil {
		return err
	}
	return n.Start(ctx)
}

// Close implements cluster.Service: kill the JVM, remove the node's dir.
func (n *KafkaNode) Close() error { return n.closeBase(nil) }

// Wipe implements cluster.Wiper: kill -9 (if the node runs), then remove
// everything in its log dir, as a pod rescheduled without its volume has
// lost it: its partitions' logs, and its copy of the KRaft metadata log
// (__cluster_metadata lives in the log dir, as it does by default, so the
// volume held both). Its configuration stays, as a pod's would.
//
// The next start formats the empty disk again, with the cluster's id and
// the node's id (what an operator's init step does with kafka-storage
// format), and a new directory id: Kafka itself tells this disk from the
// old one. The node rejoins as a new incarnation of the same broker and
// controller voter: it replicates the metadata log from the quorum's
// leader, then every partition it has a replica of from that
// partition's leader. A partition it was the only replica of comes back
// empty.
//
// Why not keep the metadata log on a volume of its own (metadata.log.dir)
// and wipe only the partitions: a pod's volume usually holds both, and
// a controller voter of a static quorum that comes back with an empty
// metadata log is part of what a replaced node does (KIP-853's dynamic
// quorums exist for it); with two of three voters intact, the empty one
// can neither win an election nor make one, so it rejoins reliably.
func (n *KafkaNode) Wipe(ctx context.Context) (string, error) {
	what := "was down"
	if _, err := n.running(); err == nil {
		if err := n.Kill(ctx); err != nil {
			return "", fmt.Errorf("%s: wipe: %w", n.name, err)
		}
		what = "killed (" + n.ExitStatus() + ")"
	}
	dirID := kafkaDirectoryID(n.data)
	n.mu.Lock()
	n.wiped = true
	n.mu.Unlock()
	w, err := wipeDir(n.data)
	if err != nil {
		return "", fmt.Errorf("%s: %w", n.name, err)
	}
	n.log.Info("wiped", "removed", w.String(), "directory.id", dirID)
	return fmt.Sprintf("%s %s; disk wiped: %s (log dir with directory id %s)", n.name, what, w, dirID), nil
}

// waitLeaderElsewhere is KafkaWaitLeaderElsewhere over the other nodes.
func (n *KafkaNode) waitLeaderElsewhere(ctx context.Context) error {
	var peers []string
	for _, peer := range n.c.nodes {
		if peer != n {
			peers = append(peers, peer.Endpoint())
		}
	}
	return KafkaWaitLeaderElsewhere(ctx, n.id, peers)
}

// KafkaWaitLeaderElsewhere waits until another node (its endpoint in
// peers), asked directly, names a quorum leader that is not node id. A
// wiped voter that starts while its peers still follow it as the leader
// of their epoch (they notice it gone only after
// controller.quorum.fetch.timeout.ms) hears from them that it leads an
// epoch it has no record of, and Kafka 4.1.1 stops it ("Received request
// or response with leader 1 and epoch 1 which is inconsistent with
// current leader OptionalInt.empty and epoch 0"): a pod rescheduled that
// fast would crash-loop until they elect another. Both runtimes' wiped
// nodes wait for it before they start.
func KafkaWaitLeaderElsewhere(ctx context.Context, id int32, peers []string) error {
	var last error
	for {
		for _, peer := range peers {
			qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			leader, err := KafkaQuorumLeader(qctx, peer)
			cancel()
			if err == nil && leader >= 0 && leader != id {
				return nil
			}
			if err == nil {
				err = fmt.Errorf("%s names leader %d", peer, leader)
			}
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no quorum leader among the other nodes: %w (last: %v)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Rejoin implements cluster.Wiper: Start, which waits until the other
// nodes have a quorum leader (see waitLeaderElsewhere), formats the
// empty disk with the cluster's id and the node's id and a new directory
// id, and returns once the node is registered with the controller and unfenced
// (so it has replicated the metadata log up to the quorum's end). Its
// partitions then catch up by themselves.
func (n *KafkaNode) Rejoin(ctx context.Context) (string, error) {
	if err := n.Start(ctx); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s rejoined with an empty disk: storage formatted again (cluster id %s, node id %d, new directory id %s), registered and unfenced",
		n.name, n.c.clusterID, n.id, kafkaDirectoryID(n.data)), nil
}

// QuorumLeader asks the node which controller leads the KRaft quorum:
// a node id, or -1 while an election runs.
func (n *KafkaNode) QuorumLeader(ctx context.Context) (int32, error) {
	id, err := KafkaQuorumLeader(ctx, n.Endpoint())
	if err != nil {
		return -1, fmt.Errorf("%s: %w", n.name, err)
	}
	return id, nil
}

// KafkaQuorumLeader asks the broker at addr alone (DescribeQuorum on
// __cluster_metadata, which it forwards to the active controller; kadm
// has no call for it) which controller leads the KRaft quorum: a node
// id, or -1 while an election runs.
func KafkaQuorumLeader(ctx context.Context, addr string) (int32, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTimeout(time.Second))
	if err != nil {
		return -1, err
	}
	defer cl.Close()
	req := kmsg.NewPtrDescribeQuorumRequest()
	req.Topics = []kmsg.DescribeQuorumRequestTopic{{
		Topic:      "__cluster_metadata",
		Partitions: []kmsg.DescribeQuorumRequestTopicPartition{{Partition: 0}},
	}}
	r, err := cl.SeedBrokers()[0].Request(ctx, req)
	if err != nil {
		return -1, fmt.Errorf("describe quorum: %w", err)
	}
	resp := r.(*kmsg.DescribeQuorumResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return -1, fmt.Errorf("describe quorum: %w", err)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return -1, fmt.Errorf("describe quorum: %w", err)
			}
			return p.LeaderID, nil
		}
	}
	return -1, errors.New("describe quorum: no partition in the answer")
}

// brokers are the live (registered, unfenced) brokers' ids in the node's
// own metadata, asked of the node itself.
func (n *KafkaNode) brokers(ctx context.Context) ([]int32, error) {
	return KafkaBrokers(ctx, n.Endpoint())
}

// KafkaBrokers are the ids of the live (registered, unfenced) brokers in
// the metadata of the broker at addr, asked of that broker alone (not
// whichever a client would pick), sorted: what that one node believes.
func KafkaBrokers(ctx context.Context, addr string) ([]int32, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTimeout(time.Second))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{}
	resp, err := cl.SeedBrokers()[0].Request(ctx, req)
	if err != nil {
		return nil, err
	}
	var ids []int32
	for _, b := range resp.(*kmsg.MetadataResponse).Brokers {
		ids = append(ids, b.NodeID)
	}
	slices.Sort(ids)
	return ids, nil
}

// directClient is a client of the node's own listener, not its link.
// Requests go to its seed broker (SeedBrokers()[0].Request), never to an
// advertised address: those are the links, which may be down or faulted.
func (n *KafkaNode) directClient() (*kgo.Client, error) {
	return kgo.NewClient(kgo.SeedBrokers(n.Endpoint()), kgo.DialTimeout(time.Second))
}
