// Command deliverycheck verifies the delivery guarantees of outbox → relay
// → broker → inbox pipelines by running them on real PostgreSQL, Kafka and
// RabbitMQ while breaking those servers on purpose, then checking the
// recorded history for lost events, duplicate effects and order violations.
package main

import (
	"context"
	"errors"
	"fmt"
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
	root := newRootCmd()
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitValid
	}
	var ec interface{ ExitCode() int }
	if errors.As(err, &ec) {
		if msg := err.Error(); ec.ExitCode() != exitValid && msg != "" && !isBareExit(err) {
			fmt.Fprintln(os.Stderr, "deliverycheck:", msg)
		}
		return ec.ExitCode()
	}
	fmt.Fprintln(os.Stderr, "deliverycheck:", err)
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
	return root
}
