package nemesis

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/cluster/link"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/workloads/supervisor"
)

// Defaults for a fault's zero parameters.
const (
	DefaultLatency   = 200 * time.Millisecond
	DefaultRate      = 64    // KB/s
	DefaultBytes     = 10000 // limit-data
	DefaultSlowClose = time.Second
)

// Inject starts f and returns the function that heals it. Both are
// recorded in env's history: a fault op of type invoke when it starts
// (value.detail is f as text), ok once healed (info with the error if the
// heal failed; heal may be called again). A fault that cannot be injected
// is recorded as fail with the error, and whatever part of it took effect
// (say, one of three paused workers) is undone.
//
// What each kind does, by target:
//
//   - kill of a service: SIGKILL (a crash op), heal starts it again (a
//     restart op). RabbitMQ is first restarted cleanly once per Env, as
//     part of its first kill: RabbitMQ 3.10.8 can lose the leader of a
//     quorum queue declared shortly before a kill -9 for good, a broker
//     bug that is not what a run tests. The detail says so.
//   - kill of workers: SIGKILL each (a crash op each); the supervisor
//     restarts them after its RestartDelay and records the restart. Heal
//     does nothing.
//   - restart: a service is stopped gracefully and started again (a
//     restart op); the supervisor has no graceful restart of one worker,
//     so a worker "restart" is a kill. Heal does nothing.
//   - pause: SIGSTOP, heal SIGCONT (a worker restarted meanwhile was
//     never paused).
//   - failpoint: "arm <term>" to each worker; heal disarms it
//     ("<name>=off"), so a term that has not fired by then never will
//     (this also disarms that failpoint if the run armed it at start).
//   - network kinds, on the target service's link and direction: heal
//     removes exactly that toxic (or re-enables a refused link), leaving
//     other faults on the link in place. Two faults of the same kind and
//     direction on one link share a toxic: the later replaces the earlier
//     and the first heal removes it.
func (f Fault) Inject(ctx context.Context, env *Env) (heal func(context.Context) error, err error) {
	return env.inject(ctx, f, f.String())
}

// inject is Inject with the detail to record (a schedule passes the step).
func (e *Env) inject(ctx context.Context, f Fault, detail string) (func(context.Context) error, error) {
	if note := e.cleanRestartNote(f); note != "" {
		detail += " " + note
	}
	v := history.Value{Fault: string(f.Kind), Target: e.recordedTarget(f), Detail: detail}
	e.record(history.Invoke, history.Fault, v)
	a := &activeFault{ActiveFault: ActiveFault{Fault: f, Detail: detail, Since: time.Now()}}
	undo, err := e.do(ctx, f)
	if err != nil {
		v.Error = err.Error()
		e.record(history.Fail, history.Fault, v)
		e.log().Warn("fault not injected", "fault", detail, "err", err)
		return nil, fmt.Errorf("nemesis: %s: %w", f, err)
	}
	a.undo = undo
	e.track(a)
	e.log().Info("fault", "fault", detail)
	return func(ctx context.Context) error { return e.heal(ctx, a) }, nil
}

// recordedTarget is the target as the history names it: "broker" resolved
// to the run's broker; worker patterns kept as written.
func (e *Env) recordedTarget(f Fault) string {
	if f.Target == "broker" && e.Broker != "" {
		return e.Broker
	}
	return f.Target
}

