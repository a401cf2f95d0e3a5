package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/runner"
	"github.com/deliverycheck/deliverycheck/scenarios"
)

// suiteRow is one scenario's line in the suite summary (and suite.json).
type suiteRow struct {
	Scenario string           `json:"scenario"`
	Seed     uint64           `json:"seed"`
	Expected checker.Validity `json:"expected"`
	Anomaly  checker.Kind     `json:"expected_anomaly,omitempty"`
	Verdict  checker.Validity `json:"verdict,omitempty"`
	Met      bool             `json:"met"`
	Attempts int              `json:"attempts"`
	Dir      string           `json:"dir,omitempty"`
	Error    string           `json:"error,omitempty"`
	Reasons  []string         `json:"reasons,omitempty"`
	Took     string           `json:"took"`
}

func newSuiteCmd() *cobra.Command {
	var f runFlags
	var retries int
	cmd := &cobra.Command{
		Use:   "suite <scenario|file.yaml>...",
		Short: "Run several scenarios on one set of servers and summarise",
		Long: `suite runs each scenario in turn on one shared set of servers, prints one
summary table and writes <out>/suite.json. A scenario is retried (on fresh
servers) only after a harness or infrastructure error, never because its
verdict was not the expected one.

Exit code: 0 when every scenario met its expectation (a correct pipeline
valid, a known-bad one caught), 1 when one did not, 2 when one was
unknown, 4 when a harness error persisted.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			type item struct {
				s     scenarios.Scenario
				repro string
				spec  runner.Spec
			}
			var items []item
			services := []string{cluster.Postgres}
			for _, a := range args {
				s, repro, err := f.load(a)
				if err != nil {
					return err
				}
				spec, err := runner.FromScenario(s)
				if err != nil {
					return withCode(exitBadInput, err)
				}
				if !slices.Contains(services, s.Broker.Kind) {
					services = append(services, s.Broker.Kind)
				}
				items = append(items, item{s, repro, spec})
			}
			wcmd, err := workerCmd()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			// One set of servers serves every scenario of the same
			// shape; a scenario with other node counts or replication
			// settings gets its own.
			var cl *cluster.Cluster
			defer func() {
				if cl != nil {
					err = errors.Join(err, cl.Close())
				}
			}()
			var rows []suiteRow
			for _, it := range items {
				row := suiteRow{Scenario: it.s.Name, Seed: it.s.Seed, Expected: it.s.Expect.Verdict, Anomaly: it.s.Expect.Anomaly}
				if row.Expected == "" {
					row.Expected = checker.Valid
				}
				start := time.Now()
				if cl != nil && it.spec.Fits(cl) != nil {
					if err := cl.Close(); err != nil {
						slog.Warn("close servers", "err", err)
					}
					cl = nil
				}
				for row.Attempts = 1; row.Attempts <= 1+retries && ctx.Err() == nil; row.Attempts++ {
					if cl == nil {
						sp := it.spec
						if cl, err = cluster.Start(ctx, cluster.Config{Runtime: f.runtime, Images: it.s.Images.Map(), Nodes: sp.Nodes, Standby: sp.Standby, KafkaReplication: sp.KafkaReplication, Services: services, Keep: f.keep}); err != nil {
							row.Error = err.Error()
							cl = nil
							continue
						}
					}
					fmt.Fprintf(out, "== %s (seed %d, attempt %d)\n", it.s.Name, it.s.Seed, row.Attempts)
					o, rerr := runner.Run(ctx, it.spec, runner.Options{
						Out: f.out, Cluster: cl, WorkerCmd: wcmd, Command: it.repro,
						Status: out, TTY: isTTY(out), Log: slog.Default(),
					})
					if rerr != nil {
						row.Error = rerr.Error()
						continue
					}
					printOutcome(out, it.s, o)
					row.Dir = o.Dir
					if !o.Verdict.Checked {
						// Infrastructure trouble: retry on fresh servers.
						row.Error = fmt.Sprint(o.HarnessErr)
						_ = cl.Close()
						cl = nil
						continue
					}
					row.Error = ""
					row.Verdict, row.Reasons, row.Met = o.Verdict.Validity, o.Verdict.Reasons, o.Verdict.Met
					break
				}
				row.Attempts = min(row.Attempts, 1+retries)
				row.Took = time.Since(start).Round(time.Second).String()
				rows = append(rows, row)
			}
			printSuite(out, rows)
			if err := writeSuiteJSON(f.out, rows); err != nil {
				return withCode(exitHarness, err)
			}
			return suiteExit(rows)
		},
	}
	f.add(cmd)
	cmd.Flags().IntVar(&retries, "retries", 1, "retries of a scenario after a harness or infrastructure error")
	return cmd
}

func printSuite(w interface{ Write([]byte) (int, error) }, rows []suiteRow) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nSCENARIO\tEXPECTED\tVERDICT\tMET\tTOOK\tRUN FOLDER")
	for _, r := range rows {
		exp := string(r.Expected)
		if r.Anomaly != "" {
			exp += " (" + string(r.Anomaly) + ")"
		}
		verdict := string(r.Verdict)
		if r.Error != "" && verdict == "" {
			verdict = "harness error"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Scenario, exp, verdict, metWord(r.Met), r.Took, r.Dir)
	}
	tw.Flush()
}

func writeSuiteJSON(root string, rows []suiteRow) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(map[string]any{"scenarios": rows}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(root, "suite.json"), append(b, '\n'), 0o644)
}

// suiteExit: harness errors first, then unmet expectations, then unknowns.
func suiteExit(rows []suiteRow) error {
	code := exitValid
	var bad []string
	for _, r := range rows {
		switch {
		case r.Verdict == "":
			code = exitHarness
		case r.Met:
			continue
		case r.Verdict == checker.Unknown && code == exitValid:
			code = exitUnknown
		case code != exitHarness:
			code = exitInvalid
		}
		bad = append(bad, r.Scenario)
	}
	if code == exitValid {
		return nil
	}
	return withCode(code, fmt.Errorf("%d of %d scenarios did not meet their expectation: %s", len(bad), len(rows), strings.Join(bad, ", ")))
}
