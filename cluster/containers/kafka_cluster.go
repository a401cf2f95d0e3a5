package containers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/docker/go-connections/nat"
	"github.com/testcontainers/testcontainers-go"
	"golang.org/x/sync/errgroup"

	"github.com/deliverycheck/deliverycheck/cluster/local"
)

// kafkaDataDir is where a node's log lives in its container (the
// official image's and ours: writable by the broker's user).
const kafkaDataDir = "/var/lib/kafka/data"

// KafkaCluster is a KRaft cluster of combined broker+controller nodes in
// containers, each in its holder's namespace on the run's network (see
// nodes.go), with the local runtime's settings: the same server.properties
// (local.KafkaClusterProperties: listeners, ports, node names, replication
// factor 3 and min ISR 2 unless asked otherwise, session and lag times),
// given to the image as its mounted config file. It is a cluster.Service
// (Start waits until every node lists every node and the quorum has a
// leader); its nodes are services of their own, which a fault can target
// one by one.
type KafkaCluster struct {
	nodes     []*KafkaNode
	clusterID string
}

// KafkaNode is one node of a [KafkaCluster], named by its node name
// ("kafka-1", broker and controller id 1). Kill, pause and restart act on
// its container alone; its data lives in the container, so a node
// started again rejoins with the log it had. A wipe removes the container
// (see wipe.go), and the node starts again from a new one.
type KafkaNode struct {
	*Service
	c         *KafkaCluster
	id        int32
	advertise string

	wipeMu sync.Mutex
	wiped  bool // set by Wipe, cleared once the node has started again
}

// NewKafkaCluster creates (not starts) a cluster of the nodes of o
// (o.Nodes, o.Advertise and the replication settings; o.Network and the
// local options are not used) from image ("" for the default), each in
// its holder's namespace in nodes.
func (r *Runtime) NewKafkaCluster(nodes *Nodes, image string, o local.KafkaClusterOptions) (*KafkaCluster, error) {
	if image == "" {
		image = DefaultImage("kafka")
	}
	var listen []string
	for _, name := range o.Nodes {
		a := nodes.Addr(name)
		if !a.IsValid() {
			return nil, fmt.Errorf("kafka: node %s is not in the run's network", name)
		}
		listen = append(listen, a.String())
	}
	props, err := local.KafkaClusterProperties(o, listen, kafkaDataDir)
	if err != nil {
		return nil, err
	}
	heap := o.HeapMB
	if heap <= 0 {
		heap = local.KafkaClusterHeapMB
	}
	// One cluster id, every node's storage formatted with it (never
	// with a leading '-': the image's kafka-storage format took one for a
	// flag and refused to start, in 1 run of 64).
	clusterID := local.KafkaUUID()
	env := map[string]string{
		"CLUSTER_ID":      clusterID,
		"KAFKA_HEAP_OPTS": fmt.Sprintf("-Xmx%dm -Xms%dm", heap, max(heap/2, 64)),
	}
	c := &KafkaCluster{clusterID: clusterID}
	for i, name := range o.Nodes {
		h, err := nodes.holder(name)
		if err != nil {
			return nil, errors.Join(err, c.Close())
		}
		n := &KafkaNode{c: c, id: int32(i), advertise: o.Advertise[i]}
		s, err := r.newService(spec{
			name: name, image: image, port: tcpPort(local.KafkaClientPort),
			holder: h,
			run: func(ctx context.Context, img string, opts ...testcontainers.ContainerCustomizer) (testcontainers.Container, error) {
				conf := filepath.Join(n.Dir(), "server.properties")
				if err := os.WriteFile(conf, []byte(props[i]), 0o644); err != nil {
					return nil, err
				}
				opts = append([]testcontainers.ContainerCustomizer{
					testcontainers.WithEnv(env),
					// The image's contract: a mounted server.properties is
					// the config (the official image's too).
					testcontainers.WithFiles(testcontainers.ContainerFile{
						HostFilePath: conf, ContainerFilePath: "/mnt/shared/config/server.properties", FileMode: 0o644,
					}),
				}, opts...)
				return testcontainers.Run(ctx, img, opts...)
			},
			ready: func(ctx context.Context, ep string) (string, error) {
				// Registered with the controller and unfenced: caught up
				// with the metadata log.
				ids, err := local.KafkaBrokers(ctx, ep)
				if err != nil {
					return "", err
				}
				if !slices.Contains(ids, n.id) {
					return "", fmt.Errorf("%s not among the live brokers %v yet", name, ids)
				}
				return kafkaVersion(image), nil
			},
			stopTimeout:  30 * time.Second,
			startTimeout: 3 * time.Minute,
		})
		if err != nil {
			return nil, errors.Join(err, c.Close())
		}
		n.Service = s
		c.nodes = append(c.nodes, n)
	}
	return c, nil
}

