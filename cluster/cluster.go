package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sync/errgroup"

	"github.com/deliverycheck/deliverycheck/cluster/containers"
	"github.com/deliverycheck/deliverycheck/cluster/freeport"
	"github.com/deliverycheck/deliverycheck/cluster/link"
	"github.com/deliverycheck/deliverycheck/cluster/local"
	"github.com/deliverycheck/deliverycheck/cluster/netns"
	"github.com/deliverycheck/deliverycheck/process/guard"
)

// Both runtimes have every optional ability today; an external runtime
// (servers someone else runs) would have fewer.
var (
	_ fullService       = (*local.Postgres)(nil)
	_ fullService       = (*local.PostgresCluster)(nil)
	_ fullService       = (*local.PostgresNode)(nil)
	_ Failoverer        = (*local.PostgresCluster)(nil)
	_ fullService       = (*local.Kafka)(nil)
	_ fullService       = (*local.RabbitMQ)(nil)
	_ fullService       = (*containers.Service)(nil)
	_ fullService       = (*containers.KafkaNode)(nil)
	_ Wiper             = (*containers.KafkaNode)(nil)
	_ Service           = (*containers.KafkaCluster)(nil)
	_ Versioner         = (*containers.KafkaCluster)(nil)
	_ ReplicationPorter = (*containers.KafkaCluster)(nil)
	_ fullService       = (*containers.RabbitMQNode)(nil)
	_ Wiper             = (*containers.RabbitMQNode)(nil)
	_ Service           = (*containers.RabbitMQCluster)(nil)
	_ Versioner         = (*containers.RabbitMQCluster)(nil)
	// Replicated services: each node has every ability, the cluster as
	// a whole none of the faults (a fault targets a node).
	_ fullService = (*local.KafkaNode)(nil)
	_ PIDer       = (*local.KafkaNode)(nil)
	_ Wiper       = (*local.KafkaNode)(nil)
	_ Service     = (*local.KafkaCluster)(nil)
	_ Versioner   = (*local.KafkaCluster)(nil)
	_ PIDer       = (*local.KafkaCluster)(nil)
	_ fullService = (*local.RabbitMQNode)(nil)
	_ PIDer       = (*local.RabbitMQNode)(nil)
	_ Wiper       = (*local.RabbitMQNode)(nil)
	_ Service     = (*local.RabbitMQCluster)(nil)
	_ Versioner   = (*local.RabbitMQCluster)(nil)
	_ PIDer       = (*local.RabbitMQCluster)(nil)
)

// A replicated service as a whole tells when it has recovered from the
// loss of a node, which a rolling restart waits for.
var (
	_ HealthChecker = (*local.KafkaCluster)(nil)
	_ HealthChecker = (*local.RabbitMQCluster)(nil)
	_ HealthChecker = (*containers.KafkaCluster)(nil)
	_ HealthChecker = (*containers.RabbitMQCluster)(nil)
)

type fullService interface {
	Service
	Killer
	Pauser
	Restarter
	LogFiler
	Versioner
}

// Service names, as scenarios and reports spell them.
const (
	Postgres = "postgres"
	Kafka    = "kafka"
	RabbitMQ = "rabbitmq"
)

// Names lists every service a cluster can hold.
func Names() []string { return []string{Postgres, Kafka, RabbitMQ} }

