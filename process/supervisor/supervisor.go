// Package supervisor runs the pipeline's workers (producers, relays,
// consumers) as separate OS processes of the same binary, so a crash is
// real: the kernel closes the sockets and the memory is gone. It restarts a
// crashed worker after a delay and records every crash and restart in the
// harness's history, and each worker's peak resident set as it grows
// (resources.go).
//
// A built-in worker reads commands on its stdin ("arm <failpoint term>",
// "stop") and exits when stdin closes, so no worker outlives the harness.
// An external worker (a team's own relay or consumer, see [Command]) is
// stopped with SIGTERM; the supervisor keeps its armed failpoints and
// serves it an endpoint (failpoint.EnvEndpoint, endpoint.go) that kills it
// when it reaches one that fires. The kernel kills it if the harness dies
// (PR_SET_PDEATHSIG).
package supervisor

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/deliverycheck/deliverycheck/failpoint"
	"github.com/deliverycheck/deliverycheck/history"
)

// SpecEnv is the environment variable a worker reads its spec from.
const SpecEnv = "DELIVERYCHECK_WORKER_SPEC"

// HitsFD is the file descriptor on which every worker, built-in or
// external, may tell the supervisor that a failpoint fired, one line
// "hit <failpoint>" each, just before it kills itself there (see
// failpoint.ReportHit). The worker's crash op names the failpoint too,
// but in the worker's own history file, which the harness reads only
// after the run; a nemesis needs to know during the run whether the
// failpoint it armed bit. A pipe outlives the writer, so the line is
// read even though the process is SIGKILLed right after writing it.
const HitsFD = 3

// Config says how to start workers.
type Config struct {
	// Command is the argv prefix that starts a worker, e.g.
	// [/path/to/deliverycheck worker]. Tests pass their own binary.
	Command []string
	// Env is added to each worker's environment.
	Env []string
	// LogDir receives one <name>.log per worker.
	LogDir string
	// RestartDelay is how long a crashed worker stays down, overriding
	// the default 200ms.
	RestartDelay time.Duration
	// Recorder records crash and restart ops (process "harness").
	Recorder *history.Recorder
	// HistoryDir receives, for each external worker, the ops its
	// endpoint calls record (<name>.endpoint.jsonl): lineage it sends and
	// its crashes at failpoints. "" records none.
	HistoryDir string
	// RSSInterval is how often each worker's peak resident set is
	// sampled for resources ops (resources.go), overriding the default
	// DefaultRSSInterval; negative samples nothing. Only with a Recorder.
	RSSInterval time.Duration
	// Base is the run's start, the zero of every history time.
	Base   time.Time
	Logger *slog.Logger
}

// Supervisor owns a set of named workers. The caller should call StopAll
// when finished.
type Supervisor struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	workers map[string]*worker
	wg      sync.WaitGroup
	closed  bool
	// hitNext is closed and replaced at every failpoint hit in any
	// worker, so a nemesis can wait for one without polling.
	hitNext chan struct{}
	// stopped is closed by StopAll, so no worker waits out its restart
	// delay to find it must not start again.
	stopped chan struct{}
	// ep serves the external workers' failpoint and history calls, from
	// the first external worker on (endpoint.go).
	ep *endpoint
}

// Command is how to start an external worker: any program, which learns
// everything about the run from its environment.
type Command struct {
	// Argv is the program and its arguments; a relative program path is
	// resolved against Dir.
	Argv []string
	// Env is added to the worker's environment (after the supervisor's
	// own Env, so it wins).
	Env []string
	// Dir is the working directory; "" is the harness's.
	Dir string
	// Failpoints are armed from the start. The harness keeps every
	// external worker's armed terms itself, so a term like kill(2) means
	// two crashes in all, across restarts; the worker asks through its
	// endpoint (failpoint.EnvEndpoint) whether one fires.
	Failpoints []failpoint.Term
	// Seed makes probabilistic terms reproducible.
	Seed uint64
}

