package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deliverycheck/deliverycheck/failpoint"
	"github.com/deliverycheck/deliverycheck/history"
)

// Schedule is a list of steps, each at a time since the schedule starts.
// Steps may overlap. Random says the schedule was drawn by [Random] from
// Seed (a scenario's fixed timeline merged with a random schedule keeps
// both: its timeline steps have no [Step.Reason], the drawn ones
// [ReasonRandom]); the same seed and the same inputs to [Random] make the
// same steps, which is what `--seed` replays. A fixed schedule has
// Random false and no seed: 0 is a seed Random may be given.
type Schedule struct {
	Steps  []Step `json:"steps" yaml:"steps"`
	Seed   int64  `json:"seed,omitempty" yaml:"seed,omitempty"`
	Random bool   `json:"random,omitempty" yaml:"random,omitempty"`
}

// Fixed is a schedule of the given steps, e.g. from a scenario's timeline.
func Fixed(steps ...Step) Schedule { return Schedule{Steps: slices.Clone(steps)} }

// String is how the schedule is recorded, saying where its steps came
// from: "fixed: at 1s: kill kafka for 2s; at 5s: ..." for a fixed one,
// "seed=N: at 1s: ..." for a random one, and for a timeline merged with a
// random schedule the timeline's steps then the drawn ones, "fixed: at 3s:
// kill relay-0; seed=N: at 1s: ...". A part with no steps reads "no
// steps" ("seed=N: no steps"). Each step reads back with [ParseStep].
func (s Schedule) String() string {
	var fixed, drawn []string
	for _, st := range s.Steps {
		if s.Random && st.Reason == ReasonRandom {
			drawn = append(drawn, st.String())
		} else {
			fixed = append(fixed, st.String())
		}
	}
	steps := func(ss []string) string {
		if len(ss) == 0 {
			return "no steps"
		}
		return strings.Join(ss, "; ")
	}
	if !s.Random {
		return "fixed: " + steps(fixed)
	}
	r := fmt.Sprintf("seed=%d: %s", s.Seed, steps(drawn))
	if len(fixed) == 0 {
		return r
	}
	return "fixed: " + steps(fixed) + "; " + r
}

// End is when the last step is healed, relative to the schedule's start.
func (s Schedule) End() time.Duration {
	var end time.Duration
	for _, st := range s.Steps {
		end = max(end, st.At+st.For)
	}
	return end
}

// Check reports, before the schedule runs, every step that env's servers
// cannot take: a kill, pause or restart of a server whose runtime lacks
// that ability (see [cluster.Killer]), so a scenario asking for a fault
// its runtime cannot do fails at the start rather than mid-run. Steps on
// workers, failpoints and links, and steps on a server the cluster does
// not run, are left to Run, which records what goes wrong with them as a
// failed fault.
func (s Schedule) Check(env *Env) error {
	var errs []error
	for _, st := range s.Steps {
		if err := env.able(st.Fault); err != nil {
			errs = append(errs, fmt.Errorf("nemesis: %s: %w", st, err))
		}
	}
	return errors.Join(errs...)
}

// Run runs the steps at their times since Run was called, each on its own
// timer, so faults overlap when their steps do. A step is healed For after
// it started; a step with For 0 is healed at once (a kill of a service
// then starts it again straight away), except a failpoint, which stays
// armed until it has fired (each worker it was armed in, as often as its
// term says; a kill(always) or kill(P) term until ctx ends) or ctx ends,
// and is then healed, its completion saying whether it was hit. The
// failpoint is the fault; disarming it before it fired would let a
// scenario pass without it. A rolling restart (roll) runs its whole
// course while it is injected, with For as its deadline, and is healed
// as soon as it is done.
//
// Run returns when every step has been healed or ctx is done (steps not
// yet started then never start; a cancelled ctx is how a caller cuts a
// schedule short, not an error). Either way it ends with [HealAll] on a
// fresh context bounded by env.HealTimeout, so nothing stays broken.
//
// Before the first step it records the schedule itself as one fault op
// of type ok with value.fault "schedule" and value.detail [Schedule.String]
// (docs/history.md). A step's fault ops carry its [Step.Reason]. Run
// returns every injection and heal error, joined; a fault that could not
// be injected does not stop the others. A fault that was in place but
// never bit is no error of Run's: its fail completion says so.
func (s Schedule) Run(ctx context.Context, env *Env) error { return s.RunWithin(ctx, env, 0) }

