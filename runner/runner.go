// Package runner turns one scenario into a verdict: provision the
// servers, start the pipeline's workers, run the workload and the nemesis,
// heal, drain, read the final state, check the history and write the run
// folder. `deliverycheck run` and `suite` are thin shells around [Run].
package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/internal/backoff"
	"github.com/deliverycheck/deliverycheck/nemesis"
	"github.com/deliverycheck/deliverycheck/pipeline"
	"github.com/deliverycheck/deliverycheck/reports"
	"github.com/deliverycheck/deliverycheck/verdict"
)

// Spec is one run, already resolved from a scenario.
type Spec struct {
	Name        string
	Description string
	Pipeline    pipeline.Config
	// Schedule is the nemesis schedule, timed from the workload's start.
	Schedule nemesis.Schedule
	// Duration is how long producers run before the drain: WorkloadDuration, or
	// longer when the schedule outlasts it (Run then says so at start).
	Duration time.Duration
	// WorkloadDuration is the workload's own duration, the scenario's or
	// --duration's; 0 if not known, as for a Spec not made by
	// [FromScenario].
	WorkloadDuration time.Duration
	Guarantees       checker.Guarantees
	// Images overrides the containers runtime's image per server.
	Images map[string]string
	// Nodes is the node count of each replicated server (cluster.Config.Nodes).
	Nodes map[string]int
	// Standby is PostgreSQL's standby, "" for none (cluster.Config.Standby).
	Standby string
	// KafkaReplication is the replicated Kafka's topic settings
	// (cluster.Config.KafkaReplication).
	KafkaReplication cluster.KafkaReplication
	Seed             int64
	// External describes the components that are not deliverycheck's own,
	// for the report.
	External []reports.External
	// Expect is what the scenario expects of the run; nil states nothing.
	Expect *verdict.Expectation
	// LagAlert is the scenario's alert on consumer lag, nil for none:
	// the check says when it would have fired.
	LagAlert *checker.LagAlert
}

// Fits says why servers someone else started (Options.Cluster, a suite's
// shared ones) are not the ones spec asks for, or nil: a run on a single
// node that asked for three, or on a min ISR of 2 that asked for 1, would
// prove nothing about replication and look as if it had. The replication
// settings are compared as stated (a zero field is the default).
func (spec Spec) Fits(cl *cluster.Cluster) error {
	for _, svc := range []string{spec.Pipeline.Broker, cluster.Postgres} {
		want := spec.Nodes[svc]
		if svc == cluster.Postgres && spec.Standby != "" {
			want = 2
		}
		if want <= 1 {
			want = 0 // a single server has no nodes
		}
		if got := len(cl.Nodes(svc)); got != want {
			return fmt.Errorf("provision: the servers given run %s with %d nodes, the scenario asks for %d", svc, max(got, 1), max(want, 1))
		}
	}
	if got := cl.KafkaReplication(); spec.Pipeline.Broker == cluster.Kafka && got != spec.KafkaReplication {
		return fmt.Errorf("provision: the servers given run kafka with replication %+v, the scenario asks for %+v", got, spec.KafkaReplication)
	}
	return nil
}

// Options say where and how to run.
type Options struct {
	// Out is the root of run folders: a run writes Out/<scenario>/<time>/
	// and points Out/<scenario>/latest at it.
	Out string
	// Runtime provisions servers: "local", "containers" or "auto"
	// (cluster.ResolveRuntime); "" is "local".
	Runtime string
	// Keep keeps the servers' temp dirs.
	Keep bool
	// Cluster, when set, is used instead of provisioning one (suites and
	// tests share one set of servers). Run does not close it.
	Cluster *cluster.Cluster
	// WorkerCmd is the argv prefix that starts a worker process.
	WorkerCmd []string
	// Command is the command line that reproduces the run.
	Command string
	// Status receives the live status line (nil: none); TTY rewrites one
	// line in place, otherwise a plain line every few seconds.
	Status io.Writer
	TTY    bool
	Log    *slog.Logger
}

// Outcome is what a run produced.
type Outcome struct {
	Dir    string
	Result *checker.Result
	Run    reports.Record
	// HarnessErr is the harness's own failure (a server did not start, the
	// run was interrupted): the verdict is then at best unknown.
	HarnessErr error
	// Verdict is the run's one verdict, as results.json, junit.xml and
	// report.html state it.
	Verdict verdict.Verdict
}

