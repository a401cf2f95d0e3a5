package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/deliverycheck/deliverycheck/process/guard"
)

// Spec says how to start one child process.
type Spec struct {
	Path string
	Args []string
	Env  []string // added to a minimal environment (PATH, LANG)
	Dir  string
	Log  string // stdout and stderr are appended here
	// Cred, when set, runs the child as another user (PostgreSQL refuses
	// to run as root).
	Cred *syscall.Credential
	// ShutdownSig, when set, is how the child shuts down quickly and
	// still releases what it holds outside its temp dir (PostgreSQL's
	// SIGQUIT frees its System V shared memory; SIGKILL leaks it). If the
	// harness dies, the child gets it instead of SIGKILL (as its parent
	// death signal), and the guard sends it and waits before killing the
	// group.
	ShutdownSig syscall.Signal
}

// Group is one running child in its own process group (pgid == pid),
// with every process it starts: the group's members and the leader's
// descendants, whatever group or session they move to.
type Group struct {
	cmd  *exec.Cmd
	pgid int
	done chan struct{}
	err  error // exit status, valid once done is closed

	mu   sync.Mutex
	seen []int // every pid signalled, so waitGone can wait for reparented ones
	// gone is set once every process of the group is known to be dead.
	// From then on the pgid may be reused by a stranger's new group (pids
	// wrap quickly: pid_max is 32768 on small machines), so Signal and
	// PIDs must not touch it any more.
	gone bool
	g    *guard.Guard // told when the group is gone; nil when untracked
}

// Start starts spec as the leader of a new process group and registers
// the group with g so it is killed even if the harness dies (g nil: not
// tracked). The caller should Kill or Stop the group when finished.
func Start(spec Spec, g *guard.Guard) (*Group, error) {
	logf, err := os.OpenFile(spec.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Dir = spec.Dir
	cmd.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", "LC_ALL=C.UTF-8"}, spec.Env...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	deathSig := syscall.SIGKILL
	if spec.ShutdownSig != 0 {
		deathSig = spec.ShutdownSig
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:    true,
		Pdeathsig:  deathSig,
		Credential: spec.Cred,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.Path, err)
	}
	p := &Group{cmd: cmd, pgid: cmd.Process.Pid, done: make(chan struct{})}
	if g != nil {
		err := g.TrackGroup(p.pgid)
		if err == nil && spec.ShutdownSig != 0 {
			err = g.StopGroupWith(p.pgid, spec.ShutdownSig)
		}
		if err != nil {
			_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
			_ = cmd.Wait()
			return nil, err
		}
		p.g = g
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
		// The leader's pid was just freed; it cannot come back before
		// the pid counter wraps, so an empty group now is ours and gone.
		if len(p.PIDs()) == 0 {
			p.markGone()
		}
	}()
	return p, nil
}

// PGID is the group's id: the leader's pid.
func (p *Group) PGID() int { return p.pgid }

// Done is closed once the leader has exited and been reaped.
func (p *Group) Done() <-chan struct{} { return p.done }

// Err is how the leader exited, as exec.Cmd.Wait reports it (nil for exit
// status 0). It is valid once Done is closed.
func (p *Group) Err() error { return p.err }

func (p *Group) markGone() {
	p.mu.Lock()
	was := p.gone
	p.gone = true
	p.mu.Unlock()
	if !was && p.g != nil {
		_ = p.g.UntrackGroup(p.pgid) // fails only once the guard is closed
	}
}

func (p *Group) isGone() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gone
}

// Exited reports whether the group leader has exited.
func (p *Group) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to every process of the group: its members and every
// descendant of the leader. Descendants matter because some servers move
// their children to new sessions (PostgreSQL backends call setsid), so a
// signal to the group alone would miss them. The leader is stopped first
// so it cannot fork while the rest are signalled.
func (p *Group) Signal(sig syscall.Signal) error {
	if p.isGone() {
		return nil
	}
	if sig == syscall.SIGSTOP || sig == syscall.SIGKILL {
		_ = syscall.Kill(p.pgid, syscall.SIGSTOP)
	}
	pids := p.PIDs()
	if sig == syscall.SIGKILL {
		// Freeze everything first, so nothing forks or reparents
		// between the listing and the kill.
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGSTOP)
		}
		pids = p.PIDs()
	}
	if err := syscall.Kill(-p.pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %v to group %d: %w", sig, p.pgid, err)
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, sig)
	}
	p.mu.Lock()
	p.seen = append(p.seen, pids...)
	p.mu.Unlock()
	return nil
}

// Stop sends sig to the group leader and waits for the whole group to exit;
// if ctx ends first, the group is killed.
func (p *Group) Stop(ctx context.Context, sig syscall.Signal) error {
	// A paused server cannot shut down: wake every process, not only the
	// leader (a start script's leader waits on a VM that would stay stopped).
	_ = p.Signal(syscall.SIGCONT)
	if err := syscall.Kill(p.pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %v to %d: %w", sig, p.pgid, err)
	}
	if err := p.waitGone(ctx); err != nil {
		kctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return errors.Join(fmt.Errorf("graceful stop: %w", err), p.Kill(kctx))
	}
	return nil
}

// Kill SIGKILLs the whole group and waits until every member is gone.
func (p *Group) Kill(ctx context.Context) error {
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	return p.waitGone(ctx)
}

// waitGone waits until the leader is reaped and no process of the group
// (group members, descendants, and any pid ever signalled) is left.
func (p *Group) waitGone(ctx context.Context) error {
	select {
	case <-p.done:
	case <-ctx.Done():
		return fmt.Errorf("wait for pid %d: %w", p.pgid, ctx.Err())
	}
	for {
		left := p.PIDs()
		p.mu.Lock()
		for _, pid := range p.seen {
			if Alive(pid) {
				left = append(left, pid)
			}
		}
		p.mu.Unlock()
		if len(left) == 0 {
			p.markGone()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for pids %v to exit: %w", left, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// PIDs lists the live processes of the group: its members and every
// descendant of the leader, whatever group they moved to.
func (p *Group) PIDs() []int {
	if p.isGone() {
		return nil
	}
	procs := scanProcs()
	in := map[int]bool{}
	if !p.Exited() {
		in[p.pgid] = true
	}
	for _, s := range procs {
		if s.pgid == p.pgid {
			in[s.pid] = true
		}
	}
	// Descendants: repeat until no new child joins (the table is small).
	for changed := true; changed; {
		changed = false
		for _, s := range procs {
			if !in[s.pid] && in[s.ppid] {
				in[s.pid] = true
				changed = true
			}
		}
	}
	out := make([]int, 0, len(in))
	for _, s := range procs {
		if in[s.pid] {
			out = append(out, s.pid)
		}
	}
	return out
}

// procStat is what /proc/<pid>/stat says about one live process.
type procStat struct{ pid, ppid, pgid int }

// scanProcs lists every live (non-zombie) process.
func scanProcs() []procStat {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []procStat
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if s, ok := readStat(pid); ok {
			out = append(out, s)
		}
	}
	return out
}

// readStat parses /proc/<pid>/stat; ok is false for a gone or zombie process.
func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	// Fields after the parenthesised command: state ppid pgrp ...
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
		return procStat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	pgid, _ := strconv.Atoi(f[2])
	return procStat{pid: pid, ppid: ppid, pgid: pgid}, true
}

// Alive reports whether pid is a live, non-zombie process.
func Alive(pid int) bool {
	_, ok := readStat(pid)
	return ok
}
