package local

import (
	"context"
	"errors"
	"fmt"
)

// KafkaClusterOptions configure a replicated Kafka cluster.
type KafkaClusterOptions struct {
	ReplicatedOptions
	// Version is the Apache Kafka release, as in [KafkaOptions].
	Version string
	// HeapMB is each JVM's maximum heap in MiB.
	HeapMB int
}

// KafkaCluster is a KRaft cluster of combined broker+controller nodes,
// each in its own network namespace. It is a cluster.Service (Start waits
// until every node serves and the controller quorum has a leader); its
// nodes are services of their own, which a fault can target one by one.
type KafkaCluster struct {
	nodes []*KafkaNode
}

// KafkaNode is one node of a [KafkaCluster].
type KafkaNode struct{ name string }

// NewKafkaCluster creates a stopped cluster.
func NewKafkaCluster(o KafkaClusterOptions) (*KafkaCluster, error) {
	if err := o.check("kafka"); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("kafka: %d nodes: %w", len(o.Nodes), errors.ErrUnsupported)
}

// Nodes are the cluster's nodes, in order.
func (k *KafkaCluster) Nodes() []*KafkaNode { return k.nodes }

func (k *KafkaCluster) Name() string                    { return "kafka" }
func (k *KafkaCluster) Start(ctx context.Context) error { return errors.ErrUnsupported }
func (k *KafkaCluster) Stop(ctx context.Context) error  { return errors.ErrUnsupported }
func (k *KafkaCluster) Endpoint() string                { return "" }
func (k *KafkaCluster) Close() error                    { return nil }

func (n *KafkaNode) Name() string                    { return n.name }
func (n *KafkaNode) Start(ctx context.Context) error { return errors.ErrUnsupported }
func (n *KafkaNode) Stop(ctx context.Context) error  { return errors.ErrUnsupported }
func (n *KafkaNode) Endpoint() string                { return "" }
func (n *KafkaNode) Close() error                    { return nil }
