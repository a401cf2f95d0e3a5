package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// procSpec says how to start one child process.
type procSpec struct {
	path string
	args []string
	env  []string // added to a minimal environment (PATH, LANG)
	dir  string
	log  string // stdout and stderr are appended here
	// cred, when set, runs the child as another user (PostgreSQL refuses
	// to run as root).
	cred *syscall.Credential
}

// proc is one running child in its own process group (pgid == pid).
type proc struct {
	cmd  *exec.Cmd
	pgid int
	done chan struct{}
	err  error // exit status, valid once done is closed
}

// startProc starts spec as the leader of a new process group and registers
// the group with g so it is killed even if the harness dies.
func startProc(spec procSpec, g *guard) (*proc, error) {
	logf, err := os.OpenFile(spec.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(spec.path, spec.args...)
	cmd.Dir = spec.dir
	cmd.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", "LC_ALL=C.UTF-8"}, spec.env...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
		Credential: spec.cred,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.path, err)
	}
	p := &proc{cmd: cmd, pgid: cmd.Process.Pid, done: make(chan struct{})}
	if g != nil {
		if err := g.trackGroup(p.pgid); err != nil {
			_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
			_ = cmd.Wait()
			return nil, err
		}
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the group leader has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to every process in the group.
func (p *proc) signal(sig syscall.Signal) error {
	if err := syscall.Kill(-p.pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %v to group %d: %w", sig, p.pgid, err)
	}
	return nil
}

// stop sends sig to the group leader and waits for the whole group to exit;
// if ctx ends first, the group is killed.
func (p *proc) stop(ctx context.Context, sig syscall.Signal) error {
	_ = syscall.Kill(p.pgid, syscall.SIGCONT) // a paused server cannot shut down
	if err := syscall.Kill(p.pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %v to %d: %w", sig, p.pgid, err)
	}
	if err := p.waitGone(ctx); err != nil {
		kctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return errors.Join(fmt.Errorf("graceful stop: %w", err), p.kill(kctx))
	}
	return nil
}

// kill SIGKILLs the whole group and waits until every member is gone.
func (p *proc) kill(ctx context.Context) error {
	if err := p.signal(syscall.SIGKILL); err != nil {
		return err
	}
	return p.waitGone(ctx)
}

// waitGone waits until the leader is reaped and no process of the group
// is left.
func (p *proc) waitGone(ctx context.Context) error {
	select {
	case <-p.done:
	case <-ctx.Done():
		return fmt.Errorf("wait for pid %d: %w", p.pgid, ctx.Err())
	}
	for {
		if len(groupPIDs(p.pgid)) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for group %d to exit: %w", p.pgid, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// pids lists the live members of the group.
func (p *proc) pids() []int { return groupPIDs(p.pgid) }

// groupPIDs scans /proc for processes whose process group is pgid.
// Zombies are left out: they are dead and only wait to be reaped.
func groupPIDs(pgid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after the parenthesised command: state ppid pgrp ...
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 3 || f[0] == "Z" {
			continue
		}
		if g, err := strconv.Atoi(f[2]); err == nil && g == pgid {
			out = append(out, pid)
		}
	}
	return out
}
