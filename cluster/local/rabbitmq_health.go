package local

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
)

// CheckHealth implements cluster.HealthChecker: nil once the cluster has
// recovered from the loss of a node, as a rolling restart waits for it
// before it restarts the next one (RabbitMQ's own advice for a rolling
// upgrade is the same: wait until the quorum queues have their members
// back, rabbitmq-upgrade await_online_quorum_plus_one). The cluster must
// be whole ([RabbitMQCluster.CheckWhole]), and on every node each quorum
// queue with a member there must have that member running as its leader
// or a follower (a member still recovering its log is neither).
// Otherwise the error says what each node sees.
func (c *RabbitMQCluster) CheckHealth(ctx context.Context) error {
	nodes := make([]RabbitMQHealthViewer, len(c.nodes))
	for i, n := range c.nodes {
		nodes[i] = n
	}
	return RabbitMQCheckHealth(ctx, nodes)
}

// RabbitMQHealthViewer is a node that can also list its quorum queue
// members that do not run.
type RabbitMQHealthViewer interface {
	RabbitMQViewer
	QuorumMembersDown(ctx context.Context) ([]string, error)
}

// RabbitMQCheckHealth is [RabbitMQCluster.CheckHealth] over any
// runtime's nodes.
func RabbitMQCheckHealth(ctx context.Context, nodes []RabbitMQHealthViewer) error {
	viewers := make([]RabbitMQViewer, len(nodes))
	for i, n := range nodes {
		viewers[i] = n
	}
	if err := RabbitMQCheckWhole(ctx, viewers); err != nil {
		return err
	}
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, viewTimeout)
			defer cancel()
			down, err := n.QuorumMembersDown(ctx)
			if err == nil && len(down) > 0 {
				err = fmt.Errorf("quorum queue members not running: %s", strings.Join(down, ", "))
			}
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w", n.Name(), err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// QuorumMembersDown lists the quorum queues (of every vhost) that have a
// member on the node whose member is neither their leader nor a
// follower, each as "queue=state" (state as Ra reports it: candidate,
// recovering, noproc when the member does not run). A node's members
// take a moment to start after the node does, and longer to recover a
// long log.
func (n *RabbitMQNode) QuorumMembersDown(ctx context.Context) ([]string, error) {
	return RabbitMQQuorumMembersDown(ctx, n.eval)
}

// RabbitMQQuorumMembersDown is QuorumMembersDown of any runtime's node,
// asked through eval.
func RabbitMQQuorumMembersDown(ctx context.Context, eval RabbitMQEval) ([]string, error) {
	out, err := eval(ctx, `{_, States} = rabbit_quorum_queue:all_replica_states(), `+
		`lists:flatten(lists:join(",", [binary_to_list(element(4, amqqueue:get_name(Q))) ++ "=" ++ atom_to_list(S) || `+
		`Q <- rabbit_amqqueue:list_local_quorum_queues(), `+
		`S <- [maps:get(element(1, amqqueue:get_pid(Q)), States, noproc)], `+
		`S =/= leader, S =/= follower])).`)
	if err != nil {
		return nil, err
	}
	if out == "" {
		return nil, nil
	}
	return strings.Split(out, ","), nil
}