// ExitCode is the verdict's exit code: 0 valid, 1 invalid, 2 unknown, 4
// harness error with nothing checked.
func (o *Outcome) ExitCode() int { return o.Verdict.ExitCode() }

// Run runs spec. It always writes what it has to the run folder, also when
// interrupted (ctx cancelled): the faults are healed, the workers stopped,
// and the result is then unknown unless the facts were established.
func Run(ctx context.Context, spec Spec, opts Options) (*Outcome, error) {
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	logLength(log, spec)
	dir, err := runDir(opts.Out, spec.Name)
	if err != nil {
		return nil, err
	}
	out := &Outcome{Dir: dir}
	meta := reports.Record{
		Scenario: spec.Name, Description: spec.Description, Seed: spec.Seed,
		Command: opts.Command, Started: time.Now().UTC(), Guarantees: spec.Guarantees, LagAlert: spec.LagAlert, External: spec.External, Expect: spec.Expect,
		Environment: reports.Environment{Runtime: opts.Runtime, Harness: harnessVersion(), Go: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH},
	}

	cl := opts.Cluster
	if cl == nil {
		services := []string{cluster.Postgres, spec.Pipeline.Broker}
		start := time.Now()
		cl, err = cluster.Start(ctx, cluster.Config{Runtime: opts.Runtime, Images: spec.Images, Nodes: spec.Nodes, Standby: spec.Standby, KafkaReplication: spec.KafkaReplication, Services: services, Keep: opts.Keep, Logger: log})
		if err != nil {
			out.HarnessErr = fmt.Errorf("provision: %w", err)
			return out, writeAll(out, &meta, nil, log)
		}
		log.Info("servers ready", "took", time.Since(start).Round(time.Millisecond))
		defer func() {
			copyServerLogs(cl, dir)
			if err := cl.Close(); err != nil {
				log.Warn("close servers", "err", err)
			}
		}()
	}
	if err := spec.Fits(cl); err != nil {
		out.HarnessErr = err
		return out, writeAll(out, &meta, nil, log)
	}
	meta.Environment.Runtime = cl.Runtime()
	meta.Environment.Servers = cl.Versions()
	for _, s := range cl.Services() {
		if img, ok := s.(interface{ Image() string }); ok {
			if meta.Environment.Images == nil {
				meta.Environment.Images = map[string]string{}
			}
			meta.Environment.Images[s.Name()] = img.Image()
		}
	}

	// A fault this runtime cannot do fails the run now, not mid-run.
	if err := spec.Schedule.Check(&nemesis.Env{Cluster: cl, Broker: spec.Pipeline.Broker}); err != nil {
		out.HarnessErr = fmt.Errorf("schedule: %w", err)
		return out, writeAll(out, &meta, nil, log)
	}

	cfg := spec.Pipeline
	cfg.Seed = uint64(spec.Seed)
	r, err := pipeline.Start(ctx, cl, dir, cfg, opts.WorkerCmd, log)
	if err != nil {
		out.HarnessErr = fmt.Errorf("start pipeline: %w", err)
		return out, writeAll(out, &meta, nil, log)
	}
	defer r.Close()
	recordLoad(&meta, cfg, r.RateSteps())

	env := nemesis.Env{Cluster: cl, Workers: r.Supervisor(), Recorder: r.Recorder(), Broker: cfg.Broker, Log: log, Leader: r.Leader, Rejoined: r.Redeclare, Replace: r.ReplaceProcessor, Intrude: r.Intrude,
		Redrive: r.Redrive, DeployFix: r.DeployFix, PurgeDLQ: r.PurgeDLQ, Join: r.Join, Leave: r.Leave}
	// The workload runs for spec.Duration, and past it until the
	// nemesis has carried out every step whose time came within it: a
	// step that waits for its server to come back from the step before
	// (a restart slow under load) starts late rather than never.
	live, cancel := context.WithCancel(ctx)
	nemDone := make(chan error, 1)
	go func() { nemDone <- spec.Schedule.RunWithin(ctx, &env, spec.Duration) }()
	// The leaders of replicated services, for the report's node time
	// line, while the workload and the nemesis run.
	leadersDone := make(chan struct{})
	go func() { defer close(leadersDone); r.SampleLeaders(live, leaderSampling) }()
	// Consumer lag, sampled until the drain ends (it stops the sampler).
	r.StartLagSampler(ctx, lagSampling)
	stopStatus := startStatus(live, opts, r, &env)
	_ = backoff.Sleep(ctx, spec.Duration) // interrupted: checked below
	nemErr := <-nemDone
	cancel()
	<-leadersDone
	stopStatus()
	if nemErr != nil && !errors.Is(nemErr, context.Canceled) && !errors.Is(nemErr, context.DeadlineExceeded) {
		log.Warn("nemesis", "err", nemErr)
	}

	// Interrupted: heal, stop, read what can be read; no drain, so the
	// checker will call the run unknown.
	fctx := ctx
	if ctx.Err() != nil {
		out.HarnessErr = fmt.Errorf("interrupted: %w", ctx.Err())
		var fcancel context.CancelFunc
		fctx, fcancel = context.WithTimeout(context.Background(), 60*time.Second)
		defer fcancel()
		if err := r.StopAll(fctx); err != nil {
			log.Warn("stop workers", "err", err)
		}
		if err := r.FinalRead(fctx); err != nil {
			log.Warn("final read", "err", err)
		}
	} else if _, err := r.Finish(fctx); err != nil {
		out.HarnessErr = fmt.Errorf("finish: %w", err)
	}
	files, err := r.HistoryFiles()
	if err != nil {
		out.HarnessErr = errors.Join(out.HarnessErr, err)
		return out, writeAll(out, &meta, nil, log)
	}
	g := spec.Guarantees
	g.Subscriptions = cfg.Subscriptions
	res, err := checker.CheckFiles(files, checker.Options{Guarantees: g, LagAlert: spec.LagAlert})
	if err != nil {
		out.HarnessErr = errors.Join(out.HarnessErr, fmt.Errorf("check: %w", err))
		return out, writeAll(out, &meta, nil, log)
	}
	out.Result = res
	return out, writeAll(out, &meta, res, log)
}

