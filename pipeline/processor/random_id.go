package processor

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/deliverycheck/deliverycheck/failpoint"
	"github.com/deliverycheck/deliverycheck/history"
)

// sessionRandomID is session for the known-bad RandomID: a plain
// transactional client under the process's random transactional.id in
// the group, auto-commit off; each batch's outputs are written in
// transactions until one commits, each sending the batch's offsets to
// the transaction by group id alone (groupIDOnly).
func (p *Processor) sessionRandomID(ctx context.Context) error {
	cl, err := p.plainTransactional(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	ids, err := topicIDs(ctx, cl, p.kafka.Topic)
	if err != nil {
		return fmt.Errorf("processor: %w", err)
	}
	return p.batches(ctx, cl.PollRecords, func(recs []*kgo.Record) error {
		tx := groupIDOnly{cl: cl, tid: p.tid, group: p.cfg.Group, topicIDs: ids, ins: recs}
		for committed := false; !committed; {
			var err error
			if committed, err = p.transact(ctx, tx, recs); err != nil {
				return err
			}
			if !committed && p.fp.Zombie() {
				return nil // replaced: no second try
			}
		}
		p.fp.Hit(failpoint.ProcessorAfterCommitBeforePoll, history.Value{Txn: p.lastTxn, TransactionalID: p.tid})
		return nil
	})
}

// groupIDOnly is a plain transactional client that sends the offsets
// after its inputs ins to each transaction it commits the way clients
// before KIP-447 did: AddOffsetsToTxn, then TxnOffsetCommit naming the
// group alone (generation -1, no member id), which the group coordinator
// accepts from any producer, whatever generation the group is in.
type groupIDOnly struct {
	cl         *kgo.Client
	tid, group string
	// topicIDs name the input topics in a TxnOffsetCommit of v6 and
	// later, which has ids, not names (kfake speaks it; Kafka 4.1 not).
	topicIDs map[string][16]byte
	ins      []*kgo.Record
}

// topicIDs looks up the ids of topics.
func topicIDs(ctx context.Context, cl *kgo.Client, topics ...string) (map[string][16]byte, error) {
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("topic ids: %w", err)
	}
	out := map[string][16]byte{}
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return nil, fmt.Errorf("topic ids: %w", err)
		}
		if t.Topic != nil {
			out[*t.Topic] = t.TopicID
		}
	}
	return out, nil
}

func (g groupIDOnly) begin() error { return g.cl.BeginTransaction() }
func (g groupIDOnly) produce(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	return g.cl.ProduceSync(ctx, rs...)
}
func (g groupIDOnly) end(ctx context.Context, commit bool) (bool, error) {
	if !commit {
		return plainClient{g.cl}.end(ctx, false)
	}
	if err := g.cl.Flush(ctx); err != nil {
		return false, err
	}
	if err := g.commitOffsets(ctx); err != nil {
		// The transaction cannot commit without its offsets: abort it.
		return false, errors.Join(err, g.cl.EndTransaction(ctx, kgo.TryAbort))
	}
	err := g.cl.EndTransaction(ctx, kgo.TryCommit)
	return err == nil, err
}

// commitOffsets adds the group to the open transaction and commits the
// offsets after ins in it, by group id alone.
func (g groupIDOnly) commitOffsets(ctx context.Context) error {
	id, epoch, err := g.cl.ProducerID(ctx)
	if err != nil {
		return fmt.Errorf("producer id: %w", err)
	}
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = g.tid, id, epoch, g.group
	addResp, err := add.RequestWith(ctx, g.cl)
	if err == nil {
		err = kerr.ErrorForCode(addResp.ErrorCode)
	}
	if err != nil {
		return fmt.Errorf("add offsets to transaction: %w", err)
	}
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = g.tid, g.group, id, epoch
	req.Generation, req.MemberID = -1, "" // the group alone: no generation to fence by
	next := map[string]map[int32]int64{}
	for _, r := range g.ins {
		if next[r.Topic] == nil {
			next[r.Topic] = map[int32]int64{}
		}
		next[r.Topic][r.Partition] = max(next[r.Topic][r.Partition], r.Offset+1)
	}
	for topic, parts := range next {
		t := kmsg.NewTxnOffsetCommitRequestTopic()
		t.Topic, t.TopicID = topic, g.topicIDs[topic]
		for part, off := range parts {
			pt := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			pt.Partition, pt.Offset, pt.LeaderEpoch = part, off, -1
			t.Partitions = append(t.Partitions, pt)
		}
		req.Topics = append(req.Topics, t)
	}
	resp, err := req.RequestWith(ctx, g.cl)
	if err != nil {
		return fmt.Errorf("commit offsets in the transaction: %w", err)
	}
	for _, t := range resp.Topics {
		for _, pt := range t.Partitions {
			if err := kerr.ErrorForCode(pt.ErrorCode); err != nil {
				return fmt.Errorf("commit offsets in the transaction: %s[%d]: %w", t.Topic, pt.Partition, err)
			}
		}
	}
	return nil
}
