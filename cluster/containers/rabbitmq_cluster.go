package containers

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/testcontainers/testcontainers-go"

	"github.com/deliverycheck/deliverycheck/cluster/local"
)

// RabbitMQCluster is a RabbitMQ cluster in containers, node i named
// rabbit@rabbitmq-i and running in its holder's namespace on the run's
// network (see nodes.go), where every node's name resolves. The nodes are
// configured as the local runtime's (local.RabbitMQClusterConfig and
// RabbitMQClusterAdvanced: classic_config discovery with node 0 first,
// autoheal, a 10 s net tick, quorum queues with a member on every node),
// share one Erlang cookie, and are asked about the cluster and their
// queues the same way (local.RabbitMQCheckWhole, RabbitMQQueueLeader),
// through erl_call run inside each node's container.
type RabbitMQCluster struct {
	nodes  []*RabbitMQNode
	cookie string
	conf   string // every node's rabbitmq.conf once formed

	mu     sync.Mutex
	formed bool // node 0 has started once: the nodes have a cluster
}

// RabbitMQNode is one node of a [RabbitMQCluster]. Kill, pause and
// restart act on its container alone; a node started again keeps its
// name and data (both in its container) and rejoins by itself. A wipe
// removes the container (see wipe.go), and the node rejoins from a new
// one as Rejoin says.
type RabbitMQNode struct {
	*Service
	c *RabbitMQCluster

	wipeMu sync.Mutex
	wiped  bool   // set by Wipe, cleared once the node has rejoined
	forgot string // what the last rejoin's forget did (see the local runtime's)
}

// rabbitMQDataDir is the node's database, message stores and quorum
// queue logs in its container (the image's RABBITMQ_MNESIA_BASE).
const rabbitMQDataDir = "/var/lib/rabbitmq/mnesia"

// rabbitMQConfDir is the image's conf.d (the official image's too), and
// rabbitMQClusterConf the cluster's file in it.
const (
	rabbitMQConfDir     = "/etc/rabbitmq/conf.d"
	rabbitMQClusterConf = "20-deliverycheck-cluster.conf"
)

