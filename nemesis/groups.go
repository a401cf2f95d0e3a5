package nemesis

import (
	"context"
	"errors"
)

// join runs a join step through Env.Join.
func (e *Env) join(ctx context.Context, f Fault) (effect, error) {
	return effect{}, errors.New("join: not wired")
}

// leave runs a leave step through Env.Leave.
func (e *Env) leave(ctx context.Context, f Fault) (effect, error) {
	return effect{}, errors.New("leave: not wired")
}