// Program is the program Argv names: a relative path with a slash is
// resolved against Dir, a bare name on PATH.
func (c Command) Program() string {
	prog := c.Argv[0]
	if strings.ContainsRune(prog, '/') && !filepath.IsAbs(prog) && c.Dir != "" {
		prog = filepath.Join(c.Dir, prog)
	}
	return prog
}

// Check reports whether the program can be started, before anything is:
// a missing program is the team's mistake, found before any worker runs.
func (c Command) Check() error {
	if len(c.Argv) == 0 {
		return errors.New("empty command")
	}
	if _, err := exec.LookPath(c.Program()); err != nil {
		return fmt.Errorf("cannot start %q: %w", c.Argv[0], err)
	}
	return nil
}

type worker struct {
	name     string
	spec     []byte   // built-in: the spec, in SpecEnv
	external *Command // external: how to start it

	mu       sync.Mutex
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	exited   chan struct{}
	stopping bool // an exit now is expected, not a crash
	killed   bool // the nemesis killed it: record it as such
	crashes  int
	restarts int
	pids     []int
	// hits counts the failpoint hits the worker reported on HitsFD, or
	// that its endpoint fired, by failpoint name, over all its
	// incarnations.
	hits map[string]int
	// notes are the "note <text>" lines it reported on HitsFD, over all
	// its incarnations, in order.
	notes []string
	// armed is an external worker's armed failpoints, which its endpoint
	// consults; epRec records its endpoint's ops.
	armed *failpoint.Set
	epRec *history.Recorder
	// done is a one-shot worker's ([Supervisor.StartOnce]): it receives
	// once, when the worker exited 0 (nil) or will never run again (why).
	done chan error
	// watched is closed when the goroutine watching this worker
	// returns, so Redeploy starts a new one only after the old one saw
	// its stop.
	watched chan struct{}
}

// New returns a supervisor with no workers.
func New(cfg Config) (*Supervisor, error) {
	if len(cfg.Command) == 0 {
		return nil, errors.New("supervisor: no worker command")
	}
	if cfg.RestartDelay <= 0 {
		cfg.RestartDelay = 200 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.RSSInterval == 0 {
		cfg.RSSInterval = DefaultRSSInterval
	}
	if err := os.MkdirAll(cfg.LogDir, 0o755); err != nil {
		return nil, fmt.Errorf("supervisor: %w", err)
	}
	return &Supervisor{cfg: cfg, log: cfg.Logger, workers: map[string]*worker{}, hitNext: make(chan struct{}), stopped: make(chan struct{})}, nil
}

// Start starts a worker called name with the given spec (JSON, passed in
// SpecEnv), and keeps it running until StopAll: a worker that exits on its
// own is recorded as crashed and restarted after RestartDelay.
func (s *Supervisor) Start(ctx context.Context, name string, spec []byte) error {
	return s.add(ctx, &worker{name: name, spec: spec})
}

// StartCommand starts an external worker called name and keeps it running
// like [Supervisor.Start] does a built-in one.
func (s *Supervisor) StartCommand(ctx context.Context, name string, c Command) error {
	if len(c.Argv) == 0 {
		return fmt.Errorf("supervisor: worker %s: empty command", name)
	}
	c.Argv = slices.Clone(c.Argv)
	c.Env = slices.Clone(c.Env)
	w := &worker{name: name, external: &c, armed: failpoint.NewSet(c.Seed, nil)}
	for _, t := range c.Failpoints {
		w.armed.Arm(t)
	}
	s.mu.Lock()
	err := s.startEndpointLocked()
	if err == nil {
		c.Env = append(c.Env, failpoint.EnvEndpoint+"="+s.endpointURLLocked(name))
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.add(ctx, w)
}

// StartOnce starts a one-shot built-in worker called name, a task run to
// completion (the redriver): restarted like [Supervisor.Start]'s after a
// kill or a non-zero exit, but not after it exits 0, which is its end.
// Once it ended, a new one-shot worker may take its name.
// done receives nil once it exited 0, or the reason it never will: ctx
// ended, the worker was stopped, or a restart failed. An exit 0 is not
// a crash and records nothing.
func (s *Supervisor) StartOnce(ctx context.Context, name string, spec []byte) (done <-chan error, err error) {
	ch := make(chan error, 1)
	if err := s.add(ctx, &worker{name: name, spec: spec, done: ch}); err != nil {
		return nil, err
	}
	return ch, nil
}

func (s *Supervisor) add(ctx context.Context, w *worker) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("supervisor: stopped")
	}
	if old, ok := s.workers[w.name]; ok && !(w.done != nil && old.finished()) {
		s.mu.Unlock()
		return fmt.Errorf("supervisor: worker %s already exists", w.name)
	}
	s.workers[w.name] = w
	s.mu.Unlock()
	if err := s.launch(w); err != nil {
		return err
	}
	s.goWatch(ctx, w)
	return nil
}

