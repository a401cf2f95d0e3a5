package nemesis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/history"
)

// rollPoll is how often a rolling restart asks whether the service is
// healthy again.
const rollPoll = 200 * time.Millisecond

// rollable is what a rolling restart of service needs: the service's
// health check, and each of its nodes able to restart.
func (e *Env) rollable(service string) ([]cluster.Restarter, error) {
	if e.Cluster == nil {
		return nil, errors.New("no cluster")
	}
	nodes := e.Cluster.Nodes(service)
	if len(nodes) < 2 {
		return nil, fmt.Errorf("%s is not replicated: a rolling restart needs a service of several nodes (broker.nodes)", service)
	}
	if _, err := e.Cluster.HealthChecker(service); err != nil {
		return nil, err
	}
	var rs []cluster.Restarter
	for _, n := range nodes {
		r, err := e.Cluster.Restarter(n.Name())
		if err != nil {
			return nil, err
		}
		rs = append(rs, r)
	}
	return rs, nil
}

// roll restarts every node of a replicated service cleanly, one at a
// time, in node order, each once the service is healthy (see Inject).
// It returns when the last node is back and the service healthy, or with
// an error saying how far it got once ctx ends.
func (e *Env) roll(ctx context.Context, f Fault) (effect, error) {
	svc := e.recordedTarget(f)
	rs, err := e.rollable(svc)
	if err != nil {
		return effect{}, err
	}
	hc, _ := e.Cluster.HealthChecker(svc)
	nodes := e.Cluster.Nodes(svc)
	start := time.Now()
	var done []string
	failed := func(err error) (effect, error) {
		if len(done) > 0 {
			err = fmt.Errorf("%w (done: %s)", err, strings.Join(done, "; "))
		}
		return effect{}, err
	}
	if _, err := waitHealthy(ctx, hc); err != nil {
		return failed(fmt.Errorf("%s not healthy before the first restart: %w", svc, err))
	}
	for i, n := range nodes {
		name := n.Name()
		what := fmt.Sprintf("rolling restart of %s, node %d of %d", svc, i+1, len(nodes))
		e.record(history.Invoke, history.Restart, history.Value{Target: name, Fault: string(Roll), Detail: what + ": clean stop"})
		t0 := time.Now()
		if err := rs[i].Restart(ctx); err != nil {
			// It may be stopped: the schedule's final heal starts it.
			e.mark(&e.killed, name, true)
			return failed(fmt.Errorf("restart %s: %w", name, err))
		}
		back := time.Since(t0)
		e.record(history.OK, history.Restart, history.Value{Target: name, Fault: string(Roll), Detail: fmt.Sprintf("%s: stopped cleanly, back in %s", what, round(back))})
		healthy, err := waitHealthy(ctx, hc)
		if err != nil {
			return failed(fmt.Errorf("%s back in %s, then %s not healthy: %w", name, round(back), svc, err))
		}
		done = append(done, fmt.Sprintf("%s back in %s, healthy %s later", name, round(back), round(healthy)))
	}
	ev := fmt.Sprintf("%s rolled in %s: %s", svc, round(time.Since(start)), strings.Join(done, "; "))
	return effect{undo: noop, bit: evidence(ev)}, nil
}

// waitHealthy polls hc until it passes, and returns how long that took,
// or its last error once ctx ends.
func waitHealthy(ctx context.Context, hc cluster.HealthChecker) (time.Duration, error) {
	start := time.Now()
	for {
		err := hc.CheckHealth(ctx)
		if err == nil {
			return time.Since(start), nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-time.After(rollPoll):
		}
	}
}

// round is d for a person: to the millisecond under a second, else to a
// tenth of a second.
func round(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(100 * time.Millisecond)
}
