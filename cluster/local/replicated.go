package local

import (
	"fmt"

	"github.com/deliverycheck/deliverycheck/cluster/netns"
)

// ReplicatedOptions are what every replicated local service gets (a
// Kafka or RabbitMQ cluster): the run's network, and per node its name and
// the address clients are told to dial.
type ReplicatedOptions struct {
	Options
	// Network holds one namespace per node (cluster/netns): every node
	// listens on the same ports in its own namespace, and a partition
	// between nodes is an iptables rule there, real to the servers.
	Network *netns.Network
	// Nodes are the nodes' names, nodes of Network, e.g. kafka-0,
	// kafka-1, kafka-2. A node's name is also its host name inside every
	// namespace.
	Nodes []string
	// Advertise is, per node, the host:port clients dial for it: the
	// listen address of the node's proxy link on the host, so every client
	// goes through that node's link.
	Advertise []string
}

func (o ReplicatedOptions) check(service string) error {
	if o.Network == nil {
		return fmt.Errorf("%s: replicated: no network", service)
	}
	if len(o.Nodes) < 2 || len(o.Advertise) != len(o.Nodes) {
		return fmt.Errorf("%s: replicated: %d nodes, %d advertised addresses (want 2 or more, one each)", service, len(o.Nodes), len(o.Advertise))
	}
	return nil
}
