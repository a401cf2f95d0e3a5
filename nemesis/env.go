package nemesis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/cluster/link"
	"github.com/deliverycheck/deliverycheck/cluster/netns"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/pipeline/intruder"
	"github.com/deliverycheck/deliverycheck/process/supervisor"
)

// Env is what faults act on and where they are recorded. Fill in the
// exported fields, then pass a pointer: an Env also remembers what is
// currently broken (see [Env.Active]) so that [HealAll] can undo it, and
// must not be copied after first use. One Env per run.
type Env struct {
	// Cluster holds the servers (process faults) and their links
	// (network faults).
	Cluster *cluster.Cluster
	// Workers are the pipeline's worker processes.
	Workers *supervisor.Supervisor
	// Recorder receives fault, crash and restart ops. Nil records nothing.
	Recorder *history.Recorder
	// Broker is "kafka" or "rabbitmq": what the target "broker" means.
	Broker string
	// Log overrides slog.Default().
	Log *slog.Logger
	// Links overrides Cluster.Links() for network faults, so a test can
	// drive a bare link server without starting any server.
	Links *link.Server
	// Network overrides Cluster.Network() for nodes faults, so a test
	// can drive bare namespaces without starting any server.
	Network *netns.Network
	// ReplicationPort overrides the cluster's (cluster.ReplicationPorter)
	// for cut-replication, so a test can cut a port of bare namespaces.
	ReplicationPort int
	// Leader looks up the node that leads service (a replicated one) now,
	// for a target such as "kafka:leader": the pipeline knows what to ask
	// about (its topic's first partition, its first queue). Nil: such
	// targets cannot be injected.
	Leader func(ctx context.Context, service string) (node string, err error)
	// Rejoined is told of a node that rejoined its cluster with an empty
	// disk (the heal of a wipe), so the run can declare again what went
	// with the node's disk and the run needs (the pipeline's RabbitMQ
	// classic queues and their bindings: a forgotten node's are deleted),
	// as a deployment's definitions loaded at boot, or clients that
	// declare on connecting, would. It returns what it did, for the
	// evidence ("" for nothing). Nil: nothing is declared again.
	Rejoined func(ctx context.Context, node string) (string, error)
	// Replace starts a replacement for worker (a transactional
	// processor paused by the zombie fault) under its transactional.id
	// and returns the replacement's name. Nil: no zombie fault.
	Replace func(ctx context.Context, worker string) (replacement string, err error)
	// Intrude runs the intruder once (pipeline.Deployment.Intrude): its
	// forged events published to the broker as its own user, each
	// recorded as an intrude op. Nil: no intrude fault.
	Intrude func(ctx context.Context) (intruder.Result, error)
	// Redrive republishes subscription sub's dead letters at most rate
	// per second (pipeline.Deployment.Redrive) and says what it did.
	// Nil: no redrive step.
	Redrive func(ctx context.Context, sub string, rate int64) (evidence string, err error)
	// DeployFix redeploys sub's consumers accepting the new schema
	// version (pipeline.Deployment.DeployFix). Nil: no deploy-fix step.
	DeployFix func(ctx context.Context, sub string) (evidence string, err error)
	// PurgeDLQ purges sub's dead-letter queue
	// (pipeline.Deployment.PurgeDLQ). Nil: no purge-dlq step.
	PurgeDLQ func(ctx context.Context, sub string) (evidence string, err error)
	// Join starts one more consumer of sub (pipeline.Deployment.Join)
	// and returns its name. Nil: no join step.
	Join func(ctx context.Context, sub string) (worker string, err error)
	// Leave stops consumer worker for good (pipeline.Deployment.Leave)
	// and says what it did. Nil: no leave step.
	Leave func(ctx context.Context, worker string) (evidence string, err error)
	// ZombieExit bounds the wait for a resumed zombie to exit, after
	// which it is killed, overriding the default 15s.
	ZombieExit time.Duration
	// HealTimeout bounds each heal, and the final heal of a schedule
	// (which runs on a fresh context, because the schedule's own may be
	// cancelled), overriding the default 2m: starting a killed Kafka
	// takes a while.
	HealTimeout time.Duration

	mu     sync.Mutex
	nextID int
	active map[int]*activeFault
	// killed services are started again by HealAll even if the fault
	// that killed them is gone (its heal failed, or it was never tracked).
	killed map[string]bool
	// pausedServices and pausedWorkers are resumed by HealAll.
	pausedServices map[string]bool
	pausedWorkers  map[string]bool
	// rabbitRestarted: the once-per-run clean restart of RabbitMQ before
	// its first kill is done (see killService).
	rabbitRestarted bool
	// serviceLocks serialise what the nemesis does to one server, one
	// token each: steps may overlap, but a kill that starts while a
	// restart of the same server is still booting it would SIGTERM the
	// booting node, and both would fail.
	serviceLocks map[string]chan struct{}
}

