package nemesis

import (
	"context"
	"errors"
)

// redrive runs a redrive step through Env.Redrive.
func (e *Env) redrive(ctx context.Context, f Fault) (effect, error) {
	return effect{}, errors.New("redrive: not wired")
}

// deployFix runs a deploy-fix step through Env.DeployFix.
func (e *Env) deployFix(ctx context.Context, f Fault) (effect, error) {
	return effect{}, errors.New("deploy-fix: not wired")
}

// purgeDLQ runs a purge-dlq step through Env.PurgeDLQ.
func (e *Env) purgeDLQ(ctx context.Context, f Fault) (effect, error) {
	return effect{}, errors.New("purge-dlq: not wired")
}
