// Command deliverycheck verifies the delivery guarantees of outbox → relay
// → broker → inbox pipelines by running them on real PostgreSQL, Kafka and
// RabbitMQ while breaking those servers on purpose, then checking the
// recorded history for lost events, duplicate effects and order violations.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	os.Exit(run())
}

// run executes the command line and returns the exit code. Deferred
// cleanups in commands run before it returns, also on panic (cobra does not
// recover, so a panic unwinds through them and then crashes as usual).
func run() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return exitCode(newRootCmd().ExecuteContext(ctx), os.Stderr)
}

// exitCode is the process exit code of a command's error, which it
// prints to stderr unless it only carries a code.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return exitValid
	}
	var ec interface{ ExitCode() int }
	if errors.As(err, &ec) {
		if msg := err.Error(); ec.ExitCode() != exitValid && msg != "" && !isBareExit(err) {
			fmt.Fprintln(stderr, "deliverycheck:", msg)
		}
		return ec.ExitCode()
	}
	fmt.Fprintln(stderr, "deliverycheck:", err)
	return exitHarness
}

func isBareExit(err error) bool {
	var e *exitCodeError
	return errors.As(err, &e) && e.err == nil
}

func newRootCmd() *cobra.Command {
	var verbose bool
	root := &cobra.Command{
		Use:   "deliverycheck",
		Short: "Break real brokers and databases on purpose; check that no event was lost, duplicated or reordered",
		Long: `deliverycheck starts real PostgreSQL, Kafka and RabbitMQ, drives a workload
through a transactional outbox → relay → broker → inbox consumer pipeline,
injects faults where delivery guarantees break, and checks the recorded
history for lost events, duplicate effects and order violations.

Exit codes: 0 valid, 1 invalid, 2 unknown, 3 bad input, 4 harness error.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(cmd *cobra.Command, args []string) {
			level := slog.LevelInfo
			if verbose {
				level = slog.LevelDebug
			}
			slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
		},
	}
	root.PersistentFlags().BoolVarP(&verbose, "verbose", "v", false, "log debug detail")
	root.AddCommand(newDoctorCmd(), newDepsCmd(), newUpCmd(), newDemoCmd(), newWorkerCmd())
	root.AddCommand(newCheckCmd())
	root.AddCommand(newReportCmd())
	root.AddCommand(newListCmd())
	root.AddCommand(newRunCmd(), newSuiteCmd())
	usageErrors(root)
	return root
}

// usageErrors makes every usage mistake (an unknown flag or command, a
// wrong number of arguments) exit with exitBadInput, as --help documents,
// rather than as a harness error.
func usageErrors(root *cobra.Command) {
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return withCode(exitBadInput, fmt.Errorf("%w (see %s --help)", err, c.CommandPath()))
	})
	if root.Args == nil && root.Run == nil && root.RunE == nil {
		// Runnable, so that its arguments are validated: `deliverycheck
		// bogus` is then a usage error rather than the help and exit 0.
		root.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
		root.Args = func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown command %q (see %s --help)", args[0], c.CommandPath())
			}
			return nil
		}
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if args := c.Args; args != nil {
			c.Args = func(c *cobra.Command, a []string) error {
				if err := args(c, a); err != nil {
					return withCode(exitBadInput, err)
				}
				return nil
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}