// RunWithin is Run with the run's window apart from ctx: no step starts
// after window (from the call) and an armed failpoint waits no longer,
// but a step whose time came within it is carried out whole, even past
// it: its wait for the fault before it on the same server (a restart
// that heals an earlier kill, slow on a loaded machine), its injection
// and its heal, each bounded by env.HealTimeout. So a schedule is done
// as written however slowly its servers come back, and its caller keeps
// the workload running until RunWithin returns. Cancelling ctx still
// cuts everything short. A window of 0 is ctx's own end.
func (s Schedule) RunWithin(ctx context.Context, env *Env, window time.Duration) error {
	env.record(history.OK, history.Fault, history.Value{Fault: "schedule", Detail: s.String()})
	env.log().Info("nemesis schedule", "schedule", s.String())
	start := time.Now()
	wctx := ctx // the window: when steps may start, how long failpoints wait
	if window > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithDeadline(ctx, start.Add(window))
		defer cancel()
	}
	var mu sync.Mutex
	var errs []error
	fail := func(err error) {
		// Errors caused by cancellation are not the schedule's: the
		// final heal below undoes whatever they left behind.
		if err != nil && ctx.Err() == nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	}
	var wg sync.WaitGroup
	for _, st := range s.Steps {
		wg.Go(func() {
			if !waitUntil(wctx, start.Add(st.At)) {
				return
			}
			ictx := ctx
			if st.Fault.Kind.runsItsWindow() {
				var cancel context.CancelFunc
				ictx, cancel = context.WithDeadline(ctx, start.Add(st.At+st.For))
				defer cancel()
			}
			a, err := env.inject(ictx, st.Fault, st.String(), st.Reason)
			if err != nil {
				fail(err)
				return
			}
			if st.Fault.Kind.runsItsWindow() {
				// Done: its window was its deadline.
			} else if st.For == 0 && a.settle != nil {
				a.settle(wctx)
				if ctx.Err() != nil {
					return // healed, and judged, by the final HealAll
				}
			} else if !waitUntil(ctx, start.Add(st.At+st.For)) {
				return
			}
			fail(env.heal(ctx, a))
		})
	}
	wg.Wait()
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), env.healTimeout())
	defer cancel()
	if err := HealAll(hctx, env); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// waitUntil waits for t on a timer; false if ctx ended first.
func waitUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Targets says what a random schedule may hit.
type Targets struct {
	// Services are the servers for process faults: "postgres", "kafka",
	// "rabbitmq", or "broker".
	Services []string `json:"services,omitempty" yaml:"services,omitempty"`
	// Workers are worker names or patterns ("consumer-*") for process faults.
	Workers []string `json:"workers,omitempty" yaml:"workers,omitempty"`
	// Links are the links for network faults (service names, or "broker").
	Links []string `json:"links,omitempty" yaml:"links,omitempty"`
	// Failpoints maps a worker (or pattern) to the terms that apply to it,
	// e.g. "relay-0": ["relay.before-publish=kill(1)"].
	Failpoints map[string][]string `json:"failpoints,omitempty" yaml:"failpoints,omitempty"`
	// Nodes are the nodes of replicated services ("broker-0"), for the
	// nodes family: isolate one, or split their service.
	Nodes []string `json:"nodes,omitempty" yaml:"nodes,omitempty"`
}

// WithStandby is t for a database with a standby: its two nodes can be
// cut off from each other (isolate) and it can fail over.
func (t Targets) WithStandby() Targets {
	t.Nodes = append(slices.Clone(t.Nodes), "postgres-0", "postgres-1")
	return t
}

