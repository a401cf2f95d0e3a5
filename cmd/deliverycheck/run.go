package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/pipeline"
	"github.com/deliverycheck/deliverycheck/reports"
	"github.com/deliverycheck/deliverycheck/runner"
	"github.com/deliverycheck/deliverycheck/scenarios"
)

// runFlags are the flags run and suite share.
type runFlags struct {
	seed     uint64
	duration time.Duration
	runtime  string
	out      string
	sets     []string
	images   []string
	keep     bool
}

const runtimeHelp = "where servers run: auto (containers when a Docker or Podman engine can provide the images, else local), local, containers"

func (f *runFlags) add(cmd *cobra.Command) {
	cmd.Flags().Uint64Var(&f.seed, "seed", 0, "seed of the run (fault schedule, workload choices); 0 picks one and prints it")
	cmd.Flags().DurationVar(&f.duration, "duration", 0, "how long the workload runs, overriding the scenario's")
	cmd.Flags().StringVar(&f.runtime, "runtime", cluster.Auto, runtimeHelp)
	cmd.Flags().StringArrayVar(&f.images, "image", nil, "container image of one server on the containers runtime, e.g. --image postgres=postgres:16 (repeatable; overrides the scenario's images)")
	cmd.Flags().StringVar(&f.out, "out", "runs", "root of the run folders")
	cmd.Flags().StringArrayVar(&f.sets, "set", nil, "override one scenario value, e.g. --set workload.rate=500 (repeatable)")
	cmd.Flags().BoolVar(&f.keep, "keep", false, "keep the servers' temp dirs (data and logs)")
}

// load resolves a scenario name or file with the flags applied, and the
// command line that reproduces it.
func (f *runFlags) load(arg string) (scenarios.Scenario, string, error) {
	s, err := scenarios.Load(arg)
	if err != nil {
		return s, "", withCode(exitBadInput, err)
	}
	if !slices.Contains(cluster.Runtimes(), f.runtime) {
		return s, "", withCode(exitBadInput, fmt.Errorf("--runtime %q: want one of %s", f.runtime, strings.Join(cluster.Runtimes(), ", ")))
	}
	for _, kv := range f.sets {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return s, "", withCode(exitBadInput, fmt.Errorf("--set %q: want key=value", kv))
		}
		if err := s.Set(k, v); err != nil {
			return s, "", withCode(exitBadInput, err)
		}
	}
	// --image postgres=postgres:16 is --set images.postgres=postgres:16.
	for _, kv := range f.images {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !slices.Contains(cluster.Names(), k) {
			return s, "", withCode(exitBadInput, fmt.Errorf("--image %q: want <server>=<image> with server one of %s", kv, strings.Join(cluster.Names(), ", ")))
		}
		if err := s.Set("images."+k, v); err != nil {
			return s, "", withCode(exitBadInput, err)
		}
	}
	if f.duration > 0 {
		s.Workload.Duration = f.duration
	}
	if f.seed != 0 {
		s.Seed = f.seed
	}
	if s.Seed == 0 {
		s.Seed = uint64(time.Now().UnixNano()%1_000_000_000) + 1
	}
	repro := []string{"deliverycheck", "run", arg, "--seed", strconv.FormatUint(s.Seed, 10)}
	if f.duration > 0 {
		repro = append(repro, "--duration", f.duration.String())
	}
	for _, kv := range f.sets {
		repro = append(repro, "--set", kv)
	}
	for _, kv := range f.images {
		repro = append(repro, "--image", kv)
	}
	return s, strings.Join(repro, " "), nil
}

// workerCmd is how the supervisor starts this binary as a worker.
func workerCmd() ([]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, withCode(exitHarness, fmt.Errorf("find own binary: %w", err))
	}
	return []string{exe, "worker"}, nil
}

