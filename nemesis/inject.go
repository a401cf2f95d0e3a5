package nemesis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/cluster/link"
	"github.com/deliverycheck/deliverycheck/failpoint"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/process/supervisor"
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
// (value.detail is f as text), and, once healed, ok with value.evidence
// saying what showed the fault took effect, or fail with value.error when
// it was in place but never bit (info with the error if the heal failed;
// heal may be called again). A fault that cannot be injected is recorded
// as fail with the error, and whatever part of it took effect (say, one
// of three paused workers) is undone; so is one that never began because
// an earlier fault on the same server held it for longer than
// Env.HealTimeout, or until ctx ended. A kill, pause or restart of a
// server whose runtime lacks that ability ([cluster.Killer],
// [cluster.Pauser], [cluster.Restarter]) cannot be injected; its error is
// a [*cluster.UnsupportedError], and [Schedule.Check] finds such steps
// before a run starts. A restart, failover or wipe, once begun, runs to
// its end even if ctx's deadline (the end of the run's window) passes
// meanwhile, bounded by Env.HealTimeout; cancelling ctx still cuts it
// short. So the end of a window never leaves a server half restarted.
//
// What each kind does, by target, and its evidence:
//
//   - kill of a service: SIGKILL (a crash op), heal starts it again (a
//     restart op); evidence "kafka killed (exit: signal: killed),
//     restarted". RabbitMQ is first restarted cleanly once per Env, as
//     part of its first kill: RabbitMQ 3.10.8 can lose the leader of a
//     quorum queue declared shortly before a kill -9 for good, a broker
//     bug that is not what a run tests. The detail says so.
//   - kill of workers: SIGKILL each and wait for it to exit (a crash op
//     each); the supervisor restarts them after its RestartDelay and
//     records the restart. Heal does nothing; evidence is each exit
//     status ("relay-0 exited: signal: killed"). A worker already down
//     is skipped; none running means the kill never bit.
//   - restart: a service is stopped gracefully and started again (a
//     restart op); the supervisor has no graceful restart of one worker,
//     so a worker "restart" is a kill. Heal does nothing.
//   - pause: SIGSTOP, heal SIGCONT (a worker restarted meanwhile was
//     never paused); evidence "relay-0 paused (SIGSTOP), resumed".
//   - failpoint: "arm <term>" to each worker; heal disarms it
//     ("<name>=off"), so a term that has not fired by then never will
//     (this also disarms that failpoint if the run armed it at start).
//     Evidence is the hits the workers reported to the supervisor
//     ("failpoint relay.before-publish hit in relay-0"); none means it
//     never bit.
//   - network kinds, on the target service's link and direction: heal
//     removes exactly that toxic (or re-enables a refused link), leaving
//     other faults on the link in place. Two faults of the same kind and
//     direction on one link share a toxic: the later replaces the earlier
//     and the first heal removes it. A partition holds the data, it does
//     not drop it: at the heal it goes on, in order, on the same
//     connections. Evidence is what the link counted during the window
//     (connections held with data waiting, delayed, reset or cut); a
//     window no connection crossed never bit.
//   - isolate, split: between the nodes of a replicated service, iptables
//     DROP rules in the receiving nodes' network namespaces (clients keep
//     reaching every node through its link); heal removes exactly those
//     rules. Evidence is the packets they dropped; none never bit.
//   - failover of postgres (with a standby): the primary is killed, the
//     standby promoted and the database link pointed at it (a crash op);
//     heal starts the service again, which makes the deposed primary a
//     standby of the new one (a restart op). Evidence is the failover's
//     own account (WAL positions, the new timeline).
//   - roll of a replicated service (broker): a rolling restart, run
//     whole while it is injected, within the step's window (see
//     [Schedule.Run]): the service healthy first, then each node in turn
//     stopped cleanly and started again (a restart invoke when it stops,
//     ok when it serves), and the service healthy again
//     ([cluster.HealthChecker]) before the next. Heal does nothing.
//     Evidence is each node's restart: "kafka rolled in 41s: kafka-0
//     back in 9.1s, healthy 2.3s later; ...". A roll not done within its
//     window is a fault not injected (fail), the nodes it restarted
//     named in its error, and a node it left stopped is started by the
//     schedule's final heal.
//   - wipe of a node of a replicated service (cluster.Wiper): kill -9
//     and its data dir emptied (a crash op), heal rejoins it as a new
//     member with an empty disk (a restart op); evidence is both
//     accounts, e.g. "kafka-1 killed (signal: killed); disk wiped: 18
//     files, 40.0 MiB removed ...; kafka-1 rejoined with an empty disk:
//     storage formatted again (..., new directory id ...)". A heal that
//     fails leaves the node to HealAll, whose start of a wiped node
//     rejoins it.
//   - zombie of a transactional processor (processor-0): the worker is
//     told to pause itself at [ZombiePoint] (its transaction open) and
//     says so; once it is stopped, Env.Replace starts its replacement
//     (processor-0.r1, same transactional.id). Heal retires it in the
//     supervisor (never restarted), resumes it (SIGCONT), waits for it
//     to end its late transaction and exit (killing it after 15s), and
//     its evidence says where it paused, the replacement, how long it
//     was paused, how its late transaction ended ("fenced: yes" with
//     the error, or "fenced: no, committed") and its exit. A processor
//     that never reached the point within 5s, was never resumed, or
//     ended no late transaction, never bit.
//   - intrude (no target): the intruder (Env.Intrude) publishes its
//     forged events straight to the broker as its own user, each an
//     intrude op; heal does nothing. Evidence is what the broker said:
//     "broker accepted 12 of 12 intruder messages", or "broker refused
//     12 of 12 intruder messages: <its first refusal>"; a broker that
//     neither accepted nor refused any never bit.
//   - a target "kafka-1" or "broker-1" is one node of a replicated
//     service; "broker:leader" is resolved through Env.Leader when the
//     fault starts, and the evidence names the node.
func (f Fault) Inject(ctx context.Context, env *Env) (heal func(context.Context) error, err error) {
	a, err := env.inject(ctx, f, f.String(), "")
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return env.heal(ctx, a) }, nil
}

