package broker

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaBacklog is how many records of cfg's events topic the consumer
// group has not committed past yet (its lag, summed over partitions). A
// group that never committed counts everything from the log start.
func KafkaBacklog(ctx context.Context, cfg KafkaConfig, group string) (int64, error) {
	cfg = cfg.withDefaults()
	cl, err := kgo.NewClient(cfg.clientOpts("backlog")...)
	if err != nil {
		return 0, fmt.Errorf("kafka backlog: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, cfg.Topic)
	if err != nil {
		return 0, fmt.Errorf("kafka backlog: end offsets: %w", err)
	}
	starts, err := adm.ListStartOffsets(ctx, cfg.Topic)
	if err != nil {
		return 0, fmt.Errorf("kafka backlog: start offsets: %w", err)
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return 0, fmt.Errorf("kafka backlog: committed offsets: %w", err)
	}
	var total int64
	var ferr error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			ferr = o.Err
			return
		}
		from := int64(0)
		if s, ok := starts.Lookup(o.Topic, o.Partition); ok {
			from = s.Offset
		}
		if c, ok := committed.Lookup(o.Topic, o.Partition); ok && c.Err == nil && c.At >= 0 {
			from = c.At
		}
		if o.Offset > from {
			total += o.Offset - from
		}
	})
	if ferr != nil {
		return 0, fmt.Errorf("kafka backlog: %w", ferr)
	}
	return total, nil
}

// RabbitBacklog is how many messages wait in the subscription's queue,
// ready for delivery. Unacked deliveries are not counted (AMQP does not
// expose them); a drain watches consumer progress for those.
func RabbitBacklog(ctx context.Context, cfg RabbitConfig, queue string) (int64, error) {
	cfg = cfg.withDefaults()
	conn, err := dialRabbit(ctx, cfg, "backlog")
	if err != nil {
		return 0, fmt.Errorf("rabbitmq backlog: %w", err)
	}
	defer conn.close()
	stop := context.AfterFunc(ctx, conn.kill)
	defer stop()
	ch, err := conn.conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("rabbitmq backlog: %w", err)
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum})
	if err != nil {
		return 0, fmt.Errorf("rabbitmq backlog: inspect %s: %w", queue, err)
	}
	return int64(q.Messages), nil
}