func isTTY(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func newRunCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run <scenario|file.yaml>",
		Short: "Run one scenario on real servers and say whether its guarantees held",
		Long: `run provisions the servers, starts the pipeline's workers, runs the
workload and the nemesis, heals everything, drains, reads the final state,
checks the history and writes the run folder (history/, logs/, results.json,
report.html, junit.xml) under --out/<scenario>/<time>/ (latest points at it).

Exit code: 0 valid, 1 invalid, 2 unknown (e.g. interrupted, drain timed
out), 3 bad scenario, 4 harness error. Ctrl-C heals, cleans up and still
writes what it has.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, repro, err := f.load(args[0])
			if err != nil {
				return err
			}
			spec, err := runner.FromScenario(s)
			if err != nil {
				return withCode(exitBadInput, err)
			}
			wcmd, err := workerCmd()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "scenario %s (seed %d): %s\n", s.Name, s.Seed, s.Description)
			if len(spec.Schedule.Steps) > 0 {
				fmt.Fprintf(out, "nemesis: %s\n", spec.Schedule)
			}
			o, err := runner.Run(cmd.Context(), spec, runner.Options{
				Out: f.out, Runtime: f.runtime, Keep: f.keep, WorkerCmd: wcmd, Command: repro,
				Status: out, TTY: isTTY(out), Log: slog.Default(),
			})
			if err != nil {
				return withCode(exitHarness, err)
			}
			printOutcome(out, s, o)
			code := o.ExitCode()
			if !o.Verdict.Checked {
				if bad := badInput(o.HarnessErr); bad != nil {
					return withCode(exitBadInput, bad)
				}
				return withCode(exitHarness, o.HarnessErr)
			}
			if code != exitValid {
				return withCode(code, nil)
			}
			return nil
		},
	}
	f.add(cmd)
	return cmd
}

// badInput is the part of a run's harness error that is the scenario's
// mistake, or nil when the harness itself failed. A mistake in one part
// of the system section is printed as the decoder prints its own,
// "shop.yaml:14: system.transaction[1]: ...", without the harness's
// stages around it ("start pipeline: ..."), which are not the reader's
// concern.
func badInput(err error) error {
	if ce, ok := errors.AsType[*pipeline.ContractError](err); ok {
		return ce
	}
	if errors.Is(err, pipeline.ErrContract) {
		return err
	}
	return nil
}

// printOutcome prints the short summary of one run: its verdict as
// results.json states it, and what the scenario expected. Its reasons and
// errors may quote hostile messages: they go to the terminal through
// reports.PrintableWriter.
func printOutcome(w io.Writer, s scenarios.Scenario, o *runner.Outcome) {
	w = reports.PrintableWriter(w)
	v := o.Verdict
	if !v.Checked {
		what, err := "harness error", o.HarnessErr
		if bad := badInput(err); bad != nil {
			what, err = "bad input", bad // the scenario's system section, not the harness
		}
		fmt.Fprintf(w, "%s: %s: %v\n  run folder: %s\n", s.Name, what, err, o.Dir)
		return
	}
	r := o.Result
	fmt.Fprintf(w, "%s: %s", s.Name, strings.ToUpper(string(v.Validity)))
	if len(v.Reasons) > 0 {
		fmt.Fprintf(w, " (%s)", strings.Join(v.Reasons, "; "))
	}
	fmt.Fprintf(w, "\n  committed %d events, %d ops; %d crashes, %d restarts, %d faults\n",
		r.Counts.Committed, r.Counts.Ops, r.Counts.Crashes, r.Counts.Restarts, r.Counts.Faults)
	for _, sub := range r.Subscriptions {
		fmt.Fprintf(w, "  %-12s applied %d, redelivered %d, dead-lettered %d, stale-skipped %d, lost %d, duplicate effects %d\n",
			sub.Name, sub.Applied, sub.Redelivered, sub.DeadLettered, sub.StaleSkipped, sub.Lost, sub.DuplicateEffect)
	}
	printFacts(w, r)
	if v.Expected != nil && (s.Expect != scenarios.Expect{}) {
		fmt.Fprintf(w, "  expected %s: %s\n", v.Expected, metWord(v.Met))
	}
	fmt.Fprintf(w, "  run folder: %s (report.html)\n", o.Dir)
}

func metWord(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT MET"
}
