package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/deliverycheck/deliverycheck/pipeline/worker"
	"github.com/deliverycheck/deliverycheck/process/supervisor"
)

// newWorkerCmd is the hidden entry point of a pipeline process: the
// supervisor starts the deliverycheck binary itself as each producer,
// relay and consumer, so a crash of one is a real process crash.
func newWorkerCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "worker",
		Short:  "Run one pipeline process (started by the harness; spec in " + supervisor.SpecEnv + ")",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if code := worker.Main(os.Getenv(supervisor.SpecEnv)); code != 0 {
				return withCode(code, nil)
			}
			return nil
		},
	}
}
