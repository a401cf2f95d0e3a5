package containers

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/deliverycheck/deliverycheck/process/guard"
)

// Labels on every container this runtime creates.
const (
	// LabelRun names the cluster a container belongs to.
	LabelRun = "io.deliverycheck.run"
	// LabelOwner is "<host>/<pid>/<start time>" of the harness process
	// that created the container, so a later run can tell whether its
	// owner is still alive.
	LabelOwner = "io.deliverycheck.owner"
)

// owner identifies this process across pid reuse: its pid and its start
// time in clock ticks since boot (field 22 of /proc/<pid>/stat).
func owner(pid int) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d/%s", host, pid, startTime(pid))
}

func startTime(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s)
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// ownerGone reports whether the process a LabelOwner value names is dead
// (or was another machine's: those are left alone).
func ownerGone(label string) bool {
	parts := strings.Split(label, "/")
	host, _ := os.Hostname()
	if len(parts) != 3 || parts[0] != host {
		return false
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil {
		return false
	}
	if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
		return true
	}
	return startTime(pid) != parts[2]
}

// sweep removes containers and networks whose harness died without
// cleaning up (kill -9 of the harness, a machine that lost power mid-run):
// the second line of defence after the guard. Nodes' servers go before
// their holders (the engine refuses a holder whose namespace another
// container joined), networks after both.
func sweep(ctx context.Context, cli *client.Client, log *slog.Logger) error {
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", LabelOwner))})
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	slices.SortStableFunc(list, func(a, b container.Summary) int {
		_, ha := a.Labels[LabelHolder]
		_, hb := b.Labels[LabelHolder]
		switch {
		case ha == hb:
			return 0
		case hb:
			return -1
		}
		return 1
	})
	for _, c := range list {
		if !ownerGone(c.Labels[LabelOwner]) {
			continue
		}
		log.Info("removing a container left by a dead run", "id", c.ID[:12], "names", c.Names, "owner", c.Labels[LabelOwner])
		if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !client.IsErrNotFound(err) {
			return fmt.Errorf("remove stale container %s: %w", c.ID[:12], err)
		}
	}
	nets, err := cli.NetworkList(ctx, network.ListOptions{Filters: filters.NewArgs(filters.Arg("label", LabelOwner))})
	if err != nil {
		return fmt.Errorf("list networks: %w", err)
	}
	for _, nw := range nets {
		if !ownerGone(nw.Labels[LabelOwner]) {
			continue
		}
		log.Info("removing a network left by a dead run", "network", nw.Name, "owner", nw.Labels[LabelOwner])
		if err := cli.NetworkRemove(ctx, nw.ID); err != nil && !client.IsErrNotFound(err) {
			return fmt.Errorf("remove stale network %s: %w", nw.Name, err)
		}
	}
	return nil
}

// newGuard starts the watchdog for engine host, which removes the
// runtime's containers and log dirs if the harness dies. Without curl, or
// for an engine address it cannot reach with plain curl (ssh://, TLS), it
// returns nil and the sweep at the next run is the only defence.
func newGuard(host string) (*guard.Guard, error) {
	if _, err := exec.LookPath("curl"); err != nil {
		return nil, nil
	}
	var o guard.Options
	switch {
	case strings.HasPrefix(host, "unix://"):
		o.EngineSocket = strings.TrimPrefix(host, "unix://")
	case strings.HasPrefix(host, "tcp://") && os.Getenv("DOCKER_TLS_VERIFY") == "":
		o.EngineURL = "http://" + strings.TrimPrefix(host, "tcp://")
	default:
		return nil, nil
	}
	return guard.Start(o)
}