// cleanRestartNote is the detail added to the first kill of RabbitMQ.
func (e *Env) cleanRestartNote(f Fault) string {
	if f.Kind != Kill || e.recordedTarget(f) != cluster.RabbitMQ || e.service(cluster.RabbitMQ) == nil {
		return ""
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.rabbitRestarted {
		return ""
	}
	return "(after a clean restart of rabbitmq, once per run: RabbitMQ 3.10.8 quorum queues can lose their leader to a kill -9 soon after being declared)"
}

// isService reports whether target names a server rather than workers.
func (e *Env) isService(target string) bool {
	return target == "broker" || slices.Contains(cluster.Names(), target)
}

// do applies f and returns its undo.
func (e *Env) do(ctx context.Context, f Fault) (func(context.Context) error, error) {
	switch f.Kind {
	case Kill, Pause, Restart:
		if e.isService(f.Target) {
			return e.serviceFault(ctx, f)
		}
		return e.workerFault(f)
	case Failpoint:
		return e.failpoint(ctx, f)
	case Partition, Refuse, Latency, Bandwidth, ResetPeer, LimitData, SlowClose:
		return e.network(f)
	}
	_, err := ParseKind(string(f.Kind))
	return nil, err
}

func noop(context.Context) error { return nil }

func (e *Env) serviceFault(ctx context.Context, f Fault) (func(context.Context) error, error) {
	name := e.recordedTarget(f)
	svc := e.service(name)
	if svc == nil {
		return nil, fmt.Errorf("no service %s in the cluster", f.Target)
	}
	switch f.Kind {
	case Kill:
		if err := e.cleanRestartOnce(ctx, svc); err != nil {
			return nil, err
		}
		if err := svc.Kill(ctx); err != nil {
			return nil, err
		}
		e.mark(&e.killed, name, true)
		e.record(history.Info, history.Crash, history.Value{Target: name, Fault: string(Kill), Detail: "kill -9 by the nemesis"})
		return func(ctx context.Context) error {
			if err := svc.Start(ctx); err != nil {
				return fmt.Errorf("start %s: %w", name, err)
			}
			e.mark(&e.killed, name, false)
			e.record(history.OK, history.Restart, history.Value{Target: name})
			return nil
		}, nil
	case Pause:
		if err := svc.Pause(ctx); err != nil {
			return nil, err
		}
		e.mark(&e.pausedServices, name, true)
		return func(ctx context.Context) error {
			if err := svc.Resume(ctx); err != nil {
				return fmt.Errorf("resume %s: %w", name, err)
			}
			e.mark(&e.pausedServices, name, false)
			return nil
		}, nil
	default: // Restart
		if err := svc.Restart(ctx); err != nil {
			// A failed restart may have left it stopped: HealAll starts it.
			e.mark(&e.killed, name, true)
			return nil, err
		}
		e.record(history.OK, history.Restart, history.Value{Target: name, Detail: "graceful restart by the nemesis"})
		return noop, nil
	}
}

// cleanRestartOnce restarts RabbitMQ cleanly before its first kill of the
// run (see Inject).
func (e *Env) cleanRestartOnce(ctx context.Context, svc cluster.Service) error {
	if svc.Name() != cluster.RabbitMQ {
		return nil
	}
	e.mu.Lock()
	done := e.rabbitRestarted
	e.rabbitRestarted = true
	e.mu.Unlock()
	if done {
		return nil
	}
	if err := svc.Restart(ctx); err != nil {
		e.mark(&e.killed, svc.Name(), true)
		return fmt.Errorf("clean restart before the first kill: %w", err)
	}
	e.record(history.OK, history.Restart, history.Value{Target: svc.Name(), Detail: "clean restart before the first kill -9 (RabbitMQ 3.10.8 quorum queue bug)"})
	return nil
}

// workers expands a target over the supervisor's workers: a name, or a
// pattern with * (consumer-*, *-0).
func (e *Env) workers(target string) ([]string, error) {
	if e.Workers == nil {
		return nil, fmt.Errorf("no workers to hit %s", target)
	}
	names := e.Workers.Names()
	var out []string
	for _, n := range names {
		if ok, _ := path.Match(target, n); ok {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no worker matches %q (have %s)", target, strings.Join(names, ", "))
	}
	return out, nil
}

func (e *Env) workerFault(f Fault) (func(context.Context) error, error) {
	ws, err := e.workers(f.Target)
	if err != nil {
		return nil, err
	}
	switch f.Kind {
	case Kill, Restart:
		var errs []error
		for _, w := range ws {
			err := e.Workers.Signal(w, syscall.SIGKILL)
			if errors.Is(err, supervisor.ErrNotRunning) {
				continue // down already, and about to be restarted
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			e.record(history.Info, history.Crash, history.Value{Target: w, Fault: string(f.Kind), Detail: "kill -9 by the nemesis"})
		}
		return noop, errors.Join(errs...)
	default: // Pause
		resume := func(ws []string) error {
			var errs []error
			for _, w := range ws {
				if err := e.Workers.Signal(w, syscall.SIGCONT); err != nil && !errors.Is(err, supervisor.ErrNotRunning) {
					errs = append(errs, err)
					continue
				}
				e.mark(&e.pausedWorkers, w, false)
			}
			return errors.Join(errs...)
		}
		for i, w := range ws {
			if err := e.Workers.Signal(w, syscall.SIGSTOP); err != nil && !errors.Is(err, supervisor.ErrNotRunning) {
				return nil, errors.Join(err, resume(ws[:i]))
			}
			e.mark(&e.pausedWorkers, w, true)
		}
		return func(context.Context) error { return resume(ws) }, nil
	}
}

func (e *Env) failpoint(ctx context.Context, f Fault) (func(context.Context) error, error) {
	name, _, _ := strings.Cut(f.Term, "=")
	if name == "" {
		return nil, fmt.Errorf("failpoint term %q names no failpoint", f.Term)
	}
	ws, err := e.workers(f.Target)
	if err != nil {
		return nil, err
	}
	var armed []string
	for _, w := range ws {
		if err := e.Workers.Send(w, "arm "+f.Term); err != nil {
			return nil, errors.Join(err, e.disarm(ctx, armed, name))
		}
		armed = append(armed, w)
	}
	return func(ctx context.Context) error { return e.disarm(ctx, ws, name) }, nil
}

// disarm sends "<name>=off" to each worker. A worker between a crash
// (its failpoint fired) and its restart cannot read it; the armed terms
// survive the restart, so it is retried until the worker is back or ctx
// ends.
func (e *Env) disarm(ctx context.Context, ws []string, name string) error {
	var errs []error
	for _, w := range ws {
		for {
			err := e.Workers.Send(w, "arm "+name+"=off")
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				errs = append(errs, fmt.Errorf("disarm %s in %s: %w", name, w, err))
			case <-time.After(100 * time.Millisecond):
				continue
			}
			break
		}
	}
	return errors.Join(errs...)
}

func (e *Env) network(f Fault) (func(context.Context) error, error) {
	ls := e.links()
	if ls == nil {
		return nil, errors.New("no links")
	}
	name := e.recordedTarget(f)
	l := ls.Link(name)
	if l == nil {
		var have []string
		for _, l := range ls.Links() {
			have = append(have, l.Name())
		}
		return nil, fmt.Errorf("no link %q (have %s)", f.Target, strings.Join(have, ", "))
	}
	d, err := link.ParseDirection(f.Direction)
	if err != nil {
		return nil, err
	}
	if f.Kind == Refuse {
		if err := l.Refuse(); err != nil {
			return nil, err
		}
		return func(context.Context) error { return l.Accept() }, nil
	}
	var typ string
	switch f.Kind {
	case Partition:
		typ, err = "timeout", l.Partition(d)
	case Latency:
		typ, err = "latency", l.Latency(d, or(f.Latency, DefaultLatency), f.Jitter)
	case Bandwidth:
		typ, err = "bandwidth", l.Bandwidth(d, or(f.Rate, DefaultRate))
	case ResetPeer:
		typ, err = "reset_peer", l.ResetPeer(d, f.Delay)
	case LimitData:
		typ, err = "limit_data", l.LimitData(d, or(f.Bytes, DefaultBytes))
	case SlowClose:
		typ, err = "slow_close", l.SlowClose(d, or(f.Delay, DefaultSlowClose))
	}
	if err != nil {
		// A toxic may be in place in one direction of two.
		return nil, errors.Join(err, l.RemoveToxic(typ, d))
	}
	return func(context.Context) error { return l.RemoveToxic(typ, d) }, nil
}

func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