// WithNodes is t for a service (as t names it: "broker") that runs n
// nodes: each node replaces the service as a process and network target
// (it has no single server or link of its own), and the nodes family can
// cut them off from each other.
func (t Targets) WithNodes(service string, n int) Targets {
	if n <= 1 {
		return t
	}
	var nodes []string
	for i := range n {
		nodes = append(nodes, service+"-"+strconv.Itoa(i))
	}
	swap := func(xs []string) []string {
		var out []string
		for _, x := range xs {
			if x == service {
				out = append(out, nodes...)
			} else {
				out = append(out, x)
			}
		}
		return out
	}
	t.Services, t.Links = swap(t.Services), swap(t.Links)
	t.Nodes = append(slices.Clone(t.Nodes), nodes...)
	return t
}

// DefaultTargets is what a correct pipeline is hit with: PostgreSQL and
// the broker (process and network faults) and every worker, with the
// failpoints of its component (kill once). The ack-first window is left
// out: only the ack-first consumer has it.
func DefaultTargets(workers []string) Targets {
	t := Targets{
		Services:   []string{"postgres", "broker"},
		Workers:    slices.Sorted(slices.Values(workers)),
		Links:      []string{"postgres", "broker"},
		Failpoints: map[string][]string{},
	}
	for _, w := range t.Workers {
		for _, n := range failpoint.All() {
			if n == failpoint.ConsumerAfterAckBeforeCommit || !strings.HasPrefix(w, n.Component()+"-") {
				continue
			}
			t.Failpoints[w] = append(t.Failpoints[w], string(n)+"=kill(1)")
		}
	}
	return t
}

// Only keeps the targets named, each a service ("postgres", "broker"), a
// worker, or a worker pattern ("consumer-*"): a service keeps its process
// faults and its link, a worker its process faults and failpoints. No
// names keeps everything, as a scenario's empty target list means.
func (t Targets) Only(names ...string) Targets {
	if len(names) == 0 {
		return t
	}
	match := func(x string) bool {
		return slices.ContainsFunc(names, func(n string) bool {
			ok, _ := path.Match(n, x)
			// A replicated service's name keeps its nodes.
			svc, _, node := nodeOf(x)
			return ok || node && svc == n
		})
	}
	out := Targets{Failpoints: map[string][]string{}}
	for _, s := range t.Services {
		if match(s) {
			out.Services = append(out.Services, s)
		}
	}
	for _, w := range t.Workers {
		if match(w) {
			out.Workers = append(out.Workers, w)
		}
	}
	for _, l := range t.Links {
		if match(l) {
			out.Links = append(out.Links, l)
		}
	}
	for w, terms := range t.Failpoints {
		if match(w) {
			out.Failpoints[w] = slices.Clone(terms)
		}
	}
	for _, n := range t.Nodes {
		if match(n) {
			out.Nodes = append(out.Nodes, n)
		}
	}
	return out
}

// Random makes a seeded schedule in the style of Jepsen's combined
// nemesis: quiet for interval, a fault for interval, quiet again, ... up
// to duration, each fault drawn from the given families (see [Families];
// unknown ones and ones with nothing in targets to hit are ignored) and
// hitting one of targets. A kill or restart of a worker is instant (the
// supervisor restarts it); every other fault lasts interval. The same
// seed and inputs always give the same schedule: the draws come from
// math/rand/v2's PCG seeded with seed, and the inputs are sorted first.
// Every step has Reason [ReasonRandom].
func Random(seed int64, families []string, interval, duration time.Duration, targets Targets) (s Schedule) {
	s = Schedule{Seed: seed, Random: true}
	defer func() {
		for i := range s.Steps {
			s.Steps[i].Reason = ReasonRandom
		}
	}()
	if interval <= 0 {
		return s
	}
	r := rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15))
	fams := slices.Sorted(slices.Values(families))
	fams = slices.Compact(fams)
	fams = slices.DeleteFunc(fams, func(f string) bool { return !targets.has(f) })
	if len(fams) == 0 {
		return s
	}
	t := targets.sorted()
	for at := interval; at+interval <= duration; at += 2 * interval {
		s.Steps = append(s.Steps, t.draw(r, fams[r.IntN(len(fams))], at, interval))
	}
	return s
}

