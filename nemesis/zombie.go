package nemesis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/deliverycheck/deliverycheck/failpoint"
	"github.com/deliverycheck/deliverycheck/process/supervisor"
)

// The zombie fault (Kind Zombie) on a transactional processor: it is
// paused (SIGSTOP) with a transaction open, a replacement is started in
// its place, and it is resumed (SIGCONT) at the end of the window, its
// late transaction meant to be fenced, then exits for good.
const (
	// ZombiePoint is where the zombie pauses: its outputs written, its
	// commit not yet sent.
	ZombiePoint = failpoint.ProcessorAfterProduceBeforeCommit
	// zombieReach bounds the wait for the processor to reach ZombiePoint
	// once the fault starts: a processor with inputs to read begins a
	// transaction every few tens of milliseconds.
	zombieReach = 5 * time.Second
	// zombieStop bounds the wait for its SIGSTOP to take, once it said
	// it is stopping.
	zombieStop = 2 * time.Second
	// zombieExit bounds the wait for the resumed zombie to end its late
	// transaction and exit, unless Env.ZombieExit says otherwise; then
	// it is killed.
	zombieExit = 15 * time.Second
)

// zombie pauses worker f.Target at ZombiePoint, starts its replacement
// through Env.Replace, and returns the heal that resumes and retires it.
func (e *Env) zombie(ctx context.Context, f Fault) (effect, error) {
	if e.Replace == nil {
		return effect{}, errors.New("zombie: this run cannot start a replacement worker")
	}
	ws, err := e.workers(f.Target)
	if err != nil {
		return effect{}, err
	}
	if len(ws) != 1 || ws[0] != f.Target {
		return effect{}, fmt.Errorf("zombie takes one worker, not %q (%s)", f.Target, strings.Join(ws, ", "))
	}
	w := f.Target
	began := time.Now()
	seen, _ := e.Workers.Notes(w)
	if err := e.Workers.Send(w, "zombie "+string(ZombiePoint)); err != nil {
		return effect{}, err
	}
	where, err := e.waitNote(ctx, w, len(seen), "paused at ", zombieReach)
	if err == nil {
		err = e.waitStopped(ctx, w)
	}
	if err != nil {
		// Never paused, or not stopped: nothing to replace. Disarmed, in
		// case it is still on its way there; one that paused all the
		// same before the disarm took is resumed at the heal (not
		// replaced, it exits after its transaction and is restarted).
		_ = e.Workers.Send(w, "zombie off")
		return effect{undo: func(hctx context.Context) error {
			if _, err := e.waitNote(hctx, w, len(seen), "paused at ", 0); err == nil {
				if err := e.Workers.Signal(w, syscall.SIGCONT); err != nil && !errors.Is(err, supervisor.ErrNotRunning) {
					return err
				}
			}
			return nil
		}, bit: func() (string, error) {
			return "", fmt.Errorf("%s was never paused as a zombie: %w", w, err)
		}}, nil
	}
	pausedAt := time.Now()
	repl, err := e.Replace(ctx, w)
	if err != nil {
		// Resumed at once, it ends its transaction and exits as replaced;
		// not retired, so the supervisor starts it again.
		return effect{}, errors.Join(fmt.Errorf("zombie: start a replacement for %s: %w", w, err), e.Workers.Signal(w, syscall.SIGCONT))
	}
	z := &zombieRun{w: w, repl: repl, where: where, pausedAfter: pausedAt.Sub(began), pausedAt: pausedAt, notes: len(seen)}
	return effect{undo: func(ctx context.Context) error { return e.resumeZombie(ctx, z) }, bit: z.evidence}, nil
}

// zombieRun is what the zombie fault did, for its evidence.
type zombieRun struct {
	w, repl, where string
	pausedAfter    time.Duration // from the fault's start to the pause
	pausedAt       time.Time
	notes          int // the worker's notes before the fault
	resumed        bool
	pausedFor      time.Duration
	killed         bool   // still alive zombieExit after SIGCONT
	exit, outcome  string // exit status; its note on its late transaction
}

