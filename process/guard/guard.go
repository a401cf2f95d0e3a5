// Package guard runs a watchdog process that cleans up after a harness
// that died without doing so itself (SIGKILL, a test timeout, a crash in
// a cgo call): it kills the process groups, removes the containers and
// deletes the temp dirs it was told about, and removes the network
// namespaces and host links of a run's nodes (cluster/netns).
//
// The watchdog is a small shell script in its own process group reading
// commands on a pipe from the harness. When the pipe reaches EOF without
// an "exit" command, the harness is gone and it cleans up. A harness that
// ends normally cleans up itself and closes the guard first, so the guard
// never touches anything then.
//
// A group can be given a stop signal ([Guard.StopGroupWith]): its leader
// gets that signal first and up to [StopGrace] to exit before every group
// is killed. PostgreSQL needs it: killed with SIGKILL it never releases
// its System V shared memory segment, which outlives the run.
package guard

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// script is the watchdog. Containers are removed through the engine's
// Docker API with curl: $SOCK is a unix socket, else $BASE an http URL.
const script = `
groups=""
stops=""
ids=""
dirs=""
nets=""
links=""
engnets=""
while IFS= read -r line; do
  case "$line" in
    "group "*) groups="$groups ${line#group }" ;;
    "stop "*) stops="$stops ${line#stop }" ;;
    "ungroup "*)
      keep=""; for g in $groups; do [ "$g" = "${line#ungroup }" ] || keep="$keep $g"; done; groups=$keep
      keep=""; for s in $stops; do [ "${s%%:*}" = "${line#ungroup }" ] || keep="$keep $s"; done; stops=$keep ;;
    "container "*) ids="$ids ${line#container }" ;;
    "uncontainer "*) keep=""; for i in $ids; do [ "$i" = "${line#uncontainer }" ] || keep="$keep $i"; done; ids=$keep ;;
    "network "*) engnets="$engnets ${line#network }" ;;
    "unnetwork "*) keep=""; for i in $engnets; do [ "$i" = "${line#unnetwork }" ] || keep="$keep $i"; done; engnets=$keep ;;
    "netns "*) nets="$nets ${line#netns }" ;;
    "unnetns "*) keep=""; for x in $nets; do [ "$x" = "${line#unnetns }" ] || keep="$keep $x"; done; nets=$keep ;;
    "iflink "*) links="$links ${line#iflink }" ;;
    "uniflink "*) keep=""; for x in $links; do [ "$x" = "${line#uniflink }" ] || keep="$keep $x"; done; links=$keep ;;
    "dir "*) dirs="$dirs
${line#dir }" ;;
    exit) exit 0 ;;
  esac
done
if [ -n "$stops" ]; then
  for s in $stops; do kill -CONT "-${s%%:*}" 2>/dev/null; kill "-${s#*:}" "${s%%:*}" 2>/dev/null; done
  n=0
  while [ "$n" -lt $GRACE_TICKS ]; do
    up=""
    for s in $stops; do
      case "$(cat "/proc/${s%%:*}/stat" 2>/dev/null)" in ""|*") Z "*|*") X "*) ;; *) up=1 ;; esac
    done
    [ -z "$up" ] && break
    sleep 0.05; n=$((n+1))
  done
fi
if [ -n "$groups" ]; then
  for g in $groups; do kill -KILL "-$g" 2>/dev/null; done
  sleep 0.5
  for g in $groups; do kill -KILL "-$g" 2>/dev/null; done
fi
engine() {
  if [ -n "$SOCK" ]; then
    curl -s -o /dev/null --max-time 30 --unix-socket "$SOCK" -X DELETE "http://engine/$1"
  elif [ -n "$BASE" ]; then
    curl -s -o /dev/null --max-time 30 -X DELETE "$BASE/$1"
  fi
}
# Newest first, then once more: a container whose namespace others joined
# (a node's holder, cluster/containers) is refused while they exist.
rev=""; for i in $ids; do rev="$i $rev"; done
for pass in 1 2; do
  for i in $rev; do engine "containers/$i?force=true&v=true"; done
done
# Networks after the containers on them.
for i in $engnets; do engine "networks/$i"; done
# After the groups: a namespace lives on while a process is in it.
for x in $links; do ip link delete dev "$x" 2>/dev/null; done
for x in $nets; do
  case "$x" in [A-Za-z0-9]*) ;; *) continue ;; esac
  ip netns delete "$x" 2>/dev/null
  rm -rf -- "/etc/netns/$x"
done
[ -n "$nets" ] && rmdir /etc/netns 2>/dev/null
printf '%s\n' "$dirs" | while IFS= read -r d; do [ -n "$d" ] && rm -rf -- "$d"; done
exit 0
`

// Options say where containers are removed. Both empty: the guard can
// kill process groups and remove dirs, not containers.
type Options struct {
	// EngineSocket is the path of a container engine's unix socket.
	EngineSocket string
	// EngineURL is a container engine's plain-http API base URL.
	EngineURL string
}