// lockService waits until nothing else the nemesis does holds server
// name, or ctx ends, and returns the unlock.
func (e *Env) lockService(ctx context.Context, name string) (func(), error) {
	e.mu.Lock()
	if e.serviceLocks == nil {
		e.serviceLocks = map[string]chan struct{}{}
	}
	l := e.serviceLocks[name]
	if l == nil {
		l = make(chan struct{}, 1)
		e.serviceLocks[name] = l
	}
	e.mu.Unlock()
	select {
	case l <- struct{}{}:
		return func() { <-l }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for another fault on %s: %w", name, ctx.Err())
	}
}

// serviceTarget is the server a process fault acts on, "" for a network
// fault, a failpoint or a worker.
func (e *Env) serviceTarget(f Fault) string {
	switch f.Kind {
	case Kill, Pause, Restart:
		if e.isService(f.Target) {
			return e.recordedTarget(f)
		}
	case Roll:
	case Wipe:
		return e.recordedTarget(f)
	}
	return ""
}

// ActiveFault is a fault that has started and not been healed yet.
type ActiveFault struct {
	Fault Fault
	// Detail is the step as written ("at 10s: partition kafka for 5s").
	Detail string
	Since  time.Time
}

// String is short, for a live status line: "partition kafka (3.2s)".
func (a ActiveFault) String() string {
	return fmt.Sprintf("%s (%s)", a.Fault, time.Since(a.Since).Round(100*time.Millisecond))
}

type activeFault struct {
	ActiveFault
	id     int
	reason string // value.reason of its ops: "random" for a random step
	// mu serialises heal attempts; done is set once one succeeded.
	mu   sync.Mutex
	done bool
	effect
}

// effect is a fault in place: how to undo it, and how to tell afterwards
// whether it bit. An injection that succeeded says only that the fault
// was put in place; whether it did anything (a failpoint fired, traffic
// met a partition, a process died) is known at its heal, and a run whose
// faults never bit proved nothing about them.
type effect struct {
	undo func(context.Context) error
	// bit runs after a successful undo: the evidence that the fault took
	// effect, in words for the history, or an error saying why it did
	// not. Nil means there is nothing to check.
	bit func() (evidence string, err error)
	// settle, when set, waits until the fault has done all it will do
	// (an armed failpoint fired) or ctx ends; Schedule.Run heals a
	// failpoint step without a duration once it returns.
	settle func(ctx context.Context)
}

// Active lists the faults in force, oldest first.
func (e *Env) Active() []ActiveFault {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]ActiveFault, 0, len(e.active))
	for _, a := range e.active {
		out = append(out, a.ActiveFault)
	}
	slices.SortFunc(out, func(a, b ActiveFault) int { return a.Since.Compare(b.Since) })
	return out
}

func (e *Env) log() *slog.Logger {
	if e.Log != nil {
		return e.Log
	}
	return slog.Default()
}

func (e *Env) links() *link.Server {
	if e.Links != nil {
		return e.Links
	}
	if e.Cluster != nil {
		return e.Cluster.Links()
	}
	return nil
}

func (e *Env) healTimeout() time.Duration {
	if e.HealTimeout > 0 {
		return e.HealTimeout
	}
	return 2 * time.Minute
}

// record writes one op; a recorder failure is logged, not returned,
// because a fault must still be healed when the history cannot be written.
func (e *Env) record(t history.Type, f history.F, v history.Value) {
	if e.Recorder == nil {
		return
	}
	if _, err := e.Recorder.Record(t, f, v); err != nil {
		e.log().Error("nemesis: record", "f", f, "err", err)
	}
}

// mark sets or clears name in one of the Env's sets.
func (e *Env) mark(set *map[string]bool, name string, on bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if *set == nil {
		*set = map[string]bool{}
	}
	if on {
		(*set)[name] = true
	} else {
		delete(*set, name)
	}
}

// isKilled reports whether the nemesis killed service name and has not
// started it again.
func (e *Env) isKilled(name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.killed[name]
}

func (e *Env) snapshot(set map[string]bool) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func (e *Env) track(a *activeFault) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.active == nil {
		e.active = map[int]*activeFault{}
	}
	e.nextID++
	a.id = e.nextID
	e.active[a.id] = a
}