// goWatch starts the goroutine that restarts w.
func (s *Supervisor) goWatch(ctx context.Context, w *worker) {
	watched := make(chan struct{})
	w.mu.Lock()
	w.watched = watched
	w.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer close(watched)
		s.watch(ctx, w)
	}()
}

// finished reports whether w is a one-shot worker that has ended: a
// new one-shot worker may take its name (a second redrive of one
// subscription).
func (w *worker) finished() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.done != nil && w.watched != nil && closed(w.watched)
}

// finish tells whoever waits on a one-shot worker how it ended; it
// does nothing for any other worker. watch calls it once, as it returns.
func (w *worker) finish(err error) {
	if w.done != nil {
		w.done <- err
	}
}

// errStoppedOnce is a one-shot worker's end when it was stopped before
// it finished.
var errStoppedOnce = errors.New("supervisor: stopped before it finished")

// errStopping means the worker is being stopped and must not start again.
var errStopping = errors.New("supervisor: worker is stopping")

// launch starts w's process. It holds w.mu throughout, so StopAll either
// sees the new process or prevents it from starting.
func (s *Supervisor) launch(w *worker) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopping {
		return errStopping
	}
	logf, err := os.OpenFile(filepath.Join(s.cfg.LogDir, w.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("supervisor: %w", err)
	}
	defer logf.Close()
	var cmd *exec.Cmd
	var stdin io.WriteCloser
	if c := w.external; c != nil {
		cmd = exec.Command(c.Program(), c.Argv[1:]...)
		cmd.Dir = c.Dir
		cmd.Env = append(append(os.Environ(), s.cfg.Env...), c.Env...)
		// Its stdin is /dev/null: an external program owes the harness
		// nothing, so it is stopped by signal instead.
	} else {
		cmd = exec.Command(s.cfg.Command[0], s.cfg.Command[1:]...)
		cmd.Env = append(append(os.Environ(), s.cfg.Env...), SpecEnv+"="+string(w.spec))
		if stdin, err = cmd.StdinPipe(); err != nil {
			return fmt.Errorf("supervisor: %w", err)
		}
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	hitsR, hitsW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("supervisor: start %s: hits pipe: %w", w.name, err)
	}
	cmd.ExtraFiles = []*os.File{hitsW} // fd 3 == HitsFD in the child
	cmd.Env = append(cmd.Env, failpoint.EnvHitsFD+"="+strconv.Itoa(HitsFD))
	if err := cmd.Start(); err != nil {
		hitsR.Close()
		hitsW.Close()
		return fmt.Errorf("supervisor: start %s: %w", w.name, err)
	}
	hitsW.Close() // the child has its copy; EOF once every holder exited
	exited := make(chan struct{})
	w.cmd, w.stdin, w.exited = cmd, stdin, exited
	w.pids = append(w.pids, cmd.Process.Pid)
	hitsDone := make(chan struct{})
	go func() {
		defer close(hitsDone)
		s.readHits(w, hitsR)
	}()
	// The sampler ends with the process and writes its last op before
	// anyone learns of the exit (resources.go).
	reaped, sampled := make(chan struct{}), make(chan struct{})
	if s.cfg.Recorder != nil && s.cfg.RSSInterval > 0 {
		go func() {
			defer close(sampled)
			s.sampleRSS(w.name, cmd.Process.Pid, reaped)
		}()
	} else {
		close(sampled)
	}
	go func() {
		_ = cmd.Wait()
		close(reaped)
		<-sampled
		// A hit is written just before the SIGKILL it announces: read
		// it before anyone learns of the exit. A grandchild holding
		// the pipe open must not hold up the exit, so wait only briefly.
		select {
		case <-hitsDone:
		case <-time.After(time.Second):
		}
		close(exited)
	}()
	s.log.Debug("worker started", "worker", w.name, "pid", cmd.Process.Pid)
	return nil
}

