package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/reports"
)

func newCheckCmd() *cobra.Command {
	var (
		guarantees    string
		subscriptions []string
		out           string
		examples      int
		lagAlert      string
	)
	cmd := &cobra.Command{
		Use:   "check <history.jsonl|dir>...",
		Short: "Check recorded history files against the promised delivery guarantees",
		Long: `check merges the given history files (a directory means every *.jsonl in
it), finds lost events, duplicate effects, phantoms, order regressions, gaps
and dead-letter mistakes per subscription, prints a short summary and writes
results.json (next to the first history file unless --out says otherwise;
--out - writes it to stdout).

--guarantees takes presets and settings separated by commas, later ones
overriding earlier ones: at-least-once, effectively-once (the default),
ordered-effectively-once, at-most-once; loss=none|allowed,
duplicate-effects=none|allowed, order=per-key|none, gaps=none|allowed,
subscriptions=a+b, max-stall=<duration> (e.g. 5s; a stall longer is fatal),
max-rss=<size> (e.g. 256MiB, 1GiB or bytes; a process's peak above it is
fatal).

--lag-alert threshold/for (e.g. 100/1s) says when a Prometheus alert
"lag > 100 for 1s" on each subscription's consumer lag (the history's lag
ops) would have fired; it never changes the verdict.

Exit codes: 0 valid, 1 invalid, 2 unknown (drain incomplete, final read
missing), 3 bad input.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return withCode(exitBadInput, errors.New("check: name at least one history file"))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			g, err := checker.ParseGuarantees(guarantees)
			if err != nil {
				return withCode(exitBadInput, err)
			}
			g.Subscriptions = append(g.Subscriptions, subscriptions...)
			g = g.Normalize()
			var alert *checker.LagAlert
			if lagAlert != "" {
				if alert, err = checker.ParseLagAlert(lagAlert); err != nil {
					return withCode(exitBadInput, err)
				}
			}
			paths, err := historyPaths(args)
			if err != nil {
				return withCode(exitBadInput, err)
			}
			r, err := checker.CheckFiles(paths, checker.Options{Guarantees: g, MaxExamples: examples, LagAlert: alert})
			if err != nil {
				return withCode(exitBadInput, fmt.Errorf("check: %w", err))
			}
			if out == "" {
				out = filepath.Join(filepath.Dir(paths[0]), "results.json")
			}
			if err := writeResults(cmd.OutOrStdout(), out, r); err != nil {
				return withCode(exitHarness, err)
			}
			w := cmd.OutOrStdout()
			if out == "-" {
				w = cmd.ErrOrStderr()
			}
			printSummary(w, r, paths, out)
			if code := r.Valid.ExitCode(); code != exitValid {
				return withCode(code, nil)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&guarantees, "guarantees", "g", "effectively-once", "promised guarantees: presets and key=value settings, comma-separated")
	f.StringSliceVar(&subscriptions, "subscription", nil, "a subscription that must apply every committed event (repeatable)")
	f.StringVarP(&out, "out", "o", "", "where to write results.json (- for stdout)")
	f.IntVar(&examples, "examples", 5, "examples with their ops per anomaly")
	f.StringVar(&lagAlert, "lag-alert", "", "say when an alert on consumer lag would have fired: threshold/for, e.g. 100/1s")
	return cmd
}

// historyPaths expands directories to their *.jsonl files, sorted.
func historyPaths(args []string) ([]string, error) {
	var paths []string
	for _, a := range args {
		st, err := os.Stat(a)
		if err != nil {
			return nil, fmt.Errorf("check: %w", err)
		}
		if !st.IsDir() {
			paths = append(paths, a)
			continue
		}
		m, _ := filepath.Glob(filepath.Join(a, "*.jsonl"))
		if len(m) == 0 {
			return nil, fmt.Errorf("check: no *.jsonl history files in %s", a)
		}
		slices.Sort(m)
		paths = append(paths, m...)
	}
	return paths, nil
}

func writeResults(stdout io.Writer, path string, r *checker.Result) error {
	if path == "-" {
		return r.WriteJSON(stdout)
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("check: write results: %w", err)
	}
	err = r.WriteJSON(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return fmt.Errorf("check: write results: %w", err)
	}
	return nil
}

// printSummary prints check's summary of r. Event ids, reasons and
// errors in it may come from hostile messages: they go to the terminal
// through reports.PrintableWriter, with no escape sequence left to act on.
func printSummary(w io.Writer, r *checker.Result, paths []string, out string) {
	w = reports.PrintableWriter(w)
	g := r.Guarantees
	var limits string
	if g.MaxStall > 0 {
		limits += " max-stall=" + g.MaxStall.String()
	}
	if g.MaxRSS > 0 {
		limits += " max-rss=" + checker.FormatSize(g.MaxRSS)
	}
	fmt.Fprintf(w, "%s  (promised: loss=%s duplicate-effects=%s order=%s gaps=%s%s)\n",
		strings.ToUpper(string(r.Valid)), g.Loss, g.DuplicateEffects, g.Order, g.Gaps, limits)
	for _, reason := range r.Reasons {
		fmt.Fprintf(w, "  because: %s\n", reason)
	}
	c := r.Counts
	fmt.Fprintf(w, "  history: %d file(s), %d ops, %d events: %d committed (%d recovered), %d failed, %d in doubt; %d faults, %d crashes\n",
		len(paths), c.Ops, c.Events, c.Committed, c.Recovered, c.Failed, c.InDoubt, c.Faults, c.Crashes)
	fmt.Fprintf(w, "  facts: drain %s, final read %s", r.Facts.Drain, r.Facts.FinalRead)
	if n := len(r.Facts.Cuts); n > 0 {
		fmt.Fprintf(w, ", %d torn line(s) skipped", n)
	}
	fmt.Fprintln(w)
	for _, cut := range r.Facts.Cuts {
		fmt.Fprintf(w, "    torn: %s\n", cut)
	}
	for _, s := range r.Subscriptions {
		fmt.Fprintf(w, "  %s: %d applied, %d redelivered, %d dead-lettered, %d stale-skipped, %d lost, %d duplicate effects\n",
			s.Name, s.Applied, s.Redelivered, s.DeadLettered, s.StaleSkipped, s.Lost, s.DuplicateEffect)
	}
	for _, a := range r.Anomalies {
		mark := "allowed"
		if a.Fatal {
			mark = "FATAL"
		}
		fmt.Fprintf(w, "  %-7s %s in %s: %d", mark, a.Kind, a.Where(), a.Count)
		if len(a.Boundaries) > 0 {
			var bs []string
			for _, b := range a.Boundaries {
				bs = append(bs, fmt.Sprintf("%d after %s", b.Count, b.Boundary))
			}
			fmt.Fprintf(w, " (%s)", strings.Join(bs, ", "))
		}
		fmt.Fprintf(w, ", e.g. %s\n", strings.Join(a.Events[:min(len(a.Events), 5)], ", "))
		if st := a.StageSummary(); st != "" {
			fmt.Fprintf(w, "          where lost: %s\n", st)
		}
	}
	if st := r.TxnStage; st != nil {
		txns := fmt.Sprintf("%d transactions (%d committed, %d aborted)", st.Transactions.Begun, st.Transactions.Committed, st.Transactions.Aborted)
		if st.Transactions.Begun == 0 {
			// A processor without lineage: what the harness saw itself.
			var aborted int64
			for _, tp := range st.Topics {
				aborted += tp.Aborted
			}
			txns = fmt.Sprintf("no transaction recorded, %d aborted records in its output topics", aborted)
		}
		fmt.Fprintf(w, "  transactional stage %s: %s; %s on Kafka's topics", st.Consumer, txns, st.Delivery.Words())
		if st.Database != nil {
			fmt.Fprintf(w, "; %s on the database", st.Database.Delivery.Words())
		}
		fmt.Fprintln(w)
	}
	printFacts(w, r)
	for _, a := range r.Shown {
		where := ""
		if a.Subscription != "" {
			where = " in " + a.Subscription
		}
		fmt.Fprintf(w, "  shown   %s%s: %d\n", a.Kind, where, a.Count)
	}
	if out != "-" {
		fmt.Fprintf(w, "  results: %s\n", out)
	}
}

// printFacts prints the lines both summaries (check's and a run's) give
// after the subscriptions: the intruder, the longest stall, the peak
// memory, the dead-letter redrive, the retries, the backlog (when
// max-backlog-age is promised) and each fault's availability.
func printFacts(w io.Writer, r *checker.Result) {
	if in := r.Intruder; in != nil {
		fmt.Fprintf(w, "  intruder: %s\n", in.Summary())
	}
	if s := checker.StallSummary(r.Stalls); s != "" {
		fmt.Fprintf(w, "  longest stall: %s\n", s)
	}
	if s := checker.ResourcesSummary(r.Resources); s != "" {
		fmt.Fprintf(w, "  peak memory: %s\n", s)
	}
	if s := checker.RedriveSummary(r.Redrive); s != "" {
		fmt.Fprintf(w, "  redrive: %s\n", s)
	}
	if s := checker.RetriesSummary(r.Retries); s != "" {
		fmt.Fprintf(w, "  retries: %s\n", s)
	}
	if l := r.Lag; l != nil {
		if s := l.PeakSummary(); s != "" {
			fmt.Fprintf(w, "  peak lag: %s\n", s)
		}
		if l.Alert != nil {
			for _, line := range l.AlertLines() {
				fmt.Fprintf(w, "  %s\n", line)
			}
		}
	}
	if s := checker.BacklogSummary(r.Backlog); s != "" && r.Guarantees.MaxBacklogAge > 0 {
		fmt.Fprintf(w, "  backlog: %s\n", s)
	}
	for _, aw := range r.Availability.Windows {
		fmt.Fprintf(w, "  availability: %s\n", r.Availability.Summary(aw, r.Faults))
	}
}
