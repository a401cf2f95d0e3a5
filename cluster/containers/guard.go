package containers

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
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

// sweep removes containers whose harness died without cleaning up (kill
// -9 of the harness, a machine that lost power mid-run): the second line
// of defence after the guard.
func sweep(ctx context.Context, cli *client.Client, log *slog.Logger) error {
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", LabelOwner))})
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	for _, c := range list {
		if !ownerGone(c.Labels[LabelOwner]) {
			continue
		}
		log.Info("removing a container left by a dead run", "id", c.ID[:12], "names", c.Names, "owner", c.Labels[LabelOwner])
		if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !client.IsErrNotFound(err) {
			return fmt.Errorf("remove stale container %s: %w", c.ID[:12], err)
		}
	}
	return nil
}

// guardScript runs in its own process group and reads container ids and
// temp dirs on stdin. When stdin reaches EOF without "exit" (the harness
// died: SIGKILL, a test timeout), it force-removes every container it was
// told about through the engine's API, with curl, and every dir.
const guardScript = `
ids=""
dirs=""
while IFS= read -r line; do
  case "$line" in
    "add "*) ids="$ids ${line#add }" ;;
    "del "*) keep=""; for i in $ids; do [ "$i" = "${line#del }" ] || keep="$keep $i"; done; ids=$keep ;;
    "dir "*) dirs="$dirs
${line#dir }" ;;
    exit) exit 0 ;;
  esac
done
printf '%s\n' "$dirs" | while IFS= read -r d; do [ -n "$d" ] && rm -rf -- "$d"; done
for i in $ids; do
  if [ -n "$SOCK" ]; then
    curl -s -o /dev/null --max-time 30 --unix-socket "$SOCK" -X DELETE "http://engine/containers/$i?force=true&v=true"
  else
    curl -s -o /dev/null --max-time 30 -X DELETE "$BASE/containers/$i?force=true&v=true"
  fi
done
exit 0
`

// guard is a watchdog process that removes a dead harness's containers.
// A harness that ends normally removes them itself and never needs it.
type guard struct {
	mu  sync.Mutex
	w   *os.File
	cmd *exec.Cmd
}

// newGuard starts the watchdog for engine host. Without curl, or for an
// engine address it cannot reach (ssh://, TLS), it returns nil and the
// sweep at the next run is the only defence.
func newGuard(host string) (*guard, error) {
	if _, err := exec.LookPath("curl"); err != nil {
		return nil, nil
	}
	env := os.Environ()
	switch {
	case strings.HasPrefix(host, "unix://"):
		env = append(env, "SOCK="+strings.TrimPrefix(host, "unix://"))
	case strings.HasPrefix(host, "tcp://") && os.Getenv("DOCKER_TLS_VERIFY") == "":
		env = append(env, "BASE=http://"+strings.TrimPrefix(host, "tcp://"))
	default:
		return nil, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("guard pipe: %w", err)
	}
	cmd := exec.Command("/bin/sh", "-c", guardScript)
	cmd.Stdin = r
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("start guard: %w", err)
	}
	r.Close()
	return &guard{w: w, cmd: cmd}, nil
}

func (g *guard) send(line string) error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.w == nil {
		return fmt.Errorf("guard closed")
	}
	if _, err := g.w.WriteString(line + "\n"); err != nil {
		return fmt.Errorf("guard: %w", err)
	}
	return nil
}

// track asks the guard to remove container id if the harness dies.
func (g *guard) track(id string) error { return g.send("add " + id) }

// trackDir asks the guard to remove dir if the harness dies.
func (g *guard) trackDir(dir string) error {
	if strings.ContainsAny(dir, "\n") {
		return fmt.Errorf("guard: bad dir %q", dir)
	}
	return g.send("dir " + dir)
}

// untrack tells the guard container id is gone.
func (g *guard) untrack(id string) error { return g.send("del " + id) }

// close tells the guard the harness cleaned up by itself and waits for it.
func (g *guard) close() error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.w == nil {
		return nil
	}
	_, _ = g.w.WriteString("exit\n")
	g.w.Close()
	g.w = nil
	if err := g.cmd.Wait(); err != nil {
		return fmt.Errorf("guard: %w", err)
	}
	return nil
}

// pid is the guard's own pid, 0 without a guard.
func (g *guard) pid() int {
	if g == nil {
		return 0
	}
	return g.cmd.Process.Pid
}