// watch restarts w whenever it exits unexpectedly, until it is stopped
// (or, one-shot, exits 0).
func (s *Supervisor) watch(ctx context.Context, w *worker) {
	defer s.wg.Done()
	for {
		w.mu.Lock()
		exited, cmd := w.exited, w.cmd
		w.mu.Unlock()
		<-exited
		w.mu.Lock()
		stopping, killed := w.stopping, w.killed
		w.killed = false
		finished := w.done != nil && !stopping && !killed && cmd.ProcessState.Success()
		if finished {
			w.stopping = true // its end: nothing may start it again
		}
		if !stopping && !finished {
			w.crashes++
		}
		w.mu.Unlock()
		if finished {
			w.finish(nil)
			return
		}
		if stopping {
			w.finish(errStoppedOnce)
			return
		}
		detail := cmd.ProcessState.String()
		// A SIGKILL was sent by someone who records it: the nemesis, or
		// the worker itself at a failpoint (its crash op names the
		// failpoint and the event in flight). Any other exit is a crash
		// nobody announced: a bug, a panic, a lost database.
		selfKilled := false
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			selfKilled = true
		}
		if !killed && !selfKilled {
			s.record(history.Info, history.Crash, history.Value{Target: w.name, Detail: detail})
		}
		s.log.Info("worker exited, restarting", "worker", w.name, "status", detail)
		select {
		case <-ctx.Done():
			w.finish(ctx.Err())
			return
		case <-s.stopped:
			w.finish(errStoppedOnce)
			return
		case <-time.After(s.cfg.RestartDelay):
		}
		if err := s.launch(w); err != nil {
			if !errors.Is(err, errStopping) {
				s.log.Error("restart failed", "worker", w.name, "err", err)
			}
			w.finish(fmt.Errorf("supervisor: restart %s: %w", w.name, err))
			return
		}
		w.mu.Lock()
		w.restarts++
		w.mu.Unlock()
		s.record(history.OK, history.Restart, history.Value{Target: w.name})
	}
}

// readHits counts the "hit <failpoint>" lines of one incarnation of w
// until its end of the pipe closes.
func (s *Supervisor) readHits(w *worker, r *os.File) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if note, ok := strings.CutPrefix(line, "note "); ok {
			s.addNote(w, note)
			continue
		}
		name, ok := strings.CutPrefix(line, "hit ")
		if !ok || name == "" {
			continue
		}
		s.countHit(w, name)
	}
}

// countHit counts a hit of failpoint name in w and wakes whoever waits
// for the next hit.
func (s *Supervisor) countHit(w *worker, name string) {
	w.mu.Lock()
	if w.hits == nil {
		w.hits = map[string]int{}
	}
	w.hits[name]++
	w.mu.Unlock()
	s.wake()
	s.log.Info("failpoint hit", "worker", w.name, "failpoint", name)
}

// addNote keeps a note of w's and wakes whoever waits for the next hit
// or note.
func (s *Supervisor) addNote(w *worker, note string) {
	w.mu.Lock()
	w.notes = append(w.notes, note)
	w.mu.Unlock()
	s.wake()
	s.log.Info("worker note", "worker", w.name, "note", note)
}

// wake closes hitNext and replaces it.
func (s *Supervisor) wake() {
	s.mu.Lock()
	close(s.hitNext)
	s.hitNext = make(chan struct{})
	s.mu.Unlock()
}