// NewRabbitMQCluster creates (not starts) a cluster of the named nodes
// from image ("" for the default), each in its holder's namespace in
// nodes.
func (r *Runtime) NewRabbitMQCluster(nodes *Nodes, image string, names []string) (*RabbitMQCluster, error) {
	if image == "" {
		image = DefaultImage("rabbitmq")
	}
	if len(names) < 2 {
		return nil, fmt.Errorf("rabbitmq: replicated: %d nodes (want 2 or more)", len(names))
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	c := &RabbitMQCluster{cookie: hex.EncodeToString(b[:])}
	c.conf = local.RabbitMQClusterConfig(names)
	advanced := local.RabbitMQClusterAdvanced(len(names))
	for i, name := range names {
		conf := c.conf
		if i == 0 {
			// Node 0 boots first and alone (see Start), with only itself
			// to discover: RabbitMQ 4.0.5's peer discovery, finding none
			// of the listed peers running, spends about 45 s (two rounds
			// of about 22 s) before it proceeds standalone, where the
			// local runtime's 3.10.8 with every peer's epmd up is told at
			// once. Start gives it the full list once the cluster formed.
			conf = local.RabbitMQClusterConfig(names[:1])
		}
		h, err := nodes.holder(name)
		if err != nil {
			return nil, errors.Join(err, c.Close())
		}
		n := &RabbitMQNode{c: c}
		probe := local.RabbitMQNodeProbe(name)
		s, err := r.newService(spec{
			name: name, image: image, port: "5672/tcp", holder: h,
			run: func(ctx context.Context, img string, opts ...testcontainers.ContainerCustomizer) (testcontainers.Container, error) {
				conf := conf
				if c.isFormed() {
					// A node 0 created again after a wipe joins the
					// cluster the others still are.
					conf = c.conf
				}
				confFile := filepath.Join(n.Dir(), rabbitMQClusterConf)
				advFile := filepath.Join(n.Dir(), "advanced.config")
				if err := os.WriteFile(confFile, []byte(conf), 0o644); err != nil {
					return nil, err
				}
				if err := os.WriteFile(advFile, []byte(advanced), 0o644); err != nil {
					return nil, err
				}
				opts = append([]testcontainers.ContainerCustomizer{
					testcontainers.WithEnv(map[string]string{
						"RABBITMQ_NODENAME":      "rabbit@" + name,
						"RABBITMQ_ERLANG_COOKIE": c.cookie,
					}),
					testcontainers.WithFiles(
						testcontainers.ContainerFile{HostFilePath: confFile, ContainerFilePath: rabbitMQConfDir + "/" + rabbitMQClusterConf, FileMode: 0o644},
						testcontainers.ContainerFile{HostFilePath: advFile, ContainerFilePath: "/etc/rabbitmq/advanced.config", FileMode: 0o644},
					),
				}, opts...)
				return testcontainers.Run(ctx, img, opts...)
			},
			ready: func(ctx context.Context, ep string) (string, error) {
				return probe(ctx, rabbitURL(ep))
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

// rabbitURL is the AMQP URL of a client that dials addr.
func rabbitURL(addr string) string { return (&RabbitMQService{}).URL(addr) }

// Name implements cluster.Service.
func (c *RabbitMQCluster) Name() string { return "rabbitmq" }

// Nodes are the cluster's nodes, in order.
func (c *RabbitMQCluster) Nodes() []*RabbitMQNode { return c.nodes }

// Endpoint implements cluster.Service: node 0's AMQP address.
func (c *RabbitMQCluster) Endpoint() string { return c.nodes[0].Endpoint() }

// URL is the AMQP URL of a client that dials addr (a node's link).
func (c *RabbitMQCluster) URL(addr string) string { return rabbitURL(addr) }

// Version implements cluster.Versioner.
func (c *RabbitMQCluster) Version() string {
	for _, n := range c.nodes {
		if v := n.Version(); v != "" {
			return v
		}
	}
	return ""
}

// Start implements cluster.Service: every node that does not run is
// started, node 0 alone first the very first time (classic_config takes
// no lock: see the local runtime's rabbitMQClusterConfig), and it returns
// once every node answers AMQP and sees every node running in one
// cluster.
func (c *RabbitMQCluster) Start(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
	}
	start := time.Now()
	c.mu.Lock()
	formed := c.formed
	c.mu.Unlock()
	nodes := c.nodes
	if !formed {
		if err := c.nodes[0].Start(ctx); err != nil {
			return fmt.Errorf("start rabbitmq: %w", err)
		}
		// From now on node 0 has data and ignores discovery; the full
		// list is for a node 0 that ever boots empty again.
		if err := c.nodes[0].writeConf(ctx, c.conf); err != nil {
			return fmt.Errorf("start rabbitmq: %w", err)
		}
		c.mu.Lock()
		c.formed = true
		c.mu.Unlock()
		nodes = c.nodes[1:]
	}
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		if st, err := n.state(ctx); err == nil && st.Running {
			continue
		}
		wg.Go(func() { errs[i] = n.Start(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("start rabbitmq: %w", err)
	}
	if err := c.WaitWhole(ctx); err != nil {
		return fmt.Errorf("start rabbitmq: %w", err)
	}
	c.nodes[0].log.Info("cluster ready", "nodes", len(c.nodes), "version", c.Version(), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// isFormed reports whether node 0 has started once.
func (c *RabbitMQCluster) isFormed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.formed
}

func (c *RabbitMQCluster) viewers() []local.RabbitMQViewer {
	out := make([]local.RabbitMQViewer, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n
	}
	return out
}

// WaitWhole waits until CheckWhole passes or ctx ends.
func (c *RabbitMQCluster) WaitWhole(ctx context.Context) error {
	return local.RabbitMQWaitWhole(ctx, c.viewers())
}

// CheckWhole reports whether every node runs, answers, and sees every
// node running in its cluster (local.RabbitMQCluster.CheckWhole).
func (c *RabbitMQCluster) CheckWhole(ctx context.Context) error {
	return local.RabbitMQCheckWhole(ctx, c.viewers())
}

// QueueLeader returns the node that leads quorum queue name in vhost, and
// its members, as a majority of the nodes sees it
// (local.RabbitMQCluster.QueueLeader).
func (c *RabbitMQCluster) QueueLeader(ctx context.Context, vhost, name string) (string, []string, error) {
	return local.RabbitMQQueueLeader(ctx, c.viewers(), vhost, name)
}

// CheckHealth implements cluster.HealthChecker as the local runtime's
// cluster does: whole, and every quorum queue member running.
func (c *RabbitMQCluster) CheckHealth(ctx context.Context) error {
	nodes := make([]local.RabbitMQHealthViewer, len(c.nodes))
	for i, n := range c.nodes {
		nodes[i] = n
	}
	return local.RabbitMQCheckHealth(ctx, nodes)
}

// QuorumMembersDown lists the node's quorum queue members that are
// neither leader nor follower (see the local runtime's node).
func (n *RabbitMQNode) QuorumMembersDown(ctx context.Context) ([]string, error) {
	return local.RabbitMQQuorumMembersDown(ctx, n.eval)
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

// WaitQuorumQueueDurable waits until every member of quorum queue name
// has saved the queue's registration (see RabbitMQService's method).
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
		if err := (&RabbitMQService{n.Service}).WaitQuorumQueueDurable(ctx, vhost, name); err != nil {
			return err
		}
	}
	return nil
}

// Stop implements cluster.Service: every node stops cleanly, at once.
func (c *RabbitMQCluster) Stop(ctx context.Context) error {
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Go(func() { errs[i] = n.Stop(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Close implements cluster.Service: every node's container removed.
func (c *RabbitMQCluster) Close() error {
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Go(func() { errs[i] = n.Close() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Start implements cluster.Service: the node's container started again,
// with its data, or, after a wipe, Rejoin.
func (n *RabbitMQNode) Start(ctx context.Context) error {
	n.wipeMu.Lock()
	wiped := n.wiped
	n.wipeMu.Unlock()
	if wiped {
		_, err := n.Rejoin(ctx)
		return err
	}
	return n.Service.Start(ctx)
}

// Restart implements cluster.Restarter: a clean stop, then Start.
func (n *RabbitMQNode) Restart(ctx context.Context) error {
	if err := n.Stop(ctx); err != nil {
		return fmt.Errorf("restart %s: %w", n.name, err)
	}
	return n.Start(ctx)
}

// Wipe implements cluster.Wiper: kill -9 (if the node runs), then its
// container removed with its data dir (its copy of the cluster's
// metadata, its classic queues and their messages, its quorum queues'
// Raft logs). Its configuration and cookie come back with the new
// container, as a pod's would. The node stays down until Rejoin or Start.
func (n *RabbitMQNode) Wipe(ctx context.Context) (string, error) {
	d, err := n.discard(ctx, rabbitMQDataDir)
	if err != nil {
		return "", err
	}
	n.wipeMu.Lock()
	n.wiped = true
	n.wipeMu.Unlock()
	return fmt.Sprintf("%s %s; disk wiped: %s (Mnesia, message stores, quorum queue logs; container removed)", n.name, d.what, d.disk), nil
}

// Rejoin implements cluster.Wiper as the local runtime's node does: a
// running peer forgets the old member (local.RabbitMQForget), a new
// container starts empty and joins by peer discovery, and once every node
// sees every node running, every quorum queue gets a member on it again
// (local.RabbitMQGrow).
func (n *RabbitMQNode) Rejoin(ctx context.Context) (string, error) {
	node := "rabbit@" + n.name
	var peers []local.RabbitMQPeer
	for _, p := range n.c.nodes {
		if p == n {
			continue
		}
		peers = append(peers, local.RabbitMQPeer{Name: p.name, Eval: p.eval, Up: func() bool {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			st, err := p.state(sctx)
			return err == nil && st.Running && !st.Paused
		}})
	}
	// A rejoin cut short after its start finds the node's new container
	// running: forgotten and started already (see the local runtime's).
	n.wipeMu.Lock()
	forgot := n.forgot + " (an earlier attempt)"
	n.wipeMu.Unlock()
	if st, err := n.state(ctx); err != nil || !st.Running {
		if forgot, err = local.RabbitMQForget(ctx, n.log, node, n.name, peers); err != nil {
			return "", fmt.Errorf("%s: rejoin: %w", n.name, err)
		}
		n.wipeMu.Lock()
		n.forgot = forgot
		n.wipeMu.Unlock()
		if err := n.Service.Start(ctx); err != nil {
			return "", fmt.Errorf("%s: rejoin: %w", n.name, err)
		}
	}
	n.wipeMu.Lock()
	n.wiped = false
	n.wipeMu.Unlock()
	if err := n.c.WaitWhole(ctx); err != nil {
		return "", fmt.Errorf("%s: rejoin: %w", n.name, err)
	}
	grown, err := local.RabbitMQGrow(ctx, n.eval, node, n.name)
	if err != nil {
		return "", fmt.Errorf("%s: rejoin: %w", n.name, err)
	}
	return fmt.Sprintf("%s; %s started empty in a new container and joined as a new member; %s", forgot, n.name, grown), nil
}

// URL is the AMQP URL of a client that dials addr.
func (n *RabbitMQNode) URL(addr string) string { return rabbitURL(addr) }

// writeConf replaces the node's cluster configuration file in its
// container.
func (n *RabbitMQNode) writeConf(ctx context.Context, conf string) error {
	id, err := n.containerID()
	if err != nil {
		return err
	}
	out, code, err := n.execOutput(ctx, id, []string{"sh", "-c", `printf '%s' "$1" >"$2"`, "sh", conf, rabbitMQConfDir + "/" + rabbitMQClusterConf})
	if err == nil && code != 0 {
		err = fmt.Errorf("exit %d: %s", code, strings.TrimSpace(out))
	}
	if err != nil {
		return fmt.Errorf("%s: write %s: %w", n.name, rabbitMQClusterConf, err)
	}
	return nil
}

// ClusterView is the node's own view of its cluster (see the local
// runtime's RabbitMQNode.ClusterView).
func (n *RabbitMQNode) ClusterView(ctx context.Context) (running, partitions []string, err error) {
	return local.RabbitMQClusterView(ctx, n.eval)
}

// QueueLeader is the node's view of quorum queue name in vhost.
func (n *RabbitMQNode) QueueLeader(ctx context.Context, vhost, name string) (string, []string, error) {
	return local.RabbitMQNodeQueueLeader(ctx, n.eval, vhost, name)
}

// WaitQuorumQueueDurable waits until the node saved quorum queue name's
// registration.
func (n *RabbitMQNode) WaitQuorumQueueDurable(ctx context.Context, vhost, name string) error {
	return (&RabbitMQService{n.Service}).WaitQuorumQueueDurable(ctx, vhost, name)
}

// eval runs erl_call inside the node's container (a hidden node: never
// a member) with the cluster's cookie. A paused container refuses the
// exec, which is what a frozen node's answer is: none.
func (n *RabbitMQNode) eval(ctx context.Context, expr string) (string, error) {
	id, err := n.containerID()
	if err != nil {
		return "", err
	}
	timeout := 5
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(1, int(time.Until(dl).Seconds()))
	}
	script := `e=$(command -v erl_call || ls /usr/lib/erlang/lib/erl_interface-*/bin/erl_call /usr/local/lib/erlang/lib/erl_interface-*/bin/erl_call 2>/dev/null | head -n1); ` +
		`[ -n "$e" ] || { echo "no erl_call in the image" >&2; exit 127; }; ` +
		`printf '%s\n' "$1" | "$e" -sname "$2" -c "$3" -h "$5" -timeout "$4" -e`
	// A name of its own for each call, as the local runtime's: -r's few
	// names collide when two questions reach a node at once.
	var b [8]byte
	_, _ = rand.Read(b[:])
	out, code, err := n.execOutput(ctx, id, []string{"sh", "-c", script, "sh", expr, "rabbit@" + n.name, n.c.cookie, strconv.Itoa(timeout), "dc_" + hex.EncodeToString(b[:])})
	if err != nil {
		return "", fmt.Errorf("erl_call in %s: %w", n.name, err)
	}
	out = strings.TrimSpace(out)
	if code != 0 {
		return "", fmt.Errorf("erl_call in %s: exit %d: %s", n.name, code, out)
	}
	return local.RabbitMQErlCallResult(out)
}

// execOutput runs cmd in container id and returns its output (stdout and
// stderr) and exit code.
func (s *Service) execOutput(ctx context.Context, id string, cmd []string) (string, int, error) {
	ex, err := s.rt.cli.ContainerExecCreate(ctx, id, container.ExecOptions{Cmd: cmd, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return "", 0, err
	}
	att, err := s.rt.cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return "", 0, err
	}
	var out bytes.Buffer
	done := make(chan struct{})
	go func() {
		_, _ = stdcopy.StdCopy(&out, &out, att.Reader)
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		att.Close()
		<-done
		return out.String(), 0, ctx.Err()
	}
	att.Close()
	for {
		in, err := s.rt.cli.ContainerExecInspect(ctx, ex.ID)
		if err != nil {
			return out.String(), 0, err
		}
		if !in.Running {
			return out.String(), in.ExitCode, nil
		}
		select {
		case <-ctx.Done():
			return out.String(), 0, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