// inject is Inject with the detail to record (a schedule passes the step)
// and the reason its ops carry ("random" for a random schedule's step).
func (e *Env) inject(ctx context.Context, f Fault, detail, reason string) (*activeFault, error) {
	v := history.Value{Fault: string(f.Kind), Target: e.recordedTarget(f), Detail: detail, Reason: reason}
	// notInjected completes the invoke of v with a fail saying why.
	notInjected := func(why string, err error) (*activeFault, error) {
		v.Error = why
		e.record(history.Fail, history.Fault, v)
		e.log().Warn("fault not injected", "fault", v.Detail, "err", err)
		return nil, fmt.Errorf("nemesis: %s: %w", f, err)
	}
	if name := e.serviceTarget(f); name != "" {
		// One thing at a time to a server: the fault starts (and its
		// invoke is recorded) once the one before it is done, waiting
		// as long as a heal may take: the fault before it is mostly a
		// restart healing an earlier kill.
		lctx, cancel := context.WithTimeout(ctx, e.healTimeout())
		unlock, err := e.lockService(lctx, name)
		cancel()
		if err != nil {
			// Never begun, and recorded all the same: a step whose
			// server the fault before it held too long (a restart
			// that never came back) is a scheduled fault that did
			// not take effect, not a step nobody sees.
			e.record(history.Invoke, history.Fault, v)
			return notInjected("not injected: "+err.Error(), err)
		}
		defer unlock()
	}
	if note := e.cleanRestartNote(f); note != "" {
		v.Detail += " " + note
	}
	e.record(history.Invoke, history.Fault, v)
	a := &activeFault{ActiveFault: ActiveFault{Fault: f, Detail: v.Detail, Since: time.Now()}, reason: reason}
	if f.Kind.finishesOnceBegun() {
		var cancel context.CancelFunc
		ctx, cancel = operationContext(ctx, e.healTimeout())
		defer cancel()
	}
	eff, err := e.do(ctx, f)
	if err != nil {
		return notInjected(err.Error(), err)
	}
	a.effect = eff
	e.track(a)
	e.log().Info("fault", "fault", v.Detail)
	return a, nil
}