// heal undoes a once; a failed attempt leaves it active for a retry. The
// fault's completion says whether it bit: ok with value.evidence, or fail
// with value.error when it was in place but never took effect (a heal
// that did its job is not an error either way: the checker judges the
// history).
func (e *Env) heal(ctx context.Context, a *activeFault) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done {
		return nil
	}
	v := history.Value{Fault: string(a.Fault.Kind), Target: e.recordedTarget(a.Fault), Detail: a.Detail, Reason: a.reason}
	if name := e.serviceTarget(a.Fault); name != "" {
		unlock, err := e.lockService(ctx, name)
		if err != nil {
			return fmt.Errorf("nemesis: heal %s: %w", a.Fault, err)
		}
		defer unlock()
	}
	// One heal may not hold the run for longer than the final heal may
	// take (a base backup that hangs on a connection the fault's window
	// left half-open blocked a run for 20 minutes): cut short, the heal
	// fails, and the final heal tries again on a fresh context.
	uctx, cancel := context.WithTimeout(ctx, e.healTimeout())
	defer cancel()
	if err := a.undo(uctx); err != nil {
		// A heal cut short by its context is not news: the schedule's
		// final heal, on a fresh context, tries again and records that.
		if ctx.Err() == nil {
			v.Error = "heal: " + err.Error()
			e.record(history.Info, history.Fault, v)
		}
		return fmt.Errorf("nemesis: heal %s: %w", a.Fault, err)
	}
	a.done = true
	e.mu.Lock()
	delete(e.active, a.id)
	e.mu.Unlock()
	lasted := time.Since(a.Since).Round(time.Millisecond)
	if a.bit != nil {
		ev, err := a.bit()
		if err != nil {
			v.Error = err.Error()
			e.record(history.Fail, history.Fault, v)
			e.log().Warn("fault healed without taking effect", "fault", a.Fault.String(), "lasted", lasted, "why", err)
			return nil
		}
		v.Evidence = ev
	}
	e.record(history.OK, history.Fault, v)
	e.log().Info("fault healed", "fault", a.Fault.String(), "lasted", lasted, "evidence", v.Evidence)
	return nil
}

// HealAll ends every fault in force: it heals each active fault (each
// recorded as healed), then, as a backstop for anything a failed heal
// left behind, heals every link, starts every killed service, and resumes
// every paused service and worker. It reports every failure, not only the
// first. Armed failpoints of active failpoint faults are disarmed; the
// failpoints a run armed at start are not touched.
func HealAll(ctx context.Context, env *Env) error {
	env.mu.Lock()
	as := make([]*activeFault, 0, len(env.active))
	for _, a := range env.active {
		as = append(as, a)
	}
	env.mu.Unlock()
	// Newest first: undo in the reverse order of doing.
	slices.SortFunc(as, func(a, b *activeFault) int { return b.id - a.id })
	var errs []error
	for _, a := range as {
		errs = append(errs, env.heal(ctx, a))
	}
	if ls := env.links(); ls != nil {
		if err := ls.HealAll(); err != nil {
			errs = append(errs, fmt.Errorf("nemesis: heal links: %w", err))
		}
	}
	if n := env.nodeNetwork(); n != nil {
		if err := n.HealAll(ctx); err != nil {
			errs = append(errs, fmt.Errorf("nemesis: heal nodes' network: %w", err))
		}
	}
	for _, name := range env.snapshot(env.pausedServices) {
		if svc := env.service(name); svc != nil && !env.isKilled(name) {
			p, err := env.Cluster.Pauser(name)
			if err == nil {
				err = p.Resume(ctx)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("nemesis: resume %s: %w", name, err))
				continue
			}
		}
		env.mark(&env.pausedServices, name, false)
	}
	for _, name := range env.snapshot(env.killed) {
		if svc := env.service(name); svc != nil {
			if err := svc.Start(ctx); err != nil {
				errs = append(errs, fmt.Errorf("nemesis: start %s: %w", name, err))
				continue
			}
			env.record(history.OK, history.Restart, history.Value{Target: name, Detail: "healed at the end of the schedule"})
		}
		env.mark(&env.killed, name, false)
	}
	for _, name := range env.snapshot(env.pausedWorkers) {
		if env.Workers != nil {
			if err := env.Workers.Signal(name, syscall.SIGCONT); err != nil && !errors.Is(err, supervisor.ErrNotRunning) {
				errs = append(errs, fmt.Errorf("nemesis: resume %s: %w", name, err))
				continue
			}
		}
		env.mark(&env.pausedWorkers, name, false)
	}
	return errors.Join(errs...)
}

func (e *Env) service(name string) cluster.Service {
	if e.Cluster == nil {
		return nil
	}
	return e.Cluster.Service(name)
}
