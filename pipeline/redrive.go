package pipeline

import (
	"context"
	"errors"
)

// Redrive republishes subscription sub's dead letters to it at most rate
// per second with the run's redrive variant, and says what it did
// (issue 25, DLQ redrive).
func (r *Deployment) Redrive(ctx context.Context, sub string, rate int64) (string, error) {
	return "", errors.New("redrive: not wired")
}

// DeployFix redeploys sub's consumers accepting the new schema version.
func (r *Deployment) DeployFix(ctx context.Context, sub string) (string, error) {
	return "", errors.New("deploy-fix: not wired")
}

// PurgeDLQ purges sub's dead-letter queue.
func (r *Deployment) PurgeDLQ(ctx context.Context, sub string) (string, error) {
	return "", errors.New("purge-dlq: not wired")
}