// Notes lists the notes worker reported so far (failpoint.Note: "note
// <text>" lines on [HitsFD]), over all its restarts, oldest first, and
// a channel closed at the next hit or note in any worker.
func (s *Supervisor) Notes(worker string) (notes []string, next <-chan struct{}) {
	s.mu.Lock()
	next = s.hitNext
	w := s.workers[worker]
	s.mu.Unlock()
	if w == nil {
		return nil, next
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.notes), next
}

// Hits is how many times failpoint fired in worker so far, over all its
// restarts, as the worker reported it on [HitsFD], and a channel closed at
// the next hit of any failpoint in any worker: a caller waits on it and
// asks again.
func (s *Supervisor) Hits(worker, failpoint string) (n int, next <-chan struct{}) {
	s.mu.Lock()
	next = s.hitNext
	w := s.workers[worker]
	s.mu.Unlock()
	if w == nil {
		return 0, next
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.hits[failpoint], next
}

// Kill sends SIGKILL to a worker's process group, like Signal, and waits
// until the process has exited or ctx ends. It returns the exit status
// as the kernel reported it ("signal: killed"): the evidence that the
// kill landed. The worker is restarted as after any crash.
func (s *Supervisor) Kill(ctx context.Context, name string) (status string, err error) {
	w, err := s.get(name)
	if err != nil {
		return "", err
	}
	// As Signal, under w.mu, so the process signalled is the one waited for.
	w.mu.Lock()
	exited, cmd := w.exited, w.cmd
	if closed(exited) {
		w.mu.Unlock()
		return "", fmt.Errorf("%w: %s (restarting)", ErrNotRunning, name)
	}
	w.killed = true
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		w.mu.Unlock()
		return "", fmt.Errorf("supervisor: kill %s: %w", name, err)
	}
	w.mu.Unlock()
	select {
	case <-exited:
	case <-ctx.Done():
		return "", fmt.Errorf("supervisor: kill %s: wait for exit: %w", name, ctx.Err())
	}
	return cmd.ProcessState.String(), nil
}

func (s *Supervisor) record(t history.Type, f history.F, v history.Value) {
	if s.cfg.Recorder == nil {
		return
	}
	if _, err := s.cfg.Recorder.Record(t, f, v); err != nil {
		s.log.Error("record", "err", err)
	}
}

func (s *Supervisor) get(name string) (*worker, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.workers[name]
	if !ok {
		return nil, fmt.Errorf("supervisor: no worker %s (have %v)", name, s.namesLocked())
	}
	return w, nil
}