// recordedTarget is the target as the history names it: "broker" resolved
// to the run's broker; worker patterns kept as written.
func (e *Env) recordedTarget(f Fault) string {
	if e.Broker == "" {
		return f.Target
	}
	if f.Target == "broker" {
		return e.Broker
	}
	if rest, ok := strings.CutPrefix(f.Target, "broker"); ok && (strings.HasPrefix(rest, "-") || rest == LeaderSuffix) {
		return e.Broker + rest
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

// isService reports whether target names a server (or a node of one)
// rather than workers.
func (e *Env) isService(target string) bool {
	_, _, node := nodeOf(target)
	return node || isServiceName(target)
}

// do applies f and returns how to undo it and tell whether it bit.
func (e *Env) do(ctx context.Context, f Fault) (effect, error) {
	switch f.Kind {
	case Kill, Pause, Restart:
		if e.isService(f.Target) {
			return e.serviceFault(ctx, f)
		}
		return e.workerFault(ctx, f)
	case Failpoint:
		return e.failpoint(ctx, f)
	case Partition, Refuse, Latency, Bandwidth, ResetPeer, LimitData, SlowClose:
		return e.network(ctx, f)
	case Isolate, Split, CutReplication:
		return e.nodeFault(ctx, f)
	case Failover:
		return e.failover(ctx, f)
	case Roll:
		return e.roll(ctx, f)
	case Wipe:
		return e.wipe(ctx, f)
	case Zombie:
		return e.zombie(ctx, f)
	case Intrude:
		return e.intrude(ctx)
	case Redrive:
		return e.redrive(ctx, f)
	case DeployFix:
		return e.deployFix(ctx, f)
	case PurgeDLQ:
		return e.purgeDLQ(ctx, f)
	case Join:
		return e.join(ctx, f)
	case Leave:
		return e.leave(ctx, f)
	}
	_, err := ParseKind(string(f.Kind))
	return effect{}, err
}

func noop(context.Context) error { return nil }

// evidence is a bit function for a fault whose effect was certain once
// it was injected.
func evidence(s string) func() (string, error) {
	return func() (string, error) { return s, nil }
}

// exitStatuser is implemented by services that know how their last
// process ended (a local server's wait status, a container's exit code),
// which is the kill's evidence.
type exitStatuser interface {
	ExitStatus() string
}

func (e *Env) serviceFault(ctx context.Context, f Fault) (effect, error) {
	name, err := e.resolveNode(ctx, e.recordedTarget(f))
	if err != nil {
		return effect{}, err
	}
	svc := e.service(name)
	if svc == nil {
		return effect{}, fmt.Errorf("no service %s in the cluster", f.Target)
	}
	switch f.Kind {
	case Kill:
		k, err := e.Cluster.Killer(name)
		if err != nil {
			return effect{}, err
		}
		if err := e.cleanRestartOnce(ctx, svc); err != nil {
			return effect{}, err
		}
		if err := k.Kill(ctx); err != nil {
			return effect{}, err
		}
		// Kill returns once the server has exited.
		exit := "exited after kill -9"
		if es, ok := svc.(exitStatuser); ok && es.ExitStatus() != "" {
			exit = "exit: " + es.ExitStatus()
		}
		e.mark(&e.killed, name, true)
		e.record(history.Info, history.Crash, history.Value{Target: name, Fault: string(Kill), Detail: "kill -9 by the nemesis"})
		return effect{undo: func(ctx context.Context) error {
			if err := svc.Start(ctx); err != nil {
				return fmt.Errorf("start %s: %w", name, err)
			}
			e.mark(&e.killed, name, false)
			e.record(history.OK, history.Restart, history.Value{Target: name})
			return nil
		}, bit: evidence(fmt.Sprintf("%s killed (%s), restarted", name, exit))}, nil
	case Pause:
		p, err := e.Cluster.Pauser(name)
		if err != nil {
			return effect{}, err
		}
		if err := p.Pause(ctx); err != nil {
			return effect{}, err
		}
		e.mark(&e.pausedServices, name, true)
		var killedMeanwhile bool
		return effect{undo: func(ctx context.Context) error {
			// A kill while paused (how an unconfirmed publisher is
			// caught with writes in flight) leaves nothing stopped to
			// resume: the kill's own heal starts the server running.
			if e.isKilled(name) {
				killedMeanwhile = true
			} else if err := p.Resume(ctx); err != nil {
				return fmt.Errorf("resume %s: %w", name, err)
			}
			e.mark(&e.pausedServices, name, false)
			return nil
		}, bit: func() (string, error) {
			if killedMeanwhile {
				return name + " paused (SIGSTOP), then killed while paused", nil
			}
			return name + " paused (SIGSTOP), resumed", nil
		}}, nil
	default: // Restart
		r, err := e.Cluster.Restarter(name)
		if err != nil {
			return effect{}, err
		}
		if err := r.Restart(ctx); err != nil {
			// A failed restart may have left it stopped: HealAll starts it.
			e.mark(&e.killed, name, true)
			return effect{}, err
		}
		e.record(history.OK, history.Restart, history.Value{Target: name, Detail: "graceful restart by the nemesis"})
		if name == cluster.RabbitMQ {
			// A clean restart after the queues were declared is all the
			// first kill's clean restart is for: do not do it again.
			e.mu.Lock()
			e.rabbitRestarted = true
			e.mu.Unlock()
		}
		return effect{undo: noop, bit: evidence(name + " stopped gracefully and started again")}, nil
	}
}

// able is nil when the server f acts on (if any, and if the cluster runs
// it) has the ability f needs: a kill of RabbitMQ also needs a restart,
// for its clean restart (see Inject).
func (e *Env) able(f Fault) error {
	if f.Kind == CutReplication {
		return e.ableToCutReplication(f)
	}
	if f.Kind == Intrude {
		return e.ableToIntrude()
	}
	name := e.serviceTarget(f)
	if name == "" || e.service(name) == nil {
		return nil
	}
	var err error
	switch f.Kind {
	case Kill:
		if _, err = e.Cluster.Killer(name); err == nil && name == cluster.RabbitMQ {
			_, err = e.Cluster.Restarter(name)
		}
	case Pause:
		_, err = e.Cluster.Pauser(name)
	case Restart:
		_, err = e.Cluster.Restarter(name)
	case Roll:
		_, err = e.rollable(name)
	case Wipe:
		_, err = e.Cluster.Wiper(name)
	}
	return err
}

// cleanRestartOnce restarts RabbitMQ cleanly before its first kill of the
// run (see Inject).
func (e *Env) cleanRestartOnce(ctx context.Context, svc cluster.Service) error {
	if svc.Name() != cluster.RabbitMQ {
		return nil
	}
	r, err := e.Cluster.Restarter(svc.Name())
	if err != nil {
		return fmt.Errorf("clean restart before the first kill: %w", err)
	}
	e.mu.Lock()
	done := e.rabbitRestarted
	e.rabbitRestarted = true
	e.mu.Unlock()
	if done {
		return nil
	}
	if err := r.Restart(ctx); err != nil {
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

func (e *Env) workerFault(ctx context.Context, f Fault) (effect, error) {
	ws, err := e.workers(f.Target)
	if err != nil {
		return effect{}, err
	}
	switch f.Kind {
	case Kill, Restart:
		var errs []error
		var exits, down []string
		for _, w := range ws {
			status, err := e.Workers.Kill(ctx, w)
			if errors.Is(err, supervisor.ErrNotRunning) {
				down = append(down, w) // down already, and about to be restarted
				continue
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			e.record(history.Info, history.Crash, history.Value{Target: w, Fault: string(f.Kind), Detail: "kill -9 by the nemesis"})
			exits = append(exits, w+" exited: "+status)
		}
		if err := errors.Join(errs...); err != nil {
			return effect{}, err
		}
		if len(exits) == 0 {
			return effect{undo: noop, bit: func() (string, error) {
				return "", fmt.Errorf("nothing killed: %s not running (restarting)", strings.Join(down, ", "))
			}}, nil
		}
		return effect{undo: noop, bit: evidence(strings.Join(exits, "; "))}, nil
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
		var paused []string
		for i, w := range ws {
			err := e.Workers.Signal(w, syscall.SIGSTOP)
			if errors.Is(err, supervisor.ErrNotRunning) {
				continue
			}
			if err != nil {
				return effect{}, errors.Join(err, resume(ws[:i]))
			}
			paused = append(paused, w)
			e.mark(&e.pausedWorkers, w, true)
		}
		bit := evidence(strings.Join(paused, ", ") + " paused (SIGSTOP), resumed")
		if len(paused) == 0 {
			bit = func() (string, error) {
				return "", fmt.Errorf("nothing paused: %s not running (restarting)", strings.Join(ws, ", "))
			}
		}
		return effect{undo: func(context.Context) error { return resume(ws) }, bit: bit}, nil
	}
}

func (e *Env) failpoint(ctx context.Context, f Fault) (effect, error) {
	term, err := failpoint.ParseAny(f.Term)
	if err != nil {
		return effect{}, fmt.Errorf("failpoint term %q: %w", f.Term, err)
	}
	name := string(term.Name)
	ws, err := e.workers(f.Target)
	if err != nil {
		return effect{}, err
	}
	// Hits so far: the fault bit if a worker reports more by its heal.
	before := map[string]int{}
	for _, w := range ws {
		before[w], _ = e.Workers.Hits(w, name)
	}
	var armed []string
	for _, w := range ws {
		if err := e.Workers.Send(w, "arm "+f.Term); err != nil {
			return effect{}, errors.Join(err, e.disarm(ctx, armed, name))
		}
		armed = append(armed, w)
	}
	hits := func() (map[string]int, <-chan struct{}) {
		out := map[string]int{}
		var next <-chan struct{}
		for _, w := range ws {
			var n int
			n, next = e.Workers.Hits(w, name)
			out[w] = n - before[w]
		}
		return out, next
	}
	return effect{
		undo: func(ctx context.Context) error { return e.disarm(ctx, ws, name) },
		bit: func() (string, error) {
			got, _ := hits()
			var in []string
			for _, w := range ws {
				switch n := got[w]; {
				case n == 1:
					in = append(in, w)
				case n > 1:
					in = append(in, fmt.Sprintf("%s (%d times)", w, n))
				}
			}
			if len(in) == 0 {
				return "", fmt.Errorf("failpoint %s armed in %s never hit", name, f.Target)
			}
			return fmt.Sprintf("failpoint %s hit in %s", name, strings.Join(in, ", ")), nil
		},
		// A term that fires a number of times is done once it fired
		// that often in every worker it was armed in; one that fires
		// always or by chance stays armed until ctx ends.
		settle: func(ctx context.Context) {
			for {
				got, next := hits()
				done := term.Count > 0
				for _, w := range ws {
					if got[w] < term.Count {
						done = false
					}
				}
				if done {
					return
				}
				select {
				case <-next:
				case <-ctx.Done():
					return
				}
			}
		},
	}, nil
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

func (e *Env) network(ctx context.Context, f Fault) (effect, error) {
	ls := e.links()
	if ls == nil {
		return effect{}, errors.New("no links")
	}
	name, err := e.resolveNode(ctx, e.recordedTarget(f))
	if err != nil {
		return effect{}, err
	}
	l := ls.Link(name)
	if l == nil {
		var have []string
		for _, l := range ls.Links() {
			have = append(have, l.Name())
		}
		return effect{}, fmt.Errorf("no link %q (have %s)", f.Target, strings.Join(have, ", "))
	}
	d, err := link.ParseDirection(f.Direction)
	if err != nil {
		return effect{}, err
	}
	where := "link " + name
	if d != link.Both {
		where += " " + d.String()
	}
	if f.Kind == Refuse {
		// The connections open now are the ones the refusal closes;
		// attempts refused by the closed port leave no trace to count.
		w, err := l.Watch(link.Upstream, 0)
		if err != nil {
			return effect{}, err
		}
		open, err := w.Stop()
		if err != nil {
			return effect{}, err
		}
		if err := l.Refuse(); err != nil {
			return effect{}, err
		}
		return effect{undo: func(context.Context) error { return l.Accept() }, bit: func() (string, error) {
			if open.Conns == 0 {
				return "", fmt.Errorf("no connection crossed %s during the window (none was open to close; refused attempts are not counted)", where)
			}
			return fmt.Sprintf("%s: %s closed, new ones refused", where, plural(open.Conns, "open connection")), nil
		}}, nil
	}
	// The watch counts in the link's gate, ahead of every toxic, so it
	// sees the traffic the fault acts on. It goes on before the fault so
	// that it sees all of the window.
	limit := int64(0)
	if f.Kind == LimitData {
		limit = cmp.Or(f.Bytes, DefaultBytes)
	}
	w, err := l.Watch(d, limit)
	if err != nil {
		return effect{}, err
	}
	var typ string
	switch f.Kind {
	case Partition:
		typ, err = "partition", l.Partition(d)
	case Latency:
		typ, err = "latency", l.Latency(d, cmp.Or(f.Latency, DefaultLatency), f.Jitter)
	case Bandwidth:
		typ, err = "bandwidth", l.Bandwidth(d, cmp.Or(f.Rate, DefaultRate))
	case ResetPeer:
		typ, err = "reset_peer", l.ResetPeer(d, f.Delay)
	case LimitData:
		typ, err = "limit_data", l.LimitData(d, limit)
	case SlowClose:
		typ, err = "slow_close", l.SlowClose(d, cmp.Or(f.Delay, DefaultSlowClose))
	}
	if err != nil {
		// A toxic may be in place in one direction of two.
		_, werr := w.Stop()
		return effect{}, errors.Join(err, l.RemoveToxic(typ, d), werr)
	}
	var seen link.Traffic
	return effect{
		// The fault heals first, then the watch stops, so the counts
		// cover all of the window. Neither can block on a connection: a
		// partition and a watch are flags on the link's gate, not
		// toxics in toxiproxy's chain (see cluster/link).
		undo: func(context.Context) error {
			if err := l.RemoveToxic(typ, d); err != nil {
				return err
			}
			t, err := w.Stop()
			seen = t
			return err
		},
		bit: func() (string, error) { return networkEvidence(f, where, seen) },
	}, nil
}

// networkEvidence says what a network fault did to the traffic seen on
// its link during its window, or why it did nothing.
func networkEvidence(f Fault, where string, t link.Traffic) (string, error) {
	if f.Kind == Partition {
		// A partition reads (and counts) at most the first chunk of
		// each connection that tries to send; the rest waits in the
		// senders' buffers, so the bytes are a lower bound.
		if t.Held == 0 {
			return "", fmt.Errorf("no connection crossed %s during the window", where)
		}
		return fmt.Sprintf("%s: %s held, at least %s waiting", where, plural(t.Held, "connection"), sizeOf(t.HeldBytes)), nil
	}
	if t.Active == 0 {
		return "", fmt.Errorf("no connection crossed %s during the window", where)
	}
	conns, data := plural(t.Active, "connection"), sizeOf(t.Bytes)
	switch f.Kind {
	case Latency:
		by := cmp.Or(f.Latency, DefaultLatency).String()
		if f.Jitter > 0 {
			by += "±" + f.Jitter.String()
		}
		return fmt.Sprintf("%s: %s delayed, %s delayed by %s", where, conns, data, by), nil
	case Bandwidth:
		return fmt.Sprintf("%s: %s throttled to %d KB/s, %s through", where, conns, cmp.Or(f.Rate, DefaultRate), data), nil
	case ResetPeer:
		return fmt.Sprintf("%s: %s reset, %s sent into the reset", where, conns, data), nil
	case LimitData:
		limit := cmp.Or(f.Bytes, DefaultBytes)
		if t.Reached == 0 {
			return "", fmt.Errorf("%s crossed %s during the window, none carried the %d B limit", conns, where, limit)
		}
		return fmt.Sprintf("%s: %s cut after %d B", where, plural(t.Reached, "connection"), limit), nil
	case SlowClose:
		if t.Closed == 0 {
			return "", fmt.Errorf("%s crossed %s during the window, none closed", conns, where)
		}
		return fmt.Sprintf("%s: %s closed late (by %s)", where, plural(t.Closed, "connection"), cmp.Or(f.Delay, DefaultSlowClose)), nil
	}
	return fmt.Sprintf("%s: %s, %s", where, conns, data), nil
}

func plural(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// sizeOf is n bytes for a person: "512 B", "120 KiB", "3.4 MiB".
func sizeOf(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
}