// Config says which services a cluster runs and how.
type Config struct {
	// Runtime is "local" (child processes), "containers" (testcontainers
	// on Docker or Podman) or "auto" (see [ResolveRuntime]); "" is "local".
	Runtime string
	// Images overrides the containers runtime's image per service name
	// (e.g. "postgres": "postgres:17"); see containers.DefaultImage.
	Images map[string]string
	// Services to start, overriding the default of all three.
	Services []string
	// Keep leaves temp dirs (data, logs) on disk after Close.
	Keep bool
	// TempRoot is where temp dirs are made, overriding os.TempDir().
	TempRoot string
	// KafkaVersion overrides the default broker version.
	KafkaVersion string
	// Logger overrides slog.Default().
	Logger *slog.Logger
	// Nodes asks for replicated services: the number of nodes by service
	// name ("kafka": 3). Absent, or 1, is the single server of before.
	// Each node of a replicated service is a service of its own, named
	// <service>-<i> ("kafka-0"), behind its own proxy link of that name,
	// in its own network namespace (cluster/netns), so a fault can kill,
	// pause or cut off one node. As root; on the local runtime, or on the
	// containers runtime for Kafka and RabbitMQ (each node a container in
	// a holder's namespace on a network of the run: containers.Nodes).
	// "auto" picks the local runtime for what the containers one cannot
	// run.
	Nodes map[string]int
	// Standby adds a streaming standby to PostgreSQL: "async", or "sync"
	// (the primary's synchronous_standby_names names it and
	// synchronous_commit is remote_apply); "" is the single server. The
	// primary and the standby are nodes postgres-0 and postgres-1, each
	// in its own network namespace behind its own link; the database
	// link ("postgres", what ClientURL gives) points at the primary and
	// follows it through a failover ([Failoverer]). Local runtime only,
	// as root.
	Standby string
	// KafkaReplication overrides the topic settings of a replicated
	// Kafka (Nodes["kafka"] > 1); the zero value keeps the defaults.
	KafkaReplication KafkaReplication
}

// KafkaReplication is how a replicated Kafka keeps the topics a scenario
// writes; each zero field keeps the default (local.KafkaClusterOptions
// says which), so known-bad settings are asked for, never defaulted to.
type KafkaReplication struct {
	// Factor is default.replication.factor.
	Factor int
	// MinInsync is min.insync.replicas.
	MinInsync int
	// Unclean is unclean.leader.election.enable.
	Unclean bool
}

// Standby kinds ([Config.Standby]).
const (
	StandbyAsync = "async"
	StandbySync  = "sync"
)

// Cluster is a set of running services, each behind its own toxiproxy
// link. Clients of a run reach a service only through its link (see
// [Cluster.ClientURL]), so a nemesis can break any one connection path.
// The caller should call Close when finished, also on error paths.
type Cluster struct {
	runtime  string
	ctr      *containers.Runtime // nil on the local runtime
	links    *link.Server
	services map[string]Service
	urls     map[string]func(addr string) string
	// nodes are the nodes of each replicated service, each behind the
	// link of its own name; net is their network and guard removes it
	// if the harness dies (nil when nothing is replicated).
	nodes map[string][]Service
	net   *netns.Network
	guard *guard.Guard
	// ctrNodes, on the containers runtime, is the run's network and the
	// nodes' holder containers; net is its namespaces.
	ctrNodes *containers.Nodes
	// kafkaRepl is what the replicated Kafka was asked for.
	kafkaRepl KafkaReplication
}

