//go:build !buggy

package main

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// run processes batches until ctx ends, each in one transaction that
// also commits the batch's input offsets: GroupTransactSession sends the
// offsets to the transaction coordinator before it commits, so the
// outputs and the offsets are committed together or not at all. An
// aborted batch is read again (the session rewinds to the committed
// offsets). An error ends the process: the harness restarts it, and the
// restart's transactional.id fences what this one left open.
func (p *processor) run(ctx context.Context) error {
	sess, err := kgo.NewGroupTransactSession(p.clientOpts()...)
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	defer sess.Close()
	for {
		fetches := sess.PollFetches(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errs := fetches.Errors(); len(errs) > 0 {
			p.log.Warn("fetch", "err", errs[0].Err)
		}
		ins := fetches.Records()
		if len(ins) == 0 {
			continue
		}
		if err := sess.Begin(); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		produceErr := produce(ctx, sess.ProduceSync, p, ins)
		p.fp.failpoint("processor.after-produce-before-commit", eventOf(ins[0]))
		commit := produceErr == nil && !p.abort()
		committed, err := sess.End(ctx, kgo.TransactionEndTry(commit))
		if err != nil {
			return fmt.Errorf("end transaction: %w", err)
		}
		if produceErr != nil {
			return fmt.Errorf("produce: %w", produceErr)
		}
		if committed {
			p.fp.failpoint("processor.after-commit-before-poll", eventOf(ins[len(ins)-1]))
		}
	}
}