// Name implements cluster.Service.
func (c *KafkaCluster) Name() string { return "kafka" }

// Nodes are the cluster's nodes, in order: node i has broker id i.
func (c *KafkaCluster) Nodes() []*KafkaNode { return c.nodes }

// Endpoint implements cluster.Service: node 0's client listener.
func (c *KafkaCluster) Endpoint() string { return c.nodes[0].Endpoint() }

// Version implements cluster.Versioner.
func (c *KafkaCluster) Version() string {
	for _, n := range c.nodes {
		if v := n.Version(); v != "" {
			return v
		}
	}
	return ""
}

// Start implements cluster.Service: every node that does not run is
// started, concurrently (a KRaft quorum cannot form one node at a time);
// it returns once every node lists all the others as live brokers and
// the controller quorum has a leader.
func (c *KafkaCluster) Start(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
	}
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for _, n := range c.nodes {
		if st, err := n.state(ctx); err == nil && st.Running {
			continue // e.g. the others of a node that was killed
		}
		g.Go(func() error { return n.Start(gctx) })
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("start kafka: %w", err)
	}
	if err := c.waitReady(ctx); err != nil {
		return fmt.Errorf("start kafka: %w", err)
	}
	c.nodes[0].log.Info("cluster ready", "nodes", len(c.nodes), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// waitReady polls until every node's metadata lists every node and the
// quorum has a leader, or ctx ends.
func (c *KafkaCluster) waitReady(ctx context.Context) error {
	ready := func(ctx context.Context) error {
		for _, n := range c.nodes {
			ids, err := local.KafkaBrokers(ctx, n.Endpoint())
			if err != nil {
				return fmt.Errorf("%s: metadata: %w", n.name, err)
			}
			if len(ids) != len(c.nodes) {
				return fmt.Errorf("%s: lists brokers %v, want %d", n.name, ids, len(c.nodes))
			}
		}
		leader, err := c.nodes[0].QuorumLeader(ctx)
		if err == nil && leader < 0 {
			err = errors.New("controller quorum has no leader")
		}
		return err
	}
	var last error
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		last = ready(pctx)
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

// CheckHealth implements cluster.HealthChecker as the local runtime's
// cluster does: every node, asked alone, lists every node and no
// under-replicated partition, and the quorum has a leader.
func (c *KafkaCluster) CheckHealth(ctx context.Context) error {
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Go(func() {
			if err := local.KafkaNodeInSync(ctx, n.Endpoint(), len(c.nodes)); err != nil {
				errs[i] = fmt.Errorf("%s: %w", n.name, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	leader, err := c.nodes[0].QuorumLeader(ctx)
	if err == nil && leader < 0 {
		err = errors.New("kafka: controller quorum has no leader")
	}
	return err
}

// ReplicationPort implements cluster.ReplicationPorter: the inter-broker
// listener's port, the same on every node as on the local runtime.
func (c *KafkaCluster) ReplicationPort() int { return local.KafkaBrokerPort }

// Stop implements cluster.Service: every node stopped at once, so every
// broker's controlled shutdown is granted by a quorum still there (see
// the local runtime's KafkaCluster.Stop).
func (c *KafkaCluster) Stop(ctx context.Context) error {
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Go(func() { errs[i] = n.Stop(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Close implements cluster.Service: every node's container removed.
func (c *KafkaCluster) Close() error {
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Go(func() { errs[i] = n.Close() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// ID is the node's broker and controller id.
func (n *KafkaNode) ID() int32 { return n.id }

// Advertised is the host:port the node hands out to clients: its link's.
func (n *KafkaNode) Advertised() string { return n.advertise }

// QuorumLeader asks the node which controller leads the KRaft quorum: a
// node id, or -1 while an election runs.
func (n *KafkaNode) QuorumLeader(ctx context.Context) (int32, error) {
	id, err := local.KafkaQuorumLeader(ctx, n.Endpoint())
	if err != nil {
		return -1, fmt.Errorf("%s: %w", n.name, err)
	}
	return id, nil
}

// Start implements cluster.Service: the node's container started again
// with its data, or, after a wipe, a new container, which formats its
// empty disk with the cluster's id and the node's id (the image's
// entrypoint does, as an operator's init step would) once the other
// nodes have a quorum leader that is not this node
// (local.KafkaWaitLeaderElsewhere says why).
func (n *KafkaNode) Start(ctx context.Context) error {
	n.wipeMu.Lock()
	wiped := n.wiped
	n.wipeMu.Unlock()
	if wiped {
		var peers []string
		for _, p := range n.c.nodes {
			if p != n {
				peers = append(peers, p.Endpoint())
			}
		}
		if err := local.KafkaWaitLeaderElsewhere(ctx, n.id, peers); err != nil {
			return fmt.Errorf("%s: start after a wipe: %w", n.name, err)
		}
	}
	if err := n.Service.Start(ctx); err != nil {
		return err
	}
	n.wipeMu.Lock()
	n.wiped = false
	n.wipeMu.Unlock()
	return nil
}

// Restart implements cluster.Restarter: a graceful stop, then Start.
func (n *KafkaNode) Restart(ctx context.Context) error {
	if err := n.Stop(ctx); err != nil {
		return err
	}
	return n.Start(ctx)
}

// Wipe implements cluster.Wiper: kill -9 (if the node runs), then its
// container removed with its log dir, the partitions' logs and its copy
// of the KRaft metadata log together, as a pod's volume holds both (see
// the local runtime's KafkaNode.Wipe for why). The node stays down until
// Rejoin or Start.
func (n *KafkaNode) Wipe(ctx context.Context) (string, error) {
	d, err := n.discard(ctx, kafkaDataDir, "meta.properties")
	if err != nil {
		return "", err
	}
	n.wipeMu.Lock()
	n.wiped = true
	n.wipeMu.Unlock()
	return fmt.Sprintf("%s %s; disk wiped: %s (log dir with directory id %s; container removed)",
		n.name, d.what, d.disk, local.KafkaDirectoryID(d.files["meta.properties"])), nil
}

// Rejoin implements cluster.Wiper: Start, which returns once the new
// container's broker is registered with the controller and unfenced (it
// has replicated the metadata log up to the quorum's end). Its
// partitions then catch up by themselves.
func (n *KafkaNode) Rejoin(ctx context.Context) (string, error) {
	if err := n.Start(ctx); err != nil {
		return "", err
	}
	dirID := "unknown"
	if id, err := n.containerID(); err == nil {
		texts := map[string]string{}
		if _, err := n.readDisk(ctx, id, kafkaDataDir+"/meta.properties", []string{"meta.properties"}, texts); err == nil {
			dirID = local.KafkaDirectoryID(texts["meta.properties"])
		}
	}
	return fmt.Sprintf("%s rejoined with an empty disk: a new container formatted its storage (cluster id %s, node id %d, new directory id %s), registered and unfenced",
		n.name, n.c.clusterID, n.id, dirID), nil
}

// tcpPort is a container TCP port as the engine spells it.
func tcpPort(port int) nat.Port { return nat.Port(strconv.Itoa(port) + "/tcp") }