// leaderSampling is how often a run looks up the leaders of its
// replicated services (pipeline.Deployment.SampleLeaders).
const leaderSampling = 500 * time.Millisecond

// lagSampling is how often the consumers' lag is sampled (lag ops).
const lagSampling = 500 * time.Millisecond

// writeAll completes the run record from the folder (fault windows,
// marks, processes from the history), decides the verdict and writes the
// run folder; it is called on every path out of Run, so the outcome and
// the folder always say the same.
func writeAll(out *Outcome, meta *reports.Record, res *checker.Result, log *slog.Logger) error {
	meta.Finished = time.Now().UTC()
	if out.HarnessErr != nil {
		meta.HarnessError = out.HarnessErr.Error()
	}
	cerr := meta.Complete(out.Dir, res)
	if cerr != nil {
		log.Warn("complete run record", "err", cerr)
	}
	out.Run, out.Verdict = *meta, reports.Judge(*meta, res)
	if err := reports.WriteAll(out.Dir, *meta, res); err != nil {
		return fmt.Errorf("write run folder: %w", err)
	}
	log.Info("run folder written", "dir", out.Dir)
	return nil
}

// runDir makes Out/<name>/<time>/ and points Out/<name>/latest at it.
func runDir(root, name string) (string, error) {
	if root == "" {
		root = "runs"
	}
	safe := strings.Map(func(r rune) rune {
		if r == '/' || r == os.PathSeparator || r == ' ' {
			return '_'
		}
		return r
	}, strings.TrimSuffix(filepath.Base(name), filepath.Ext(name)))
	base := filepath.Join(root, safe)
	dir := filepath.Join(base, time.Now().UTC().Format("20060102T150405.000Z"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("run folder: %w", err)
	}
	latest := filepath.Join(base, "latest")
	_ = os.Remove(latest)
	_ = os.Symlink(filepath.Base(dir), latest)
	return dir, nil
}

// copyServerLogs copies the log of each server that has one into the
// run folder's logs/, and of each node of a replicated one.
func copyServerLogs(cl *cluster.Cluster, dir string) {
	for _, s := range cl.Services() {
		for _, s := range append([]cluster.Service{s}, cl.Nodes(s.Name())...) {
			l, ok := s.(cluster.LogFiler)
			if !ok {
				continue
			}
			b, err := os.ReadFile(l.LogFile())
			if err != nil {
				continue
			}
			_ = os.WriteFile(filepath.Join(dir, "logs", s.Name()+".log"), b, 0o644)
		}
	}
}

// harnessVersion is the module version or VCS revision the binary was
// built from.
func harnessVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " " + s.Value[:12]
		}
	}
	return v
}