// Guard is one watchdog process. Its methods are safe for concurrent
// use, and a nil *Guard accepts every call and does nothing (for callers
// that could not start one).
type Guard struct {
	mu  sync.Mutex
	w   *os.File
	cmd *exec.Cmd
}

// Start starts the watchdog.
func Start(o Options) (*Guard, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("guard pipe: %w", err)
	}
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Stdin = r
	cmd.Env = append(os.Environ(), "SOCK="+o.EngineSocket, "BASE="+o.EngineURL,
		"GRACE_TICKS="+strconv.Itoa(int(StopGrace/(50*time.Millisecond))))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("start guard: %w", err)
	}
	r.Close()
	return &Guard{w: w, cmd: cmd}, nil
}

func (g *Guard) send(verb, arg string) error {
	if g == nil {
		return nil
	}
	if arg == "" || strings.ContainsAny(arg, "\n") {
		return fmt.Errorf("guard: bad %s %q", verb, arg)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.w == nil {
		return fmt.Errorf("guard closed")
	}
	if _, err := g.w.WriteString(verb + " " + arg + "\n"); err != nil {
		return fmt.Errorf("guard: %w", err)
	}
	return nil
}

// TrackGroup asks the guard to kill process group pgid if the harness dies.
func (g *Guard) TrackGroup(pgid int) error { return g.send("group", strconv.Itoa(pgid)) }

// StopGrace bounds how long the guard waits, after sending their stop
// signals, for the leaders of groups given one to exit before it kills
// every group.
const StopGrace = 10 * time.Second

// StopGroupWith asks the guard, if the harness dies, to send sig to the
// leader of group pgid (and SIGCONT to the group, in case it is paused)
// and give it up to StopGrace to exit before the group is killed like any
// other. The group must be tracked too (TrackGroup); UntrackGroup forgets
// both.
func (g *Guard) StopGroupWith(pgid int, sig syscall.Signal) error {
	return g.send("stop", strconv.Itoa(pgid)+":"+strconv.Itoa(int(sig)))
}

// UntrackGroup tells the guard group pgid is gone: its id may be reused
// by someone else's group, which the guard must then leave alone.
func (g *Guard) UntrackGroup(pgid int) error { return g.send("ungroup", strconv.Itoa(pgid)) }

// TrackContainer asks the guard to remove container id (with its
// anonymous volumes) if the harness dies.
func (g *Guard) TrackContainer(id string) error { return g.send("container", id) }

// UntrackContainer tells the guard container id is gone.
func (g *Guard) UntrackContainer(id string) error { return g.send("uncontainer", id) }

// TrackNetwork asks the guard to remove the engine's network id (after
// every container) if the harness dies.
func (g *Guard) TrackNetwork(id string) error { return g.send("network", id) }

// UntrackNetwork tells the guard network id is gone.
func (g *Guard) UntrackNetwork(id string) error { return g.send("unnetwork", id) }

// TrackDir asks the guard to remove dir if the harness dies.
func (g *Guard) TrackDir(dir string) error { return g.send("dir", dir) }

// netName is what TrackNetns and TrackLink accept: the script puts a
// namespace's name in a path it removes (/etc/netns/<name>), so no '/',
// no "..", nothing a shell word would split.
var netName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

func (g *Guard) sendName(verb, name string) error {
	if g == nil {
		return nil
	}
	if !netName.MatchString(name) {
		return fmt.Errorf("guard: bad %s name %q", verb, name)
	}
	return g.send(verb, name)
}

// TrackNetns asks the guard to delete network namespace name (ip netns
// delete) and its /etc/netns/<name> dir if the harness dies. It does so
// after killing the tracked groups, since a namespace a process is still
// in outlives its deletion.
func (g *Guard) TrackNetns(name string) error { return g.sendName("netns", name) }

// UntrackNetns tells the guard namespace name is gone.
func (g *Guard) UntrackNetns(name string) error { return g.sendName("unnetns", name) }

// TrackLink asks the guard to delete the host's network interface name
// (ip link delete: both ends of a veth) if the harness dies.
func (g *Guard) TrackLink(name string) error { return g.sendName("iflink", name) }

// UntrackLink tells the guard link name is gone.
func (g *Guard) UntrackLink(name string) error { return g.sendName("uniflink", name) }

// Open reports whether the guard is running and listening.
func (g *Guard) Open() bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.w != nil
}

// Close tells the guard the harness cleaned up by itself and waits for it
// to exit. Safe to call more than once.
func (g *Guard) Close() error {
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

// PID is the watchdog's own pid (0 for a nil guard), for tests that check
// nothing outlives a run.
func (g *Guard) PID() int {
	if g == nil {
		return 0
	}
	return g.cmd.Process.Pid
}
