package pipeline

import (
	"context"
	"fmt"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/cluster"
)

// queueLeader is a replicated RabbitMQ that can say which node leads a
// quorum queue.
type queueLeader interface {
	QueueLeader(ctx context.Context, vhost, queue string) (node string, members []string, err error)
}

// Leader is the node of the run's replicated broker that leads now: the
// leader of the events topic's first partition (Kafka) or of the first
// subscription's queue (RabbitMQ). It is what a fault aimed at
// "broker:leader" hits (nemesis.Env.Leader).
func (r *Deployment) Leader(ctx context.Context, service string) (string, error) {
	nodes := r.cl.Nodes(service)
	if len(nodes) == 0 {
		return "", fmt.Errorf("%s is not replicated: it has no leader to look up", service)
	}
	switch service {
	case cluster.Kafka:
		addr, err := broker.KafkaLeader(ctx, r.broker.Kafka(), 0)
		if err != nil {
			return "", err
		}
		// Each node advertises its own link's address.
		for _, n := range nodes {
			if l := r.cl.Link(n.Name()); l != nil && l.Addr() == addr {
				return n.Name(), nil
			}
		}
		return "", fmt.Errorf("kafka leader %s is none of the nodes' links", addr)
	case cluster.RabbitMQ:
		ql, ok := r.cl.Service(cluster.RabbitMQ).(queueLeader)
		if !ok || len(r.cfg.Subscriptions) == 0 {
			return "", fmt.Errorf("cannot look up the leader of a rabbitmq queue on this cluster")
		}
		node, _, err := ql.QueueLeader(ctx, "/", r.broker.Qualify(r.cfg.Subscriptions[0]))
		return node, err
	}
	return "", fmt.Errorf("%s has no leader", service)
}
