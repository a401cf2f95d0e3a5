package cluster_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/cluster/containers"
)

// What the node tests check differently on each runtime: a process is
// stopped by SIGSTOP on the local runtime, a container frozen by the
// engine on the containers one, and what Close must leave behind differs.

// containerNode is a node of a replicated service on the containers
// runtime (containers.KafkaNode, ...).
type containerNode interface {
	ContainerID() string
	HolderID() string
	Paused(context.Context) (bool, error)
	PID(context.Context) (int, error)
}

// checkPaused fails t unless n's server is frozen after Pause.
func checkPaused(t *testing.T, ctx context.Context, n cluster.Service) {
	t.Helper()
	switch n := n.(type) {
	case containerNode:
		if p, err := n.Paused(ctx); err != nil || !p {
			t.Errorf("%s: container not paused after Pause (%v)", n.(cluster.Service).Name(), err)
		}
	case cluster.PIDer:
		// The JVM is stopped (its guard, also listed, is not).
		if !slices.ContainsFunc(n.PIDs(), func(pid int) bool { return procState(pid) == "T" }) {
			t.Errorf("%s: no process stopped after Pause (pids %v)", n.(cluster.Service).Name(), n.PIDs())
		}
	default:
		t.Fatalf("%T: cannot tell whether it is paused", n)
	}
}

// serverPIDs are the host pids of the nodes' servers.
func (k *kafkaNodes) serverPIDs(t *testing.T, ctx context.Context) []int {
	t.Helper()
	if k.c.Runtime() != cluster.Containers {
		return k.c.PIDs()
	}
	var out []int
	for _, n := range k.nodes {
		pid, err := n.(containerNode).PID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, pid)
	}
	return out
}

// incarnations identify the servers running now: a server started again
// has another.
func (k *kafkaNodes) incarnations(t *testing.T, ctx context.Context) []int {
	return k.serverPIDs(t, ctx)
}

// rssMiB is the resident memory of the nodes' JVMs.
func (k *kafkaNodes) rssMiB(t *testing.T) float64 {
	return javaRSSMiB(k.serverPIDs(t, context.Background()))
}

// closeLeavesNoContainer closes a containers-runtime cluster and checks
// that no node container, holder, engine network or namespace name of it
// is left.
func (k *kafkaNodes) closeLeavesNoContainer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli, err := engineClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	var ids, networks, spaces []string
	for _, n := range k.nodes {
		cn := n.(containerNode)
		ids = append(ids, cn.ContainerID(), cn.HolderID())
		spaces = append(spaces, k.c.Network().Namespace(n.Name()))
		nets, err := containerNetworks(ctx, cn.HolderID())
		if err != nil {
			t.Fatal(err)
		}
		networks = append(networks, nets...)
	}
	if len(networks) == 0 {
		t.Fatal("the holders are on no network")
	}
	if err := k.c.Close(); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := cli.ContainerInspect(ctx, id); !client.IsErrNotFound(err) {
			t.Errorf("container %s outlived Close (%v)", id[:12], err)
		}
	}
	for _, nw := range networks {
		if _, err := cli.NetworkInspect(ctx, nw, network.InspectOptions{}); !client.IsErrNotFound(err) {
			t.Errorf("network %s outlived Close (%v)", nw, err)
		}
	}
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range spaces {
		if strings.Contains(string(out), ns) {
			t.Errorf("namespace name %s outlived Close", ns)
		}
		if _, err := os.Stat("/run/netns/" + ns); err == nil {
			t.Errorf("/run/netns/%s outlived Close", ns)
		}
	}
}

// engineClient is a client of the engine the containers runtime found
// (which sets DOCKER_HOST).
func engineClient(ctx context.Context) (*client.Client, error) {
	eng, err := containers.Detect(ctx)
	if err != nil {
		return nil, err
	}
	return client.NewClientWithOpts(client.WithHost(eng.Host), client.WithAPIVersionNegotiation())
}

// containerNetworks are the engine networks container id is on.
func containerNetworks(ctx context.Context, id string) ([]string, error) {
	cli, err := engineClient(ctx)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	info, err := cli.ContainerInspect(ctx, id)
	if err != nil {
		return nil, err
	}
	var out []string
	for name := range info.NetworkSettings.Networks {
		out = append(out, name)
	}
	return out, nil
}

// networkExists reports whether the engine still has network name.
func networkExists(ctx context.Context, name string) (bool, error) {
	cli, err := engineClient(ctx)
	if err != nil {
		return false, err
	}
	defer cli.Close()
	if _, err := cli.NetworkInspect(ctx, name, network.InspectOptions{}); err != nil {
		if client.IsErrNotFound(err) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// nodesMemMiB is the memory the nodes of service hold, in MiB: on the
// local runtime local(pids) of the cluster's processes, on the containers
// runtime the engine's memory figure of each node's container less its
// page cache (what `docker stats` shows), summed.
func nodesMemMiB(tb testing.TB, c *cluster.Cluster, service string, local func([]int) float64) float64 {
	tb.Helper()
	if c.Runtime() != cluster.Containers {
		return local(c.PIDs())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := engineClient(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	defer cli.Close()
	var total float64
	for _, n := range c.Nodes(service) {
		st, err := cli.ContainerStatsOneShot(ctx, n.(containerNode).ContainerID())
		if err != nil {
			tb.Fatal(err)
		}
		var v struct {
			MemoryStats struct {
				Usage uint64            `json:"usage"`
				Stats map[string]uint64 `json:"stats"`
			} `json:"memory_stats"`
		}
		err = json.NewDecoder(st.Body).Decode(&v)
		st.Body.Close()
		if err != nil {
			tb.Fatal(err)
		}
		cache := v.MemoryStats.Stats["total_inactive_file"] + v.MemoryStats.Stats["inactive_file"]
		total += float64(v.MemoryStats.Usage-min(cache, v.MemoryStats.Usage)) / (1 << 20)
	}
	return total
}