// Start provisions and starts the configured services concurrently and
// returns once every one is ready. On error everything started is torn down.
func Start(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	names := cfg.Services
	if len(names) == 0 {
		names = Names()
	}
	if cfg.Runtime == "" {
		cfg.Runtime = Local
	}
	var eng *containers.Engine // found while resolving "auto"
	if cfg.Runtime == Auto {
		if containersCannot(cfg) != "" {
			cfg.Runtime = Local
		} else {
			cfg.Runtime, _, eng = resolveAuto(ctx, images(cfg, names))
		}
	}
	if cfg.Runtime != Local && cfg.Runtime != Containers {
		return nil, fmt.Errorf("cluster: unknown runtime %q (want %s, %s or %s)", cfg.Runtime, Local, Containers, Auto)
	}
	for _, n := range names {
		if !slices.Contains(Names(), n) {
			return nil, fmt.Errorf("cluster: unknown service %q (want one of %v)", n, Names())
		}
	}
	for n := range cfg.Images {
		if !slices.Contains(Names(), n) {
			return nil, fmt.Errorf("cluster: image for unknown service %q (want one of %v)", n, Names())
		}
	}
	replicated, err := checkNodes(cfg, names)
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		runtime:   cfg.Runtime,
		links:     link.NewServer(),
		services:  map[string]Service{},
		urls:      map[string]func(string) string{},
		nodes:     map[string][]Service{},
		kafkaRepl: cfg.KafkaReplication,
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close())
		}
	}()
	if cfg.Runtime == Containers {
		if c.ctr, err = containers.New(ctx, containers.Options{Engine: eng, Keep: cfg.Keep, TempRoot: cfg.TempRoot, Logger: cfg.Logger}); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	if len(replicated) > 0 {
		if c.ctr != nil {
			err = c.startContainerNodes(ctx, cfg, replicated)
		} else {
			err = c.startNetwork(ctx, cfg, replicated)
		}
		if err != nil {
			return nil, err
		}
	}
	opts := local.Options{Keep: cfg.Keep, TempRoot: cfg.TempRoot, Logger: cfg.Logger}
	for _, n := range names {
		if cfg.Nodes[n] > 1 {
			err = c.provisionReplicated(n, cfg.Nodes[n], opts, cfg)
		} else if n == Postgres && cfg.Standby != "" {
			err = c.provisionStandby(opts, cfg)
		} else {
			err = c.provision(n, opts, cfg)
		}
		if err != nil {
			return nil, err
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, s := range c.services {
		g.Go(func() error { return s.Start(gctx) })
	}
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	return c, nil
}

// addLink starts the link called name, not yet pointing anywhere. A link
// keeps its port across Refuse and Accept, so it takes one from freeport,
// which no outgoing connection can hold when it listens again; another
// process may have bound it meanwhile (freeport knows only its own), so a
// port in use is traded for the next, a few times.
func (c *Cluster) addLink(name string) (*link.Link, error) {
	var errs []error
	for range 5 {
		port, err := freeport.Take(1)
		if err != nil {
			return nil, fmt.Errorf("cluster: link %s: %w", name, err)
		}
		l, err := c.links.Add(name, "127.0.0.1:"+strconv.Itoa(port[0]), "127.0.0.1:1")
		if err == nil {
			return l, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, err
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// provision creates one service (not started) and the link in front of it.
func (c *Cluster) provision(name string, opts local.Options, cfg Config) error {
	l, err := c.addLink(name)
	if err != nil {
		return err
	}
	var s Service
	if c.ctr != nil {
		img := cfg.Images[name]
		switch name {
		case Postgres:
			pg, err := c.ctr.NewPostgres(img)
			if err != nil {
				return err
			}
			s, c.urls[name] = pg, pg.DSN
		case Kafka:
			k, err := c.ctr.NewKafka(img, l.Addr())
			if err != nil {
				return err
			}
			s, c.urls[name] = k, func(addr string) string { return addr }
		case RabbitMQ:
			r, err := c.ctr.NewRabbitMQ(img)
			if err != nil {
				return err
			}
			s, c.urls[name] = r, r.URL
		}
		c.services[name] = s
		return l.SetUpstream(s.Endpoint())
	}
	switch name {
	case Postgres:
		pg, err := local.NewPostgres(local.PostgresOptions{Options: opts})
		if err != nil {
			return err
		}
		s, c.urls[name] = pg, pg.DSN
	case Kafka:
		// The broker advertises the link's address, so every client,
		// including ones we don't write, goes through the proxy.
		k, err := local.NewKafka(local.KafkaOptions{Options: opts, Version: cfg.KafkaVersion, Advertise: l.Addr()})
		if err != nil {
			return err
		}
		s, c.urls[name] = k, func(addr string) string { return addr }
	case RabbitMQ:
		r, err := local.NewRabbitMQ(opts)
		if err != nil {
			return err
		}
		s, c.urls[name] = r, r.URL
	}
	c.services[name] = s
	return l.SetUpstream(s.Endpoint())
}

// containersCannot says what of cfg the containers runtime cannot run
// (a PostgreSQL standby; nodes of a service other than Kafka and
// RabbitMQ), "" if nothing:
// "auto" then means the local runtime.
func containersCannot(cfg Config) string {
	for n, count := range cfg.Nodes {
		if count > 1 && n != Kafka && n != RabbitMQ {
			return fmt.Sprintf("%d nodes of %s: the %s runtime replicates kafka and rabbitmq only (use the local runtime)", count, n, Containers)
		}
	}
	if cfg.Standby != "" {
		return fmt.Sprintf("a postgres standby: the %s runtime runs a single postgres (use the local runtime)", Containers)
	}
	return ""
}

// checkNodes refuses, before anything starts, a replicated service the
// cluster cannot run, naming what is missing, and returns the replicated
// services' node names.
func checkNodes(cfg Config, names []string) ([]string, error) {
	var nodes []string
	for _, n := range slices.Sorted(maps.Keys(cfg.Nodes)) {
		count := cfg.Nodes[n]
		switch {
		case !slices.Contains(Names(), n):
			return nil, fmt.Errorf("cluster: nodes for unknown service %q (want one of %v)", n, Names())
		case count < 0:
			return nil, fmt.Errorf("cluster: %s: %d nodes", n, count)
		case count <= 1:
			continue
		case !slices.Contains(names, n):
			return nil, fmt.Errorf("cluster: %d nodes of %s, which the cluster does not run", count, n)
		case n == Postgres:
			return nil, fmt.Errorf("cluster: postgres runs one primary; a standby is its own setting, not nodes")
		case cfg.Runtime == Containers && containersCannot(Config{Nodes: map[string]int{n: count}}) != "":
			return nil, fmt.Errorf("cluster: %s", containersCannot(Config{Nodes: map[string]int{n: count}}))
		case cfg.Runtime != Local && cfg.Runtime != Containers:
			return nil, fmt.Errorf("cluster: %d nodes of %s: the %s runtime runs single nodes only (use the local runtime)", count, n, cfg.Runtime)
		}
		for i := range count {
			nodes = append(nodes, NodeName(n, i))
		}
	}
	if cfg.Standby != "" {
		switch {
		case cfg.Standby != StandbyAsync && cfg.Standby != StandbySync:
			return nil, fmt.Errorf("cluster: standby %q (want %s or %s)", cfg.Standby, StandbyAsync, StandbySync)
		case !slices.Contains(names, Postgres):
			return nil, fmt.Errorf("cluster: a %s standby of postgres, which the cluster does not run", cfg.Standby)
		case cfg.Runtime != Local:
			return nil, fmt.Errorf("cluster: a postgres standby: the %s runtime runs a single postgres (use the local runtime)", cfg.Runtime)
		}
		nodes = append(nodes, NodeName(Postgres, 0), NodeName(Postgres, 1))
	}
	if cfg.KafkaReplication != (KafkaReplication{}) && cfg.Nodes[Kafka] <= 1 {
		return nil, fmt.Errorf("cluster: kafka replication settings %+v, but kafka is not replicated (set Nodes)", cfg.KafkaReplication)
	}
	if len(nodes) > 0 {
		if err := netns.Check(); err != nil {
			return nil, fmt.Errorf("cluster: replicated services need a network namespace per node: %w", err)
		}
	}
	return nodes, nil
}

// NodeName is the name of node i of service, as a fault targets it and as
// its link and host name are called: "kafka-0".
func NodeName(service string, i int) string { return service + "-" + strconv.Itoa(i) }

// startNetwork makes the namespaces of every replicated service's nodes,
// with a guard that removes them if the harness dies.
func (c *Cluster) startNetwork(ctx context.Context, cfg Config, nodes []string) error {
	g, err := guard.Start(guard.Options{})
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	c.guard = g
	c.net, err = netns.New(ctx, netns.Options{Nodes: nodes, Guard: g, Logger: cfg.Logger})
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return nil
}

// A replicated Kafka's inter-broker listener is what cut-replication
// cuts.
var _ ReplicationPorter = (*local.KafkaCluster)(nil)

// startContainerNodes makes the run's network on the containers runtime:
// a holder container per node, whose namespaces partitions are made in
// (containers.Nodes).
func (c *Cluster) startContainerNodes(ctx context.Context, cfg Config, nodes []string) error {
	var ni []containers.NodeImage
	for _, node := range nodes {
		svc := node[:strings.LastIndexByte(node, '-')]
		img := cfg.Images[svc]
		if img == "" {
			img = containers.DefaultImage(svc)
		}
		ni = append(ni, containers.NodeImage{Node: node, Image: img})
	}
	var err error
	if c.ctrNodes, err = c.ctr.NewNodes(ctx, ni); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	c.net = c.ctrNodes.Network()
	return nil
}

// provisionReplicated creates a replicated service of n nodes (not
// started) and one link per node.
func (c *Cluster) provisionReplicated(name string, n int, opts local.Options, cfg Config) error {
	ro := local.ReplicatedOptions{Options: opts, Network: c.net}
	var links []*link.Link
	for i := range n {
		l, err := c.addLink(NodeName(name, i))
		if err != nil {
			return err
		}
		links = append(links, l)
		ro.Nodes = append(ro.Nodes, NodeName(name, i))
		ro.Advertise = append(ro.Advertise, l.Addr())
	}
	var nodes []Service
	switch {
	case name == Kafka && c.ctr != nil:
		r := cfg.KafkaReplication
		k, err := c.ctr.NewKafkaCluster(c.ctrNodes, cfg.Images[name], local.KafkaClusterOptions{
			ReplicatedOptions: ro,
			ReplicationFactor: r.Factor, MinInsyncReplicas: r.MinInsync, UncleanLeaderElection: r.Unclean,
		})
		if err != nil {
			return err
		}
		for _, node := range k.Nodes() {
			nodes = append(nodes, node)
		}
		c.services[name], c.urls[name] = k, func(addr string) string { return addr }
	case name == Kafka:
		r := cfg.KafkaReplication
		k, err := local.NewKafkaCluster(local.KafkaClusterOptions{
			ReplicatedOptions: ro, Version: cfg.KafkaVersion,
			ReplicationFactor: r.Factor, MinInsyncReplicas: r.MinInsync, UncleanLeaderElection: r.Unclean,
		})
		if err != nil {
			return err
		}
		for _, node := range k.Nodes() {
			nodes = append(nodes, node)
		}
		c.services[name], c.urls[name] = k, func(addr string) string { return addr }
	case name == RabbitMQ && c.ctr != nil:
		r, err := c.ctr.NewRabbitMQCluster(c.ctrNodes, cfg.Images[name], ro.Nodes)
		if err != nil {
			return err
		}
		for _, node := range r.Nodes() {
			nodes = append(nodes, node)
		}
		c.services[name], c.urls[name] = r, r.URL
	case name == RabbitMQ:
		r, err := local.NewRabbitMQCluster(local.RabbitMQClusterOptions{ReplicatedOptions: ro})
		if err != nil {
			return err
		}
		for _, node := range r.Nodes() {
			nodes = append(nodes, node)
		}
		c.services[name], c.urls[name] = r, r.URL
	default:
		return fmt.Errorf("cluster: %s cannot be replicated", name)
	}
	c.nodes[name] = nodes
	for i, node := range nodes {
		if err := links[i].SetUpstream(node.Endpoint()); err != nil {
			return err
		}
	}
	return nil
}

// provisionStandby creates PostgreSQL as a primary and a standby (not
// started), a link per node, and the database link, which points at the
// primary and follows it through a failover.
func (c *Cluster) provisionStandby(opts local.Options, cfg Config) error {
	db, err := c.addLink(Postgres)
	if err != nil {
		return err
	}
	ro := local.ReplicatedOptions{Options: opts, Network: c.net}
	var links []*link.Link
	for i := range 2 {
		l, err := c.addLink(NodeName(Postgres, i))
		if err != nil {
			return err
		}
		links = append(links, l)
		ro.Nodes = append(ro.Nodes, NodeName(Postgres, i))
		ro.Advertise = append(ro.Advertise, l.Addr())
	}
	pg, err := local.NewPostgresCluster(local.PostgresClusterOptions{
		ReplicatedOptions: ro,
		Sync:              cfg.Standby == StandbySync,
		Promoted: func(ctx context.Context, node, endpoint string) (string, error) {
			if err := db.SetUpstream(endpoint); err != nil {
				return "", err
			}
			return fmt.Sprintf("link %s → %s", Postgres, node), nil
		},
	})
	if err != nil {
		return err
	}
	c.services[Postgres], c.urls[Postgres] = pg, pg.DSN
	for i, n := range pg.Nodes() {
		c.nodes[Postgres] = append(c.nodes[Postgres], n)
		if err := links[i].SetUpstream(n.Endpoint()); err != nil {
			return err
		}
	}
	return db.SetUpstream(pg.Endpoint())
}

// Nodes returns the nodes of a replicated service, in order, or nil for a
// single-node one. Each is a Service of its own, behind the link of its
// name, and can be killed, paused or restarted alone.
func (c *Cluster) Nodes(name string) []Service { return c.nodes[name] }

// KafkaReplication is the topic settings the replicated Kafka was asked
// for ([Config.KafkaReplication]), zero fields standing for defaults.
func (c *Cluster) KafkaReplication() KafkaReplication { return c.kafkaRepl }

// Network is the network namespaces of the replicated services' nodes, or
// nil when nothing is replicated: partitions between nodes are made there.
func (c *Cluster) Network() *netns.Network { return c.net }

// Runtime names the runtime that provisioned the cluster ("local" or
// "containers").
func (c *Cluster) Runtime() string { return c.runtime }

// Service returns the named service, or the named node of a replicated
// one ("kafka-1"), or nil if the cluster does not run it.
func (c *Cluster) Service(name string) Service { return c.lookup(name) }

// Services returns the running services sorted by name.
func (c *Cluster) Services() []Service {
	out := make([]Service, 0, len(c.services))
	for _, s := range c.services {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out
}

// Link returns the proxy link in front of the named service, or nil.
func (c *Cluster) Link(name string) *link.Link { return c.links.Link(name) }

// Links returns the link server, to heal everything at once.
func (c *Cluster) Links() *link.Server { return c.links }

// ClientURL is what a client of the run dials to reach the named service
// through its link: a PostgreSQL DSN, a Kafka seed broker (host:port) or
// an AMQP URL. It is "" for a service the cluster does not run. For a
// PostgreSQL with a standby it is the database link's, which follows the
// primary through a failover. For a replicated Kafka or RabbitMQ it is
// every node's, through the node's own link, in node order and
// comma-separated ([Cluster.NodeURLs] joined): seed brokers for Kafka,
// and for RabbitMQ the address list a client fails over along.
func (c *Cluster) ClientURL(name string) string {
	u, l := c.urls[name], c.links.Link(name)
	if u != nil && l != nil {
		return u(l.Addr())
	}
	return strings.Join(c.NodeURLs(name), ",")
}

// NodeURLs is, for a replicated service, what a client dials to reach
// each node through its own link, in node order; nil otherwise.
func (c *Cluster) NodeURLs(name string) []string {
	u := c.urls[name]
	if u == nil || len(c.nodes[name]) == 0 {
		return nil
	}
	var out []string
	for i := range c.nodes[name] {
		if l := c.links.Link(NodeName(name, i)); l != nil {
			out = append(out, u(l.Addr()))
		}
	}
	return out
}

// Versions maps each service's name to its exact server version, for the
// services that report one ([Versioner]).
func (c *Cluster) Versions() map[string]string {
	out := map[string]string{}
	for n, s := range c.services {
		if v, ok := s.(Versioner); ok {
			out[n] = v.Version()
		}
	}
	return out
}

// PIDs lists every live process of every service, for cleanup checks.
func (c *Cluster) PIDs() []int {
	var out []int
	for _, s := range c.services {
		if p, ok := s.(PIDer); ok {
			out = append(out, p.PIDs()...)
		}
	}
	return out
}

// Close tears everything down: links first (so clients see the services
// vanish together), then every service. It reports every failure, not just
// the first, and is safe to call more than once.
func (c *Cluster) Close() error {
	errs := []error{c.links.Close()}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range c.services {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Close(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// The nodes' holders and network after the nodes, before the
	// runtime's guard goes.
	if c.ctrNodes != nil {
		errs = append(errs, c.ctrNodes.Close())
		c.ctrNodes, c.net = nil, nil
	}
	if c.ctr != nil {
		errs = append(errs, c.ctr.Close())
		c.ctr = nil
	}
	// The network goes after every process that lived in it.
	if c.net != nil {
		errs = append(errs, c.net.Close())
		c.net = nil
	}
	if c.guard != nil {
		errs = append(errs, c.guard.Close())
		c.guard = nil
	}
	return errors.Join(errs...)
}