// has reports whether family f is known and has something to hit.
func (t Targets) has(f string) bool {
	switch f {
	case "process":
		return len(t.Services)+len(t.Workers) > 0
	case "failpoint":
		for _, terms := range t.Failpoints {
			if len(terms) > 0 {
				return true
			}
		}
		return false
	case "network":
		return len(t.Links) > 0
	case "nodes":
		return len(t.Nodes) > 1
	}
	return false
}

// sorted copies t with every list sorted, so draws do not depend on the
// order the caller listed things in.
func (t Targets) sorted() Targets {
	out := Targets{
		Services:   slices.Sorted(slices.Values(t.Services)),
		Workers:    slices.Sorted(slices.Values(t.Workers)),
		Links:      slices.Sorted(slices.Values(t.Links)),
		Nodes:      slices.Sorted(slices.Values(t.Nodes)),
		Failpoints: map[string][]string{},
	}
	for w, terms := range t.Failpoints {
		if len(terms) > 0 {
			out.Failpoints[w] = slices.Sorted(slices.Values(terms))
		}
	}
	return out
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

func (t Targets) draw(r *rand.Rand, family string, at, d time.Duration) Step {
	st := Step{At: at, For: d}
	switch family {
	case "process":
		targets := append(slices.Clone(t.Services), t.Workers...)
		st.Fault = Fault{Kind: pick(r, Families()["process"]), Target: pick(r, targets)}
		if st.Fault.Kind == Restart || (st.Fault.Kind == Kill && slices.Contains(t.Workers, st.Fault.Target)) {
			st.For = 0
		}
	case "failpoint":
		ws := slices.Sorted(func(yield func(string) bool) {
			for w := range t.Failpoints {
				if !yield(w) {
					return
				}
			}
		})
		w := pick(r, ws)
		st.Fault = Fault{Kind: Failpoint, Target: w, Term: pick(r, t.Failpoints[w])}
	case "network":
		f := Fault{Kind: pick(r, Families()["network"]), Target: pick(r, t.Links)}
		if f.Kind != Refuse {
			f.Direction = pick(r, []string{"", "upstream", "downstream"})
		}
		switch f.Kind {
		case Latency:
			f.Latency = time.Duration(1+r.IntN(10)) * 50 * time.Millisecond
			f.Jitter = pick(r, []time.Duration{0, f.Latency / 4})
		case Bandwidth:
			f.Rate = pick(r, []int64{8, 32, 128})
		case ResetPeer:
			f.Delay = pick(r, []time.Duration{0, 100 * time.Millisecond, time.Second})
		case LimitData:
			f.Bytes = pick(r, []int64{1000, 10000, 100000})
		case SlowClose:
			f.Delay = pick(r, []time.Duration{100 * time.Millisecond, time.Second})
		}
		st.Fault = f
	case "nodes":
		node := pick(r, t.Nodes)
		svc, _, _ := nodeOf(node)
		peers := 0
		for _, n := range t.Nodes {
			if s, _, _ := nodeOf(n); s == svc {
				peers++
			}
		}
		switch k := pick(r, Families()["nodes"]); {
		case k == Split && peers >= 3:
			shape := pick(r, Shapes())
			if shape == ShapeHalves {
				shape = ""
			}
			st.Fault = Fault{Kind: Split, Target: svc, Shape: shape}
		case k == Failover && svc == "postgres":
			// Instant: its heal rejoins the deposed primary.
			st.Fault, st.For = Fault{Kind: Failover, Target: svc}, 0
		default:
			st.Fault = Fault{Kind: Isolate, Target: node}
		}
	}
	return st
}
