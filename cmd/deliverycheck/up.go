package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/deliverycheck/deliverycheck/cluster"
)

// startCluster starts a cluster and prints what a person needs to reach it.
func startCluster(cmd *cobra.Command, cfg cluster.Config) (*cluster.Cluster, error) {
	start := time.Now()
	c, err := cluster.Start(cmd.Context(), cfg)
	if err != nil {
		return nil, withCode(exitHarness, err)
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "cluster ready in %s (runtime %s)\n", time.Since(start).Round(time.Millisecond), c.Runtime())
	versions := c.Versions()
	for _, s := range c.Services() {
		logs := "(none)"
		if l, ok := s.(cluster.LogFiler); ok {
			logs = l.LogFile()
		}
		fmt.Fprintf(out, "  %-9s %-45s via %s\n            server %s, logs %s\n",
			s.Name(), versions[s.Name()], c.ClientURL(s.Name()), s.Endpoint(), logs)
	}
	return c, nil
}

func newUpCmd() *cobra.Command {
	var cfg cluster.Config
	var hold time.Duration
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start the servers behind their proxies and keep them up until Ctrl-C",
		Long: `up starts PostgreSQL, Kafka and RabbitMQ (or the ones named with --service)
on free loopback ports, each behind a toxiproxy link, prints how to reach
them, and tears everything down on Ctrl-C (or after --for).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			c, err := startCluster(cmd, cfg)
			if err != nil {
				return err
			}
			defer func() { err = errors.Join(err, c.Close()) }()
			ctx := cmd.Context()
			if hold > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, hold)
				defer cancel()
			}
			fmt.Fprintln(cmd.OutOrStdout(), "press Ctrl-C to stop")
			<-ctx.Done()
			return nil
		},
	}
	addClusterFlags(cmd, &cfg)
	cmd.Flags().DurationVar(&hold, "for", 0, "stop after this long instead of waiting for Ctrl-C")
	return cmd
}

func newDemoCmd() *cobra.Command {
	var cfg cluster.Config
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Start all three servers, write and read back through each proxy, tear down",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			c, err := startCluster(cmd, cfg)
			if err != nil {
				return err
			}
			defer func() { err = errors.Join(err, c.Close()) }()
			ctx, cancel := context.WithTimeout(cmd.Context(), 60*time.Second)
			defer cancel()
			var errs []error
			for _, r := range cluster.Smoke(ctx, c) {
				status := "ok"
				if r.Err != nil {
					status = "FAILED: " + r.Err.Error()
					errs = append(errs, r.Err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "  %-9s acknowledged write read back through its proxy in %s: %s\n",
					r.Service, r.Took.Round(time.Millisecond), status)
			}
			if err := errors.Join(errs...); err != nil {
				return withCode(exitHarness, err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), "demo: all servers work; tearing down")
			return nil
		},
	}
	addClusterFlags(cmd, &cfg)
	return cmd
}

func addClusterFlags(cmd *cobra.Command, cfg *cluster.Config) {
	cmd.Flags().StringVar(&cfg.Runtime, "runtime", cluster.Auto, runtimeHelp)
	cmd.Flags().StringToStringVar(&cfg.Images, "image", nil, "container image per server on the containers runtime, e.g. --image postgres=postgres:16,kafka=apache/kafka:4.1.1")
	cmd.Flags().StringSliceVar(&cfg.Services, "service", nil, "services to start (default all: postgres,kafka,rabbitmq)")
	cmd.Flags().BoolVar(&cfg.Keep, "keep", false, "keep the servers' temp dirs (data and logs) after exit")
	cmd.Flags().StringVar(&cfg.KafkaVersion, "kafka-version", "", "Kafka broker version (default: the built-in one)")
}
