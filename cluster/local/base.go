package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/deliverycheck/deliverycheck/internal/logtail"
	"github.com/deliverycheck/deliverycheck/process"
	"github.com/deliverycheck/deliverycheck/process/guard"
)

// Options are common to every local service.
type Options struct {
	// Keep leaves the service's temp dir (data and logs) on disk after
	// Close, overriding the default of removing it.
	Keep bool
	// TempRoot is the directory the service's temp dir is made in,
	// overriding the default os.TempDir().
	TempRoot string
	// Logger receives lifecycle events, overriding the default slog.Default().
	Logger *slog.Logger
}

// base holds what every local service shares: its temp dir, its guard and
// the process group of the running server.
type base struct {
	name string
	dir  string
	keep bool
	log  *slog.Logger
	g    *guard.Guard

	mu     sync.Mutex
	p      *process.Group // the running server, nil when stopped
	closed bool
}

func newBase(name string, o Options) (*base, error) {
	dir, err := os.MkdirTemp(o.TempRoot, "deliverycheck-"+name+"-")
	if err != nil {
		return nil, fmt.Errorf("%s: temp dir: %w", name, err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%s: temp dir: %w", name, err)
	}
	g, err := guard.Start(guard.Options{})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if !o.Keep {
		if err := g.TrackDir(dir); err != nil {
			g.Close()
			os.RemoveAll(dir)
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	l := o.Logger
	if l == nil {
		l = slog.Default()
	}
	return &base{name: name, dir: dir, keep: o.Keep, log: l.With("service", name), g: g}, nil
}

// Name implements cluster.Service.
func (b *base) Name() string { return b.name }

// Dir is the service's temp dir.
func (b *base) Dir() string { return b.dir }

// running returns the live server process or an error naming the state.
func (b *base) running() (*process.Group, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.p == nil || b.p.Exited() {
		return nil, fmt.Errorf("%s: not running", b.name)
	}
	return b.p, nil
}

// launch starts the server process and records it as the running one.
// A server that runs already is returned as it is, for the caller to wait
// until it is ready: an earlier Start cut short by its context (a
// nemesis heal at the end of a run's window) leaves it booting, and the
// final heal's Start must finish that start, not fail on it. Seen in CI:
// a RabbitMQ node killed for 6s of a 10s window, its heal cut at the
// window's end, and the final heal's Start refused ("already running").
func (b *base) launch(spec process.Spec) (*process.Group, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, fmt.Errorf("%s: closed", b.name)
	}
	if b.p != nil && !b.p.Exited() {
		b.log.Info("already started; waiting until it is ready", "pid", b.p.PGID())
		return b.p, nil
	}
	p, err := process.Start(spec, b.g)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", b.name, err)
	}
	b.p = p
	b.log.Debug("started", "pid", p.PGID())
	return p, nil
}

// waitReady polls ready until it succeeds, the server exits, or ctx ends.
// The error carries the tail of logPath so a failed start explains itself.
func (b *base) waitReady(ctx context.Context, p *process.Group, logPath string, ready func(context.Context) error) error {
	delay := 20 * time.Millisecond
	var last error
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		last = ready(pctx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-p.Done():
			return fmt.Errorf("%s exited during start (%v): %w\n%s", b.name, p.Err(), last, logtail.File(logPath, 20))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w (last probe: %v)\n%s", b.name, ctx.Err(), last, logtail.File(logPath, 20))
		case <-time.After(delay):
		}
		delay = min(delay*2, 250*time.Millisecond)
	}
}

// Kill implements cluster.Killer: SIGKILL to the whole process group.
func (b *base) Kill(ctx context.Context) error {
	p, err := b.running()
	if err != nil {
		return err
	}
	if err := p.Kill(ctx); err != nil {
		return fmt.Errorf("kill %s: %w", b.name, err)
	}
	b.log.Debug("killed", "pid", p.PGID())
	return nil
}

// ExitStatus is how the server's last process ended, as the kernel
// reported it ("signal: killed"), or "" while it runs or before it ever
// ran: a nemesis records it as the evidence that its kill landed.
func (b *base) ExitStatus() string {
	b.mu.Lock()
	p := b.p
	b.mu.Unlock()
	if p == nil || !p.Exited() {
		return ""
	}
	if p.Err() == nil {
		return "exit status 0"
	}
	return p.Err().Error()
}

// stopWith stops the running server gracefully with sig.
func (b *base) stopWith(ctx context.Context, sig syscall.Signal) error {
	b.mu.Lock()
	p := b.p
	b.mu.Unlock()
	if p == nil || (p.Exited() && len(p.PIDs()) == 0) {
		return nil
	}
	if err := p.Stop(ctx, sig); err != nil {
		return fmt.Errorf("stop %s: %w", b.name, err)
	}
	return nil
}

// Pause implements cluster.Pauser (SIGSTOP to the whole group).
func (b *base) Pause(ctx context.Context) error {
	p, err := b.running()
	if err != nil {
		return err
	}
	return p.Signal(syscall.SIGSTOP)
}

// Resume implements cluster.Pauser (SIGCONT to the whole group).
func (b *base) Resume(ctx context.Context) error {
	p, err := b.running()
	if err != nil {
		return err
	}
	return p.Signal(syscall.SIGCONT)
}

// PIDs implements cluster.PIDer.
func (b *base) PIDs() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []int
	if b.p != nil {
		out = append(out, b.p.PIDs()...)
	}
	if b.g.Open() {
		out = append(out, b.g.PID())
	}
	return out
}

// closeBase kills whatever runs, stops the guard and removes the temp dir.
// extra runs after the server is dead and before the dir goes (e.g. to
// stop a helper daemon).
func (b *base) closeBase(extra func() error) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	p := b.p
	b.mu.Unlock()
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if p != nil {
		if err := p.Kill(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if extra != nil {
		if err := extra(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := b.g.Close(); err != nil {
		errs = append(errs, err)
	}
	if !b.keep {
		if err := os.RemoveAll(b.dir); err != nil {
			errs = append(errs, err)
		}
	} else {
		b.log.Info("kept temp dir", "dir", b.dir)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close %s: %w", b.name, err)
	}
	return nil
}
