package nemesis

import (
	"context"
	"errors"
	"fmt"
)

// join runs a join step through Env.Join: one more consumer of the
// target subscription, whose group rebalances (or, for a late
// subscription, starts). Nothing to heal: the consumer stays. It bit
// once the consumer was started; what it then did is in its history.
func (e *Env) join(ctx context.Context, f Fault) (effect, error) {
	if e.Join == nil {
		return effect{}, errors.New("join: this run cannot start consumers")
	}
	w, err := e.Join(ctx, f.Target)
	if err != nil {
		return effect{}, fmt.Errorf("join: %w", err)
	}
	return effect{undo: noop, bit: evidence(w + " joined " + f.Target)}, nil
}

// leave runs a leave step through Env.Leave: the target consumer stops
// for good, leaving its group cleanly. It bit once the consumer exited
// after its stop; one that had to be killed, or was not running, is a
// step not injected.
func (e *Env) leave(ctx context.Context, f Fault) (effect, error) {
	if e.Leave == nil {
		return effect{}, errors.New("leave: this run cannot stop consumers")
	}
	// Not cut short by the schedule's deadline: a consumer stopping
	// finishes what it holds first.
	lctx, cancel := intrusionContext(ctx)
	defer cancel()
	ev, err := e.Leave(lctx, f.Target)
	if err != nil {
		return effect{}, fmt.Errorf("leave: %w", err)
	}
	return effect{undo: noop, bit: evidence(ev)}, nil
}