func (s *Supervisor) namesLocked() []string {
	out := make([]string, 0, len(s.workers))
	for n := range s.workers {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Names lists the workers, sorted.
func (s *Supervisor) Names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.namesLocked()
}

// Send writes one command line to a running worker's stdin, e.g.
// "arm consumer.after-commit-before-ack=kill(once)". An external worker
// only takes "arm <term>", which arms its endpoint.
func (s *Supervisor) Send(name, line string) error {
	w, err := s.get(name)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.external != nil {
		return armExternal(w, line)
	}
	if _, err := io.WriteString(w.stdin, line+"\n"); err != nil {
		return fmt.Errorf("supervisor: send to %s: %w", name, err)
	}
	return nil
}

// ErrNotRunning is returned by [Supervisor.Signal] for a worker that has
// exited and not been restarted yet. A nemesis resuming a paused worker
// that was killed meanwhile gets it and can ignore it: the new process
// was never paused.
var ErrNotRunning = errors.New("supervisor: worker is not running")

// Signal sends sig to a worker's process group. SIGKILL is recorded as a
// crash by the nemesis that sent it, so the supervisor does not record it
// again; the worker is restarted as after any crash.
func (s *Supervisor) Signal(name string, sig syscall.Signal) error {
	w, err := s.get(name)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	// An exited worker's process group id may already belong to someone
	// else: never signal it.
	select {
	case <-w.exited:
		return fmt.Errorf("%w: %s (restarting)", ErrNotRunning, name)
	default:
	}
	if sig == syscall.SIGKILL {
		w.killed = true
	}
	if err := syscall.Kill(-w.cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("supervisor: signal %s: %w", name, err)
	}
	return nil
}

// Retire marks a worker as replaced, like a deleted pod: its process,
// left running (or stopped) as it is, is never restarted once it exits,
// and its exit is not a crash. It returns a channel closed when that
// process has exited, ErrNotRunning if none runs. The nemesis's zombie
// fault retires a paused processor before resuming it; StopAll still
// stops it if it lives on.
func (s *Supervisor) Retire(name string) (exited <-chan struct{}, err error) {
	w, err := s.get(name)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopping = true
	if closed(w.exited) {
		return nil, fmt.Errorf("%w: %s", ErrNotRunning, name)
	}
	return w.exited, nil
}

// Stopped reports whether a worker's process is stopped by a signal
// (SIGSTOP: state T in /proc/<pid>/stat), ErrNotRunning if none runs. A
// process caught by the group's SIGSTOP in vfork, waiting for a child
// that had not yet exec'd, reads D (uninterruptible) instead, for as long
// as that child stays stopped: /bin/sh starting a command does this. It
// counts as stopped when a child of it is (it cannot run before the
// child does).
func (s *Supervisor) Stopped(name string) (bool, error) {
	w, err := s.get(name)
	if err != nil {
		return false, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if closed(w.exited) {
		return false, fmt.Errorf("%w: %s", ErrNotRunning, name)
	}
	pid := w.cmd.Process.Pid
	st, err := procState(pid)
	if err != nil {
		return false, fmt.Errorf("supervisor: state of %s: %w", name, err)
	}
	switch st {
	case 'T':
		return true, nil
	case 'D':
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		if err != nil {
			return false, nil
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				if cst, err := procState(c); err == nil && cst == 'T' {
					return true, nil
				}
			}
		}
	}
	return false, nil
}

// procState is the state letter of process pid in /proc/<pid>/stat
// (pid (comm) state ...: comm may hold spaces and parentheses).
func procState(pid int) (byte, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, fmt.Errorf("cannot read %q", b)
	}
	return b[i+2], nil
}

// ExitStatus is how a worker's last process ended ("exit status 0",
// "signal: killed"), "" while it runs.
func (s *Supervisor) ExitStatus(name string) string {
	w, err := s.get(name)
	if err != nil {
		return ""
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !closed(w.exited) || w.cmd.ProcessState == nil {
		return ""
	}
	return w.cmd.ProcessState.String()
}

// Stats reports a worker's crashes and restarts so far.
func (s *Supervisor) Stats(name string) (crashes, restarts int) {
	w, err := s.get(name)
	if err != nil {
		return 0, 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.crashes, w.restarts
}

// PIDs lists every pid any worker ever had, for cleanup checks.
func (s *Supervisor) PIDs() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int
	for _, w := range s.workers {
		w.mu.Lock()
		out = append(out, w.pids...)
		w.mu.Unlock()
	}
	return out
}

// Stop asks one worker to stop ("stop" on stdin) and waits for it until
// ctx ends, then kills it. It is not restarted.
func (s *Supervisor) Stop(ctx context.Context, name string) error {
	w, err := s.get(name)
	if err != nil {
		return err
	}
	return s.stopWorkers(ctx, []*worker{w})
}

// Redeploy rolls out a new build of worker name, as a deployment does:
// a graceful stop ("stop" on its stdin; SIGTERM for an external worker),
// killed only if ctx ends first, then a start under the same name with
// spec (a built-in worker; nil keeps its spec) or with env added to its
// environment (an external worker; a later value of a variable wins).
// Later crash restarts start the new build. It returns once the new
// process started. Unlike a kill, the stop is clean and records no
// crash; the caller records the rollout as it sees it.
func (s *Supervisor) Redeploy(ctx context.Context, name string, spec []byte, env map[string]string) error {
	w, err := s.get(name)
	if err != nil {
		return err
	}
	if w.done != nil {
		return fmt.Errorf("supervisor: redeploy %s: a one-shot worker is not redeployed", name)
	}
	if err := s.stopWorkers(ctx, []*worker{w}); err != nil {
		return fmt.Errorf("supervisor: redeploy %s: %w", name, err)
	}
	w.mu.Lock()
	watched := w.watched
	w.mu.Unlock()
	select {
	case <-watched:
	case <-ctx.Done():
		return fmt.Errorf("supervisor: redeploy %s: %w", name, ctx.Err())
	}
	// Under s.mu, as StopAll marks the supervisor closed: either it
	// has, and nothing starts, or it will stop the new process.
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fmt.Errorf("supervisor: redeploy %s: stopped", name)
	}
	w.mu.Lock()
	w.stopping = false
	if w.external != nil {
		for _, k := range slices.Sorted(maps.Keys(env)) {
			w.external.Env = append(w.external.Env, k+"="+env[k])
		}
	} else if spec != nil {
		w.spec = spec
	}
	w.mu.Unlock()
	s.mu.Unlock()
	if err := s.launch(w); err != nil {
		return fmt.Errorf("supervisor: redeploy %s: %w", name, err)
	}
	s.goWatch(ctx, w)
	return nil
}

