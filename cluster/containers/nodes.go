package containers

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/deliverycheck/deliverycheck/cluster/netns"
)

// Replicated services' nodes, and why each node is two containers.
//
// A node's server is killed, paused and restarted by the nemesis, and a
// partition between nodes is iptables rules in the receiving node's
// network namespace. A container's namespace goes with it when it stops
// (the engine tears its network down and makes a new one on start), so
// rules put there would vanish with a kill, and a restarted node would be
// reachable again in the middle of a partition. So each node is a pair,
// as a Kubernetes pod is: a holder container (`sleep infinity`, which no
// fault touches) that owns the namespace, the node's address on the run's
// network, its host name and a hosts file naming every node; and the
// server's container, which joins the holder's namespace
// (NetworkMode container:<holder>) and can die and come back without the
// namespace changing. Node names resolve through the hosts file (the
// engine's network DNS is not on every Podman: CNI without dnsname has
// none), so every holder has a fixed address, picked from the subnet the
// engine gave the network.
//
// The host reaches every node at its address (the engine's bridge is the
// host's), so a node needs no published port: its proxy link forwards to
// the address, as the local runtime's links forward into namespaces. The
// fault rules go into the holders' namespaces through netns.Attach, by
// the holders' pids: the same Network, faults, evidence and heal as the
// local runtime's, entered from the host as Pumba does.
//
// Everything is labelled with the run and its owner, tracked by the
// watchdog (which removes the servers' containers before the holders, and
// the network after both), and swept by the next run if the harness died.

// LabelHolder marks a holder container; its value is the node's name.
const LabelHolder = "io.deliverycheck.holder"

// firstNodeHost is the host part of node 0's address in the run's
// network (node i has firstNodeHost+i): well clear of the gateway.
const firstNodeHost = 10

// Nodes is the run's network for replicated services: an engine network,
// one holder per node, and the netns.Network over the holders'
// namespaces. Close it after every node's service.
type Nodes struct {
	rt      *Runtime
	id      string // the engine network's
	name    string
	subnet  netip.Prefix
	gateway netip.Addr
	order   []string
	holders map[string]*holder
	net     *netns.Network
}

// holder is one node's holder container.
type holder struct {
	node string
	id   string
	addr netip.Addr
}

// NodeImage names a node and the image its holder runs (its server's
// image, which is there anyway: no other image need be present).
type NodeImage struct{ Node, Image string }

// NewNodes makes the run's network and starts a holder per node, then
// attaches their namespaces (see above). On error it removes what it made.
func (r *Runtime) NewNodes(ctx context.Context, nodes []NodeImage) (_ *Nodes, err error) {
	start := time.Now()
	n := &Nodes{rt: r, name: r.run + "-nodes", holders: map[string]*holder{}}
	defer func() {
		if err != nil {
			err = errors.Join(err, n.Close())
		}
	}()
	resp, err := r.cli.NetworkCreate(ctx, n.name, network.CreateOptions{
		Driver: "bridge",
		Labels: map[string]string{LabelRun: r.run, LabelOwner: r.own},
	})
	if err != nil {
		return nil, fmt.Errorf("containers: create network %s: %w", n.name, err)
	}
	n.id = resp.ID
	if err := r.g.TrackNetwork(n.id); err != nil {
		return nil, fmt.Errorf("containers: %w", err)
	}
	if err := n.readSubnet(ctx); err != nil {
		return nil, err
	}
	if n.subnet.Bits() > 32-6 || !n.subnet.Addr().Is4() {
		return nil, fmt.Errorf("containers: network %s: subnet %s too small for %d nodes", n.name, n.subnet, len(nodes))
	}
	var hosts []string
	addr := n.subnet.Addr()
	for range firstNodeHost {
		addr = addr.Next()
	}
	for _, ni := range nodes {
		h := &holder{node: ni.Node, addr: addr}
		n.holders[ni.Node] = h
		n.order = append(n.order, ni.Node)
		hosts = append(hosts, ni.Node+":"+addr.String())
		addr = addr.Next()
	}
	var attach []netns.AttachedNode
	for _, ni := range nodes {
		pid, err := n.startHolder(ctx, n.holders[ni.Node], ni.Image, hosts)
		if err != nil {
			return nil, fmt.Errorf("containers: holder of %s: %w", ni.Node, err)
		}
		attach = append(attach, netns.AttachedNode{Name: ni.Node, PID: pid, Addr: n.holders[ni.Node].addr})
	}
	n.net, err = netns.Attach(ctx, netns.AttachOptions{Nodes: attach, Subnet: n.subnet, Host: n.gateway, Guard: r.g, Logger: r.log})
	if err != nil {
		return nil, fmt.Errorf("containers: %w", err)
	}
	r.log.Info("nodes' network up", "network", n.name, "subnet", n.subnet, "nodes", len(nodes), "took", time.Since(start).Round(time.Millisecond))
	return n, nil
}

