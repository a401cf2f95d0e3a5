package main

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/cluster/containers"
	"github.com/deliverycheck/deliverycheck/cluster/local"
	"github.com/deliverycheck/deliverycheck/pipeline/debezium"
)

func newDoctorCmd() *cobra.Command {
	var kafkaVersion string
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Show which runtimes and servers this machine has, and how to install what is missing",
		Long: `doctor lists each runtime and server deliverycheck can use: found or not,
its exact version, and the one command that installs what is missing.
It exits non-zero when the default scenario could not run here.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			checks := local.Doctor(cmd.Context(), kafkaVersion)
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "runtime local (servers as child processes):")
			ok := true
			for _, c := range checks {
				mark := "ok"
				if !c.OK {
					mark, ok = "MISSING", false
				}
				fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", c.Name, mark, c.Version, c.Detail)
				if !c.OK {
					fmt.Fprintf(w, "  \t\tinstall:\t%s\n", c.Install)
				}
			}
			if dir, ok := debezium.JarsStatus(); ok {
				fmt.Fprintf(w, "  debezium\tok\t%s on Kafka Connect %s\t%s\n", debezium.Version, debezium.ConnectVersion, dir)
			} else {
				// Optional: only the debezium relay needs it, and it is
				// fetched on first use.
				fmt.Fprintf(w, "  debezium\tnot fetched\t%s on Kafka Connect %s\tfetched on first use of the debezium relay, or now with: deliverycheck deps\n", debezium.Version, debezium.ConnectVersion)
			}
			ctx := cmd.Context()
			fmt.Fprintln(w, "runtime containers (servers in Docker or Podman containers):")
			eng, err := containers.Detect(ctx)
			if err != nil {
				fmt.Fprintf(w, "  engine\tMISSING\t\t%v\n", err)
				fmt.Fprintf(w, "  \t\tinstall:\tDocker, or Podman serving its Docker API (sudo bash scripts/containers.sh)\n")
			} else {
				fmt.Fprintf(w, "  engine\tok\t%s %s\t%s (%s)\n", eng.Name, eng.Version, eng.Host, eng.From)
				for _, n := range cluster.Names() {
					img := containers.DefaultImage(n)
					mark, detail := "ok", "present or pullable"
					if err := containers.CanProvide(ctx, eng, []string{img}); err != nil {
						mark, detail = "MISSING", "neither present nor pullable: pull it, build images/ (make images) or set DELIVERYCHECK_IMAGE_"+strings.ToUpper(n)
					}
					fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", n, mark, img, detail)
				}
			}
			rt, why := cluster.ResolveRuntime(ctx, cluster.Auto, cluster.ImageList(nil, cluster.Names()))
			fmt.Fprintf(w, "--runtime auto picks %s:\t%s\n", rt, why)
			w.Flush()
			if rt == cluster.Containers {
				ok = true // the default runtime then needs nothing local
			}
			if !ok {
				fmt.Fprintln(os.Stderr, "doctor: the default scenario cannot run here; `make deps` installs everything")
				return withCode(exitHarness, nil)
			}
			fmt.Fprintln(cmd.OutOrStdout(), "doctor: everything the default scenario needs is here")
			return nil
		},
	}
	cmd.Flags().StringVar(&kafkaVersion, "kafka-version", local.DefaultKafkaVersion, "Kafka broker version to look for")
	return cmd
}

func newDepsCmd() *cobra.Command {
	var kafkaVersion string
	cmd := &cobra.Command{
		Use:   "deps",
		Short: "Fetch and prepare what runs need beyond Debian packages (the Kafka broker jars; Kafka Connect and Debezium for the debezium relay)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := local.PrepareKafka(cmd.Context(), kafkaVersion)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "kafka %s ready (jars fetched, storage and class cache prepared in %s)\n", kafkaVersion, dir)
			libs, err := debezium.Jars(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "debezium %s on kafka connect %s ready (jars in %s)\n", debezium.Version, debezium.ConnectVersion, libs)
			return nil
		},
	}
	cmd.Flags().StringVar(&kafkaVersion, "kafka-version", local.DefaultKafkaVersion, "Kafka broker version to fetch")
	return cmd
}
