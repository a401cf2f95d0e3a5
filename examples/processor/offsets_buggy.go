//go:build buggy

package main

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// run, in the buggy build, writes each batch's outputs in a transaction
// (again until one commits) and commits the input offsets afterwards,
// outside it, as a plain consumer would. The transaction makes the
// outputs atomic, not the offsets: a crash after the commit and before
// the offset commit has the restarted processor read the batch again
// and write its outputs a second time.
func (p *processor) run(ctx context.Context) error {
	cl, err := kgo.NewClient(append(p.clientOpts(), kgo.DisableAutoCommit())...)
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	defer cl.Close()
	for {
		fetches := cl.PollFetches(ctx)
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
		for committed := false; !committed; {
			if err := cl.BeginTransaction(); err != nil {
				return fmt.Errorf("begin: %w", err)
			}
			if err := produce(ctx, cl.ProduceSync, p, ins); err != nil {
				return fmt.Errorf("produce: %w", err)
			}
			p.fp.failpoint("processor.after-produce-before-commit", eventOf(ins[0]))
			commit := !p.abort()
			if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
				return fmt.Errorf("end transaction: %w", err)
			}
			committed = commit
		}
		p.fp.failpoint("processor.after-commit-before-poll", eventOf(ins[len(ins)-1]))
		if err := cl.CommitRecords(ctx, ins...); err != nil {
			return fmt.Errorf("commit offsets: %w", err)
		}
	}
}
