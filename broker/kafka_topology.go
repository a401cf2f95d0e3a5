package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// SetupKafka creates cfg's events topic and its dead-letter topic (same
// partition count, the brokers' default replication factor: 1 on a single
// node, 3 on a three-node cluster) and waits until every partition
// of both has a leader, so the first publish does not race the topic's
// creation. Topics that exist already are left as they are (a warning is
// logged if the partition count differs).
func SetupKafka(ctx context.Context, cfg KafkaConfig) error {
	cfg = cfg.withDefaults()
	return SetupKafkaTopics(ctx, cfg, cfg.Topic, cfg.DLQTopic())
}

// SetupKafkaTopics creates topics as [SetupKafka] creates the events
// topic (cfg's partition count, the brokers' default replication) and
// waits until every partition of each is served: the transactional
// stage's output topics are made this way.
func SetupKafkaTopics(ctx context.Context, cfg KafkaConfig, topics ...string) error {
	cfg = cfg.withDefaults()
	if len(cfg.Seeds) == 0 {
		return errors.New("kafka setup: no seed brokers")
	}
	cl, err := kgo.NewClient(cfg.clientOpts("admin")...)
	if err != nil {
		return fmt.Errorf("kafka setup: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	resps, err := adm.CreateTopics(ctx, cfg.Partitions, -1, nil, topics...)
	if err != nil {
		return fmt.Errorf("kafka setup: create topics: %w", err)
	}
	for _, r := range resps.Sorted() {
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("kafka setup: create topic %s: %w (%s)", r.Topic, r.Err, r.ErrMessage)
		}
	}
	// Creation is asynchronous in the broker: metadata names a leader
	// before that broker has loaded the partition, and a produce in
	// between fails with NOT_LEADER_OR_FOLLOWER. An acks=all producer
	// retries that; an acks=0 one never hears of it and loses the
	// records. So wait until every partition answers ListOffsets, which
	// the leader serves from the loaded log.
	for {
		details, err := adm.ListTopics(ctx, topics...)
		if err == nil {
			err = kafkaTopicsReady(details, topics, cfg.Partitions, cfg.Logger)
		}
		if err == nil {
			err = kafkaPartitionsServed(ctx, adm, topics)
		}
		if err == nil {
			return nil
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("kafka setup: topics not ready: %w (last: %w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// kafkaTopicsReady says why topics are not all usable yet, or nil.
func kafkaTopicsReady(details kadm.TopicDetails, topics []string, partitions int32, log *slog.Logger) error {
	for _, name := range topics {
		d, ok := details[name]
		switch {
		case !ok:
			return fmt.Errorf("topic %s not in metadata", name)
		case d.Err != nil:
			return fmt.Errorf("topic %s: %w", name, d.Err)
		case len(d.Partitions) == 0:
			return fmt.Errorf("topic %s has no partitions yet", name)
		}
		if n := int32(len(d.Partitions)); n != partitions {
			log.Warn("kafka topic exists with another partition count", "topic", name, "partitions", n, "asked", partitions)
		}
		for _, p := range d.Partitions {
			if p.Err != nil || p.Leader < 0 {
				return fmt.Errorf("topic %s partition %d has no leader (%v)", name, p.Partition, p.Err)
			}
		}
	}
	return nil
}

// kafkaPartitionsServed says which partition's leader does not serve it
// yet, or nil.
func kafkaPartitionsServed(ctx context.Context, adm *kadm.Client, topics []string) error {
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return err
	}
	if err := ends.Error(); err != nil {
		return err
	}
	for _, name := range topics {
		if _, ok := ends[name]; !ok {
			return fmt.Errorf("topic %s: no end offsets yet", name)
		}
	}
	return nil
}
