package broker

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaLeader is the address (host:port, as the broker advertises it) of
// the broker leading partition of cfg's topic now, for a fault aimed at
// whichever node leads ("broker:leader").
func KafkaLeader(ctx context.Context, cfg KafkaConfig, partition int32) (string, error) {
	cfg = cfg.withDefaults()
	cl, err := kgo.NewClient(cfg.clientOpts("admin")...)
	if err != nil {
		return "", fmt.Errorf("kafka leader: %w", err)
	}
	defer cl.Close()
	md, err := kadm.NewClient(cl).Metadata(ctx, cfg.Topic)
	if err != nil {
		return "", fmt.Errorf("kafka leader of %s/%d: %w", cfg.Topic, partition, err)
	}
	t, ok := md.Topics[cfg.Topic]
	if !ok || t.Err != nil {
		return "", fmt.Errorf("kafka leader of %s/%d: topic not in metadata (%v)", cfg.Topic, partition, t.Err)
	}
	p, ok := t.Partitions[partition]
	if !ok || p.Leader < 0 {
		return "", fmt.Errorf("kafka leader of %s/%d: no leader now", cfg.Topic, partition)
	}
	for _, b := range md.Brokers {
		if b.NodeID == p.Leader {
			return net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))), nil
		}
	}
	return "", fmt.Errorf("kafka leader of %s/%d: broker %d not in metadata", cfg.Topic, partition, p.Leader)
}
