package containers

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"
	"github.com/testcontainers/testcontainers-go"
)

// The network containers are attached to, and why it is settled before
// any service starts.
//
// testcontainers-go attaches each container to the engine's default
// bridge network when the engine lists one by the name it expects, and
// otherwise to a network of its own (reaper_default), which it creates on
// the first container create that needs it, from a fresh provider per
// container. On an engine that has never had that network, the three
// services cluster.Start creates at once race to make it, and Podman
// answers the losers with an error testcontainers does not take for "it
// already exists": a first run on a fresh machine failed with "network
// name reaper_default already used" (issue 19).
//
// Two things make that impossible:
//   - every container is created through the Docker provider
//     ([providerOption]). testcontainers' Podman provider, chosen whenever
//     DOCKER_HOST names a podman.sock, expects the default network to be
//     called "podman", but Podman's Docker-compatible API lists it as
//     "bridge", as Docker does; so with the Podman provider testcontainers
//     never finds it and always falls back to its own network.
//   - [ensureNetwork] runs once per Runtime, before any container exists:
//     if the engine lists no "bridge" (a Docker daemon run with
//     --bridge=none), it creates testcontainers' fallback network itself,
//     so every later create finds it instead of racing to make it.

// providerOption makes testcontainers use its Docker provider for a
// container (see the comment above).
var providerOption = testcontainers.WithProvider(testcontainers.ProviderDocker)

// networkMu serialises ensureNetwork between Runtimes of one process; a
// second harness process on the same engine is handled by ensureNetwork
// treating "already exists" as done.
var networkMu sync.Mutex

// ensureNetwork makes sure the network testcontainers will attach
// containers to exists before any are created: the engine's "bridge", or
// else testcontainers' fallback network, created here. It returns the
// network's name.
func ensureNetwork(ctx context.Context, cli *client.Client, log *slog.Logger) (string, error) {
	return ensureNetworkNamed(ctx, cli, log, testcontainers.Bridge, testcontainers.ReaperDefault)
}

// ensureNetworkNamed is ensureNetwork with the names as parameters, so a
// test can take the fallback path on an engine that has a bridge.
func ensureNetworkNamed(ctx context.Context, cli *client.Client, log *slog.Logger, bridge, fallback string) (string, error) {
	networkMu.Lock()
	defer networkMu.Unlock()
	has := func(name string) (bool, error) {
		list, err := cli.NetworkList(ctx, network.ListOptions{})
		if err != nil {
			return false, fmt.Errorf("list networks: %w", err)
		}
		return slices.ContainsFunc(list, func(n network.Summary) bool { return n.Name == name }), nil
	}
	if ok, err := has(bridge); err != nil || ok {
		return bridge, err
	}
	name := fallback
	if ok, err := has(name); err != nil || ok {
		return name, err
	}
	_, err := cli.NetworkCreate(ctx, name, network.CreateOptions{
		Driver:     testcontainers.Bridge,
		Attachable: true,
		Labels:     testcontainers.GenericLabels(),
	})
	if err != nil && !errdefs.IsConflict(err) {
		// Another harness on this engine may have made it since the
		// list (Podman does not answer that with a conflict).
		if ok, lerr := has(name); lerr != nil || !ok {
			return "", fmt.Errorf("create network %s: %w", name, err)
		}
	}
	if err == nil {
		log.Info("created the containers' network (the engine has no bridge network)", "network", name)
	}
	return name, nil
}
