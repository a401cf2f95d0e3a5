package local

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
)

// guardScript runs in its own process group and reads commands on stdin.
// When stdin reaches EOF without "exit" (the harness died: SIGKILL, panic,
// test timeout), it kills every tracked process group and removes every
// tracked directory. A harness that cleans up itself sends "exit" first.
const guardScript = `
groups=""
dirs=""
while IFS= read -r line; do
  case "$line" in
    "group "*) groups="$groups ${line#group }" ;;
    "ungroup "*) keep=""; for g in $groups; do [ "$g" = "${line#ungroup }" ] || keep="$keep $g"; done; groups=$keep ;;
    "dir "*) dirs="$dirs
${line#dir }" ;;
    exit) exit 0 ;;
  esac
done
for g in $groups; do kill -KILL "-$g" 2>/dev/null; done
sleep 0.5
for g in $groups; do kill -KILL "-$g" 2>/dev/null; done
printf '%s\n' "$dirs" | while IFS= read -r d; do [ -n "$d" ] && rm -rf -- "$d"; done
exit 0
`

// guard is a watchdog process that cleans up after a harness that died.
// One guard serves one service; it is not needed for correctness of a run
// that ends normally, only for the one that doesn't.
type guard struct {
	mu  sync.Mutex
	w   *os.File
	cmd *exec.Cmd
}

// newGuard starts the watchdog.
func newGuard() (*guard, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("guard pipe: %w", err)
	}
	cmd := exec.Command("/bin/sh", "-c", guardScript)
	cmd.Stdin = r
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
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.w == nil {
		return fmt.Errorf("guard closed")
	}
	if strings.ContainsAny(line, "\n") {
		return fmt.Errorf("guard: bad line %q", line)
	}
	if _, err := g.w.WriteString(line + "\n"); err != nil {
		return fmt.Errorf("guard: %w", err)
	}
	return nil
}

// trackGroup asks the guard to kill process group pgid if the harness dies.
func (g *guard) trackGroup(pgid int) error { return g.send(fmt.Sprintf("group %d", pgid)) }

// untrackGroup tells the guard group pgid is gone: its id may be reused
// by someone else's group, which the guard must then leave alone.
func (g *guard) untrackGroup(pgid int) error { return g.send(fmt.Sprintf("ungroup %d", pgid)) }

// trackDir asks the guard to remove dir if the harness dies.
func (g *guard) trackDir(dir string) error { return g.send("dir " + dir) }

// close tells the guard the harness cleaned up by itself and waits for it.
func (g *guard) close() error {
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

// pid is the guard's own pid (for tests that check nothing is left).
func (g *guard) pid() int { return g.cmd.Process.Pid }
