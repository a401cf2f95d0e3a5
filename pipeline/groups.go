package pipeline

import (
	"context"
	"errors"
)

// Join starts one more consumer of subscription sub, or the first of a
// late subscription, and returns its name (issue 25, consumer groups).
func (r *Deployment) Join(ctx context.Context, sub string) (string, error) {
	return "", errors.New("join: not wired")
}

// Leave stops consumer worker for good: it leaves its group cleanly.
func (r *Deployment) Leave(ctx context.Context, worker string) (string, error) {
	return "", errors.New("leave: not wired")
}