// StopAll asks every worker to stop ("stop" on stdin, then stdin closed),
// waits for them until ctx ends, then kills what is left.
func (s *Supervisor) StopAll(ctx context.Context) error {
	s.mu.Lock()
	if !s.closed {
		close(s.stopped)
	}
	s.closed = true
	ws := make([]*worker, 0, len(s.workers))
	for _, w := range s.workers {
		ws = append(ws, w)
	}
	s.mu.Unlock()
	err := s.stopWorkers(ctx, ws)
	s.wg.Wait()
	s.stopEndpoint()
	for _, w := range ws {
		w.mu.Lock()
		if w.epRec != nil {
			err = errors.Join(err, w.epRec.Close())
		}
		w.mu.Unlock()
	}
	return err
}

func (s *Supervisor) stopWorkers(ctx context.Context, ws []*worker) error {
	for _, w := range ws {
		w.mu.Lock()
		w.stopping = true
		if w.stdin != nil {
			_, _ = io.WriteString(w.stdin, "stop\n")
			w.stdin.Close()
		}
		if w.cmd != nil && w.cmd.Process != nil && !closed(w.exited) {
			if w.external != nil {
				_ = syscall.Kill(-w.cmd.Process.Pid, syscall.SIGTERM)
			}
			_ = syscall.Kill(-w.cmd.Process.Pid, syscall.SIGCONT) // a paused worker cannot stop
		}
		w.mu.Unlock()
	}
	var errs []error
	for _, w := range ws {
		w.mu.Lock()
		exited, cmd := w.exited, w.cmd
		w.mu.Unlock()
		if exited == nil {
			continue
		}
		select {
		case <-exited:
		case <-ctx.Done():
			// Not exited, so the group id is still the worker's.
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
			errs = append(errs, fmt.Errorf("supervisor: %s did not stop in time; killed", w.name))
		}
	}
	return errors.Join(errs...)
}

// closed reports whether ch is closed.
func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// armExternal applies "arm <term>" to an external worker: the term
// replaces any earlier one of the same name.
func armExternal(w *worker, line string) error {
	cmd, term, _ := strings.Cut(strings.TrimSpace(line), " ")
	if cmd != "arm" {
		return fmt.Errorf("supervisor: %s is external and takes only \"arm <term>\", not %q", w.name, line)
	}
	t, err := failpoint.ParseAny(term)
	if err != nil {
		return fmt.Errorf("supervisor: arm %s: %w", w.name, err)
	}
	w.armed.Arm(t)
	return nil
}

// Armed lists the failpoints armed in external worker name, sorted.
func (s *Supervisor) Armed(name string) ([]failpoint.Term, error) {
	w, err := s.get(name)
	if err != nil {
		return nil, err
	}
	if w.armed == nil {
		return nil, fmt.Errorf("supervisor: %s is built in: its failpoints live in its process", name)
	}
	return w.armed.Armed(), nil
}
