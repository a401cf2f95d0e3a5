package main

import (
	"cmp"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/deliverycheck/deliverycheck/scenarios"
)

func newListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the built-in scenarios with their broker, expected verdict and what each shows",
		Long: `list prints the scenario catalogue built into this binary: the correct
pipeline on each broker under each fault family, one scenario per known-bad
variant with the fault that exposes it (expected verdict: invalid, with the
anomaly it must show), and the order-confirmation worked example.

Run one with "deliverycheck run <name>"; docs/scenarios.md describes the file
format for your own.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tBROKER\tEXPECT\tDESCRIPTION")
			for _, s := range scenarios.Builtin() {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Name, s.Broker.Kind, cmp.Or(s.Expect.Label(), "-"), s.Description)
			}
			return tw.Flush()
		},
	}
}
