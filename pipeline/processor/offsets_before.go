package processor

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/deliverycheck/deliverycheck/failpoint"
	"github.com/deliverycheck/deliverycheck/history"
)

// sessionOffsetsBefore is session for the known-bad OffsetsBefore: a
// plain transactional client in the group, auto-commit off; each batch's
// input offsets are committed first, outside any transaction, and its
// outputs then written in transactions until one commits. Once the
// offsets are committed nothing brings the inputs back: a crash before a
// transaction commits loses their outputs.
func (p *Processor) sessionOffsetsBefore(ctx context.Context) error {
	cl, err := p.plainTransactional(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	return p.batches(ctx, cl.PollRecords, func(recs []*kgo.Record) error {
		if err := cl.CommitRecords(ctx, recs...); err != nil {
			return fmt.Errorf("processor: commit offsets before the outputs: %w", err)
		}
		if err := p.untilCommitted(ctx, plainClient{cl}, recs); err != nil {
			return err
		}
		p.fp.Hit(failpoint.ProcessorAfterCommitBeforePoll, history.Value{Txn: p.lastTxn, TransactionalID: p.tid})
		return nil
	})
}