// readSubnet reads the subnet and gateway the engine gave the network.
func (n *Nodes) readSubnet(ctx context.Context) error {
	info, err := n.rt.cli.NetworkInspect(ctx, n.id, network.InspectOptions{})
	if err != nil {
		return fmt.Errorf("containers: inspect network %s: %w", n.name, err)
	}
	for _, c := range info.IPAM.Config {
		p, err := netip.ParsePrefix(c.Subnet)
		if err != nil || !p.Addr().Is4() {
			continue
		}
		n.subnet = p.Masked()
		if g, err := netip.ParseAddr(c.Gateway); err == nil {
			n.gateway = g
		} else {
			n.gateway = n.subnet.Addr().Next()
		}
		return nil
	}
	return fmt.Errorf("containers: network %s has no IPv4 subnet (IPAM %+v)", n.name, info.IPAM.Config)
}

// startHolder creates and starts h's container and returns its pid.
func (n *Nodes) startHolder(ctx context.Context, h *holder, image string, hosts []string) (int, error) {
	c, err := testcontainers.Run(ctx, image,
		testcontainers.WithName(n.rt.run+"-"+h.node+"-holder"),
		testcontainers.WithLabels(map[string]string{LabelRun: n.rt.run, LabelOwner: n.rt.own, LabelHolder: h.node}),
		testcontainers.WithEntrypoint("sleep"),
		testcontainers.WithCmd("infinity"),
		testcontainers.CustomizeRequestOption(func(req *testcontainers.GenericContainerRequest) error {
			req.Networks = []string{n.name}
			return nil
		}),
		testcontainers.WithEndpointSettingsModifier(func(es map[string]*network.EndpointSettings) {
			es[n.name] = &network.EndpointSettings{NetworkID: n.id, IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: h.addr.String()}}
		}),
		testcontainers.WithConfigModifier(func(c *container.Config) {
			c.Hostname = h.node
			c.ExposedPorts = nil
			// sleep as PID 1 ignores SIGTERM: a stop would wait out
			// the engine's grace period for nothing.
			c.StopSignal = "SIGKILL"
		}),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.ExtraHosts = hosts
			hc.PortBindings = nil
		}),
		testcontainers.WithWaitStrategy(wait.ForNop(func(context.Context, wait.StrategyTarget) error { return nil })),
		testcontainers.WithLogger(slogAdapter{n.rt.log}),
		providerOption,
	)
	if c != nil {
		h.id = c.GetContainerID()
		if gerr := n.rt.g.TrackContainer(h.id); gerr != nil {
			err = errors.Join(err, gerr)
		}
	}
	if err != nil {
		return 0, err
	}
	info, err := n.rt.cli.ContainerInspect(ctx, h.id)
	if err != nil {
		return 0, err
	}
	if info.State == nil || info.State.Pid <= 0 {
		return 0, fmt.Errorf("holder %s not running", h.id[:12])
	}
	return info.State.Pid, nil
}

// Network is the netns.Network over the nodes' namespaces, where
// partitions between nodes are made.
func (n *Nodes) Network() *netns.Network { return n.net }

// Subnet is the run's network prefix.
func (n *Nodes) Subnet() netip.Prefix { return n.subnet }

// Addr is node's address on the run's network.
func (n *Nodes) Addr(node string) netip.Addr {
	if h := n.holders[node]; h != nil {
		return h.addr
	}
	return netip.Addr{}
}

func (n *Nodes) holder(node string) (*holder, error) {
	h := n.holders[node]
	if h == nil || h.id == "" {
		return nil, fmt.Errorf("containers: no node %s in network %s", node, n.name)
	}
	return h, nil
}

// Close detaches the namespaces, then removes the holders (a holder with
// a server still in its namespace is refused by the engine: close the
// nodes' services first) and the network. Safe to call more than once.
func (n *Nodes) Close() error {
	var errs []error
	if n.net != nil {
		errs = append(errs, n.net.Close())
		n.net = nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, node := range n.order {
		h := n.holders[node]
		if h.id == "" {
			continue
		}
		err := n.rt.cli.ContainerRemove(ctx, h.id, container.RemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !client.IsErrNotFound(err) {
			errs = append(errs, fmt.Errorf("containers: remove holder of %s: %w", node, err))
			continue
		}
		_ = n.rt.g.UntrackContainer(h.id)
		h.id = ""
	}
	if n.id != "" {
		if err := n.rt.cli.NetworkRemove(ctx, n.id); err != nil && !client.IsErrNotFound(err) {
			errs = append(errs, fmt.Errorf("containers: remove network %s: %w", n.name, err))
		} else {
			_ = n.rt.g.UntrackNetwork(n.id)
			n.id = ""
		}
	}
	return errors.Join(errs...)
}
