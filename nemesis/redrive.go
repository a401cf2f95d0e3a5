package nemesis

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The operator's steps on dead letters (docs/contract.md, "Dead letters
// and redrive"): redrive a subscription's dead-letter queue at a rate,
// deploy the fix its consumers need, purge its dead-letter queue. Each
// runs whole while it is injected, through the deployment's hook, and
// its heal has nothing to undo: its evidence is what it did, and one
// that did nothing (an empty queue, a canary dead-lettered again) is a
// fault not injected, so the run is unknown.

// operationTimeout bounds a redrive, a deploy-fix or a purge. The
// deployment bounds a redrive more tightly once it has counted what it
// must send (pipeline.Deployment.Redrive).
const operationTimeout = 10 * time.Minute

// operationContext is an operation's context: not ended by the
// schedule's deadline (the end of the workload, which a step late in it
// would not outlast), but by an interruption (ctx cancelled) or timeout.
func operationContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	stop := context.AfterFunc(ctx, func() {
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			cancel()
		}
	})
	return octx, func() { stop(); cancel() }
}

// operation runs one of the deployment's operations on f's target and
// makes its evidence the fault's.
func (e *Env) operation(ctx context.Context, f Fault, hook func(context.Context) (string, error)) (effect, error) {
	octx, cancel := operationContext(ctx, operationTimeout)
	defer cancel()
	ev, err := hook(octx)
	if err != nil {
		return effect{}, fmt.Errorf("%s %s: %w", f.Kind, f.Target, err)
	}
	return effect{undo: noop, bit: evidence(ev)}, nil
}

// redrive republishes the target subscription's dead letters at f.Rate
// per second (Env.Redrive): "redrove 15 of email's 15 dead letters at
// ≤ 50/s (canary ... applied)".
func (e *Env) redrive(ctx context.Context, f Fault) (effect, error) {
	if e.Redrive == nil {
		return effect{}, errors.New("redrive: this run cannot redrive (no deployment to run the redriver)")
	}
	return e.operation(ctx, f, func(ctx context.Context) (string, error) { return e.Redrive(ctx, f.Target, f.Rate) })
}

// deployFix restarts the target subscription's consumers with the build
// that accepts the new schema version (Env.DeployFix).
func (e *Env) deployFix(ctx context.Context, f Fault) (effect, error) {
	if e.DeployFix == nil {
		return effect{}, errors.New("deploy-fix: this run cannot deploy (no deployment)")
	}
	return e.operation(ctx, f, func(ctx context.Context) (string, error) { return e.DeployFix(ctx, f.Target) })
}

// purgeDLQ empties the target subscription's dead-letter queue
// (Env.PurgeDLQ): what an operator must not do with what failed.
func (e *Env) purgeDLQ(ctx context.Context, f Fault) (effect, error) {
	if e.PurgeDLQ == nil {
		return effect{}, errors.New("purge-dlq: this run cannot purge (no deployment)")
	}
	return e.operation(ctx, f, func(ctx context.Context) (string, error) { return e.PurgeDLQ(ctx, f.Target) })
}
