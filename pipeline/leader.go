package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/pipeline/worker"
)

// queueLeader is a replicated RabbitMQ that can say which node leads a
// quorum queue.
type queueLeader interface {
	QueueLeader(ctx context.Context, vhost, queue string) (node string, members []string, err error)
}

// primaryNamer is a replicated database that names its primary node.
type primaryNamer interface{ Leader() string }

// Leader is the node of the run's replicated broker that leads now: the
// leader of the events topic's first partition (Kafka) or of the first
// subscription's queue (RabbitMQ). It is what a fault aimed at
// "broker:leader" hits (nemesis.Env.Leader). PostgreSQL's primary is not
// offered as a target: a fault on "postgres" already hits the primary,
// through the cluster that keeps track of which node that is.
func (r *Deployment) Leader(ctx context.Context, service string) (string, error) {
	if service == cluster.Postgres {
		return "", fmt.Errorf("%s has no leader to aim a fault at: a fault on %s hits its primary", service, service)
	}
	node, _, err := r.leader(ctx, service)
	return node, err
}

// leader is the node of a replicated service that leads now, as Leader
// has it, or PostgreSQL's primary, and what the node leads in words.
func (r *Deployment) leader(ctx context.Context, service string) (node, leads string, err error) {
	nodes := r.cl.Nodes(service)
	if len(nodes) == 0 {
		return "", "", fmt.Errorf("%s is not replicated: it has no leader to look up", service)
	}
	switch service {
	case cluster.Kafka:
		k := r.broker.Kafka()
		addr, err := broker.KafkaLeader(ctx, k, 0)
		if err != nil {
			return "", "", err
		}
		// Each node advertises its own link's address.
		for _, n := range nodes {
			if l := r.cl.Link(n.Name()); l != nil && l.Addr() == addr {
				return n.Name(), "partition 0 of " + k.Topic, nil
			}
		}
		return "", "", fmt.Errorf("kafka leader %s is none of the nodes' links", addr)
	case cluster.RabbitMQ:
		ql, ok := r.cl.Service(cluster.RabbitMQ).(queueLeader)
		if !ok || len(r.cfg.Subscriptions) == 0 {
			return "", "", fmt.Errorf("cannot look up the leader of a rabbitmq queue on this cluster")
		}
		q := r.broker.Qualify(r.cfg.Subscriptions[0])
		node, _, err := ql.QueueLeader(ctx, "/", q)
		return node, "queue " + q, err
	case cluster.Postgres:
		if p, ok := r.cl.Service(cluster.Postgres).(primaryNamer); ok {
			return p.Leader(), "primary", nil
		}
	}
	return "", "", fmt.Errorf("%s has no leader", service)
}

// SampleLeaders looks up the leader of every replicated service of the
// run (Leader) every interval until ctx ends, and records what it finds
// as leader ops (docs/history.md) when sampling starts and whenever the
// answer changes: an ok naming the node in value.target and what it
// leads in value.detail, or a fail naming the service, with the error,
// once per stretch without an answer. That is what the report's node
// time line shows leaders and leader changes from. Each look-up gets
// the interval twice over, so a frozen node delays the next sample
// rather than piling them up. It returns when ctx ends, at once for a
// run with nothing replicated.
func (r *Deployment) SampleLeaders(ctx context.Context, every time.Duration) {
	var services []string
	for _, s := range cluster.Names() {
		if len(r.cl.Nodes(s)) > 0 {
			services = append(services, s)
		}
	}
	if err := sampleLeaders(ctx, services, every, r.leader, r.rec); err != nil {
		r.log.Warn("record leader: sampling stopped", "err", err)
	}
}

// sampleLeaders is SampleLeaders with the look-up given: it returns nil
// when ctx ends, or the error recording an op.
func sampleLeaders(ctx context.Context, services []string, every time.Duration,
	lookup func(ctx context.Context, service string) (node, leads string, err error), rec *history.Recorder) error {
	if len(services) == 0 {
		return nil
	}
	last := map[string]string{} // the node last recorded, or "!" after a fail
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		for _, s := range services {
			lctx, cancel := context.WithTimeout(ctx, 2*every)
			node, leads, err := lookup(lctx, s)
			cancel()
			if ctx.Err() != nil {
				return nil
			}
			var rerr error
			switch {
			case err != nil && last[s] != "!":
				last[s] = "!"
				_, rerr = rec.Record(history.Fail, history.Leader, history.Value{Target: s, Error: err.Error()})
			case err == nil && last[s] != node:
				last[s] = node
				_, rerr = rec.Record(history.OK, history.Leader, history.Value{Target: node, Detail: leads})
			}
			if rerr != nil {
				return fmt.Errorf("record the leader of %s: %w", s, rerr)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Redeclare declares the run's RabbitMQ topology again (SetupBroker is
// idempotent) once a broker node has rejoined with an empty disk
// (nemesis.Env.Rejoined). Its cluster forgot the old node first, and
// RabbitMQ deletes a forgotten node's classic queues, with their
// bindings: a deployment then has them declared again, by definitions
// loaded at boot or by clients that declare on connecting, and this is
// that, for the subscriptions' queues and the witness alike. They come
// back empty: what they held stays lost, which the final read of the
// witness shows. A Kafka topic outlives any one node: nothing to do.
func (r *Deployment) Redeclare(ctx context.Context, node string) (string, error) {
	if r.broker.Kind != cluster.RabbitMQ {
		return "", nil
	}
	if err := worker.SetupBroker(ctx, r.broker); err != nil {
		return "", fmt.Errorf("declare the topology again: %w", err)
	}
	return "the run's RabbitMQ topology declared again", nil
}
