package local

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// CheckHealth implements cluster.HealthChecker: nil once the cluster has
// recovered from the loss of a node, as a rolling restart waits for it
// before it restarts the next one. Every node must answer, list every
// node as a live broker, and see every partition of every topic with all
// its replicas in sync (no under-replicated partition: a node restarted
// has caught up with the leaders), and the controller quorum must have a
// leader. Each node is asked directly, not through its link. Otherwise
// the error says what each node sees.
func (c *KafkaCluster) CheckHealth(ctx context.Context) error {
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Go(func() {
			if err := n.checkInSync(ctx, len(c.nodes)); err != nil {
				errs[i] = fmt.Errorf("%s: %w", n.name, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	leader, err := c.nodes[0].QuorumLeader(ctx)
	if err != nil {
		return err
	}
	if leader < 0 {
		return errors.New("kafka: controller quorum has no leader")
	}
	return nil
}

// checkInSync asks the node for its metadata of every topic: it must
// list nodes live brokers and no partition whose in-sync replicas are
// fewer than its replicas.
func (n *KafkaNode) checkInSync(ctx context.Context, nodes int) error {
	return KafkaNodeInSync(ctx, n.Endpoint(), nodes)
}

// KafkaNodeInSync is a node's half of CheckHealth for any runtime's
// node: the broker at addr, asked alone, lists nodes live brokers and no
// partition whose in-sync replicas are fewer than its replicas.
func KafkaNodeInSync(ctx context.Context, addr string, nodes int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTimeout(time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	req := kmsg.NewPtrMetadataRequest() // Topics nil: every topic
	r, err := cl.SeedBrokers()[0].Request(ctx, req)
	if err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	resp := r.(*kmsg.MetadataResponse)
	if len(resp.Brokers) != nodes {
		var ids []int32
		for _, b := range resp.Brokers {
			ids = append(ids, b.NodeID)
		}
		slices.Sort(ids)
		return fmt.Errorf("lists brokers %v, want %d", ids, nodes)
	}
	var behind []string
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return fmt.Errorf("metadata of %s: %w", *t.Topic, err)
		}
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil && !errors.Is(err, kerr.ReplicaNotAvailable) {
				behind = append(behind, fmt.Sprintf("%s/%d: %v", *t.Topic, p.Partition, err))
				continue
			}
			if len(p.ISR) < len(p.Replicas) {
				behind = append(behind, fmt.Sprintf("%s/%d in sync %v of %v", *t.Topic, p.Partition, p.ISR, p.Replicas))
			}
		}
	}
	if len(behind) > 0 {
		slices.Sort(behind)
		more := ""
		if len(behind) > 5 {
			more = fmt.Sprintf(" (and %d more)", len(behind)-5)
			behind = behind[:5]
		}
		return fmt.Errorf("under-replicated: %s%s", strings.Join(behind, ", "), more)
	}
	return nil
}
