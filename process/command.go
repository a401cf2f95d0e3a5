package process

import (
	"context"
	"os/exec"
	"syscall"
	"time"
)

// WaitDelay is how long a [Command]'s Wait waits, once ctx has ended and
// the group has been killed, for the output pipes to close before it
// returns anyway.
const WaitDelay = 5 * time.Second

// Command is exec.CommandContext for a short-lived tool (pg_basebackup,
// erl_call, initdb) that may fork: the command leads a process group of
// its own, dies with the harness (Pdeathsig), and when ctx ends the
// whole group is killed, not only the leader. os/exec kills only the
// process it started, and a child that outlives it keeps the output
// pipes open, so Output or CombinedOutput never returns: pg_basebackup's
// forked WAL streamer did that, and held a failover's heal for 22
// minutes. WaitDelay bounds the wait for the pipes after the kill.
//
// Callers may add to cmd.SysProcAttr (a Credential) but must keep
// Setpgid: Cancel signals the group the leader's pid names.
func Command(ctx context.Context, name string, arg ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, arg...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = WaitDelay
	return cmd
}