// resumeZombie retires the zombie (never restarted), resumes it, waits
// for it to end its late transaction and exit, and kills it if it does
// not. A zombie gone before the heal (killed while paused) is not
// resumed.
func (e *Env) resumeZombie(ctx context.Context, z *zombieRun) error {
	exited, err := e.Workers.Retire(z.w)
	if errors.Is(err, supervisor.ErrNotRunning) {
		z.exit = e.Workers.ExitStatus(z.w)
		return nil
	}
	if err != nil {
		return err
	}
	if !z.resumed {
		if err := e.Workers.Signal(z.w, syscall.SIGCONT); err != nil && !errors.Is(err, supervisor.ErrNotRunning) {
			return err
		}
		z.resumed, z.pausedFor = true, time.Since(z.pausedAt)
	}
	t := time.NewTimer(cmp.Or(e.ZombieExit, zombieExit))
	defer t.Stop()
	select {
	case <-exited:
	case <-t.C:
		z.killed = true
		if err := e.Workers.Signal(z.w, syscall.SIGKILL); err != nil && !errors.Is(err, supervisor.ErrNotRunning) {
			return err
		}
		select {
		case <-exited:
		case <-ctx.Done():
			return fmt.Errorf("zombie %s: wait for exit after kill: %w", z.w, ctx.Err())
		}
	case <-ctx.Done():
		return fmt.Errorf("zombie %s: wait for exit: %w", z.w, ctx.Err())
	}
	z.exit = e.Workers.ExitStatus(z.w)
	notes, _ := e.Workers.Notes(z.w)
	for _, n := range notes[min(z.notes, len(notes)):] {
		if strings.HasPrefix(n, "zombie: ") {
			z.outcome = strings.TrimPrefix(n, "zombie: ")
		}
	}
	return nil
}

// evidence says what the zombie did, or why the fault did not bite: a
// zombie never resumed, or resumed without ending a late transaction,
// tested no fencing.
func (z *zombieRun) evidence() (string, error) {
	paused := fmt.Sprintf("%s paused (SIGSTOP) %s after the fault began, %s; replacement %s started", z.w, z.pausedAfter.Round(time.Millisecond), z.where, z.repl)
	switch {
	case !z.resumed:
		return "", fmt.Errorf("%s; the zombie never resumed (not running at the heal: %s)", paused, z.exit)
	case z.outcome == "" || strings.Contains(z.outcome, "(none ended)"):
		return "", fmt.Errorf("%s; resumed after %s, the zombie ended no late transaction (%s), exit: %s", paused, z.pausedFor.Round(time.Millisecond), z.outcome, z.exitWords())
	}
	return fmt.Sprintf("%s; %s resumed (SIGCONT) after %s paused; zombie %s; %s exited (%s), not restarted", paused, z.w, z.pausedFor.Round(time.Millisecond), z.outcome, z.w, z.exitWords()), nil
}

func (z *zombieRun) exitWords() string {
	if z.killed {
		return "killed at the end of its window: " + z.exit
	}
	return z.exit
}

// waitNote waits up to limit for a note of worker w, after its first
// skip notes, that starts with prefix, and returns the rest of it.
func (e *Env) waitNote(ctx context.Context, w string, skip int, prefix string, limit time.Duration) (string, error) {
	t := time.NewTimer(limit)
	defer t.Stop()
	for {
		notes, next := e.Workers.Notes(w)
		for _, n := range notes[min(skip, len(notes)):] {
			if rest, ok := strings.CutPrefix(n, prefix); ok {
				return prefix + rest, nil
			}
		}
		select {
		case <-next:
		case <-t.C:
			return "", fmt.Errorf("it did not reach %s within %s", ZombiePoint, limit)
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// waitStopped waits until worker w's process is stopped (it stops itself
// right after its note).
func (e *Env) waitStopped(ctx context.Context, w string) error {
	deadline := time.Now().Add(zombieStop)
	for {
		stopped, err := e.Workers.Stopped(w)
		if err != nil {
			return err
		}
		if stopped {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("it said it paused, and was still running %s later", zombieStop)
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
