package local

import (
	"context"
	"errors"
	"fmt"
)

// RabbitMQClusterOptions configure a replicated Kafka cluster.
type RabbitMQClusterOptions struct {
	ReplicatedOptions
}

// RabbitMQCluster is a RabbitMQ cluster, each node in its own network
// namespace with its own epmd. It is a cluster.Service (Start waits until
// every node runs and has joined); its nodes are services of their own,
// which a fault can target one by one.
type RabbitMQCluster struct {
	nodes []*RabbitMQNode
}

// RabbitMQNode is one node of a [RabbitMQCluster].
type RabbitMQNode struct{ name string }

// NewRabbitMQCluster creates a stopped cluster.
func NewRabbitMQCluster(o RabbitMQClusterOptions) (*RabbitMQCluster, error) {
	if err := o.check("rabbitmq"); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("rabbitmq: %d nodes: %w", len(o.Nodes), errors.ErrUnsupported)
}

// Nodes are the cluster's nodes, in order.
func (k *RabbitMQCluster) Nodes() []*RabbitMQNode { return k.nodes }

func (k *RabbitMQCluster) Name() string                    { return "rabbitmq" }
func (k *RabbitMQCluster) Start(ctx context.Context) error { return errors.ErrUnsupported }
func (k *RabbitMQCluster) Stop(ctx context.Context) error  { return errors.ErrUnsupported }
func (k *RabbitMQCluster) Endpoint() string                { return "" }
func (k *RabbitMQCluster) Close() error                    { return nil }

func (n *RabbitMQNode) Name() string                    { return n.name }
func (n *RabbitMQNode) Start(ctx context.Context) error { return errors.ErrUnsupported }
func (n *RabbitMQNode) Stop(ctx context.Context) error  { return errors.ErrUnsupported }
func (n *RabbitMQNode) Endpoint() string                { return "" }
func (n *RabbitMQNode) Close() error                    { return nil }

// URL is the AMQP URL of a client that dials addr (a node's link).
func (r *RabbitMQCluster) URL(addr string) string { return amqpURL(addr) }
