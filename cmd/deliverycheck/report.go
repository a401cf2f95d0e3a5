package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/deliverycheck/deliverycheck/reports"
)

func newReportCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "report <run-dir>",
		Short: "Render report.html and junit.xml again from a run folder",
		Long: `report reads a run folder (run.json, results.json, history/, logs/) and
writes report.html and junit.xml into it again, e.g. after an upgrade of
deliverycheck. If results.json is missing, the history is checked again with
the run's guarantees (and lag alert) and results.json and lag.om.txt are
written too. --out writes the
files to another directory (log links still point at logs/ there).

The exit code is the run's verdict: 0 valid, 1 invalid, 2 unknown; 3 when
the folder cannot be read.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return withCode(exitBadInput, errors.New("report: name one run folder"))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			run, res, err := reports.ReadRunDir(dir)
			if err != nil {
				return withCode(exitBadInput, err)
			}
			if out == "" {
				out = dir
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return withCode(exitHarness, fmt.Errorf("report: %w", err))
			}
			_, statErr := os.Stat(filepath.Join(dir, reports.ResultsFile))
			rewriteResults := out != dir || errors.Is(statErr, os.ErrNotExist)
			if rewriteResults {
				err = reports.WriteAll(out, run, res)
			} else {
				err = errors.Join(
					reports.HTMLFile(filepath.Join(out, reports.HTMLName), run, res),
					reports.JUnitFile(filepath.Join(out, reports.JUnitName), run, res))
			}
			if err != nil {
				return withCode(exitHarness, err)
			}
			verdict := reports.Judge(run, res).Validity
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n  %s\n  %s\n", verdict, run.Scenario,
				filepath.Join(out, reports.HTMLName), filepath.Join(out, reports.JUnitName))
			if code := verdict.ExitCode(); code != exitValid {
				return withCode(code, nil)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "out", "o", "", "directory to write into (default: the run folder)")
	return cmd
}
