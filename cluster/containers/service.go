package containers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/docker/go-connections/nat"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/deliverycheck/deliverycheck/cluster/freeport"
	"github.com/deliverycheck/deliverycheck/internal/logtail"
)

// spec is what differs between the three services.
type spec struct {
	name  string
	image string
	// port is the container port clients use, e.g. "5432/tcp".
	port nat.Port
	// run creates and starts the container (a testcontainers module's
	// Run, or testcontainers.Run) with the common options appended.
	run func(ctx context.Context, image string, opts ...testcontainers.ContainerCustomizer) (testcontainers.Container, error)
	// ready is one readiness attempt against the host endpoint; it
	// returns the server's version.
	ready func(ctx context.Context, endpoint string) (string, error)
	// stopTimeout bounds a graceful stop before the engine kills.
	stopTimeout time.Duration
	// startTimeout bounds Start when ctx has no deadline.
	startTimeout time.Duration
	// holder, for a node of a replicated service, is the container whose
	// network namespace the node's joins (nodes.go): the node has no
	// host port, and clients reach it at the holder's address.
	holder *holder
}

// Service is one server in a container. It implements cluster.Service
// and every optional ability (kill, pause, restart, log file, version).
type Service struct {
	spec
	rt       *Runtime
	hostPort int
	dir      string
	log      *slog.Logger

	mu      sync.Mutex
	id      string // "" until the container is created
	version string
	closed  bool
}

func (r *Runtime) newService(s spec) (*Service, error) {
	// The host port is pinned for the container's life, across restarts;
	// freeport keeps it below the ephemeral range, where no outgoing
	// connection can take it while the container is down. A node has
	// none: the host reaches it at its address on the run's network.
	var port int
	if s.holder == nil {
		ports, err := freeport.Take(1)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		port = ports[0]
	}
	dir, err := os.MkdirTemp(r.tmp, "deliverycheck-"+s.name+"-")
	if err != nil {
		return nil, fmt.Errorf("%s: temp dir: %w", s.name, err)
	}
	if !r.keep {
		if err := r.g.TrackDir(dir); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return &Service{spec: s, rt: r, hostPort: port, dir: dir,
		log: r.log.With("service", s.name, "image", s.image)}, nil
}

// Name implements cluster.Service.
func (s *Service) Name() string { return s.name }

// Dir is the service's temp dir (its saved logs).
func (s *Service) Dir() string { return s.dir }

// Image is the image the service runs.
func (s *Service) Image() string { return s.image }

// Endpoint implements cluster.Service: the pinned host port, the same
// across restarts; for a node, its address on the run's network (its
// holder's, which outlives every restart of the node).
func (s *Service) Endpoint() string {
	if s.holder != nil {
		return net.JoinHostPort(s.holder.addr.String(), s.port.Port())
	}
	return "127.0.0.1:" + strconv.Itoa(s.hostPort)
}

// Version implements cluster.Versioner.
func (s *Service) Version() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

// ContainerID is the engine's id of the container, "" before Start.
func (s *Service) ContainerID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id
}

func (s *Service) containerID() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", fmt.Errorf("%s: closed", s.name)
	}
	if s.id == "" {
		return "", fmt.Errorf("%s: not started", s.name)
	}
	return s.id, nil
}

// Start implements cluster.Service. The first Start creates the container
// (pulling the image if the engine lacks it); later ones start the same
// container again, with its data and its host port, except after a wipe
// (wipe.go), which removed it: then a new one is created. Ready means the
// service's client probe succeeded against Endpoint.
func (s *Service) Start(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.startTimeout)
		defer cancel()
	}
	start := time.Now()
	s.mu.Lock()
	id, closed := s.id, s.closed
	s.mu.Unlock()
	if closed {
		return fmt.Errorf("start %s: closed", s.name)
	}
	if id == "" {
		if err := s.create(ctx); err != nil {
			return fmt.Errorf("start %s: %w", s.name, err)
		}
	} else if err := s.rt.cli.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		return fmt.Errorf("start %s: %w", s.name, err)
	}
	if err := s.waitReady(ctx); err != nil {
		return fmt.Errorf("start %s: %w", s.name, err)
	}
	s.log.Info("ready", "endpoint", s.Endpoint(), "version", s.Version(), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// create makes and starts the container with the host port pinned.
func (s *Service) create(ctx context.Context) error {
	name := fmt.Sprintf("%s-%s", s.rt.run, s.name)
	pin := nat.PortBinding{HostIP: "127.0.0.1", HostPort: strconv.Itoa(s.hostPort)}
	opts := []testcontainers.ContainerCustomizer{
		testcontainers.WithName(name),
		testcontainers.WithLabels(map[string]string{LabelRun: s.rt.run, LabelOwner: s.rt.own}),
	}
	if h := s.holder; h != nil {
		// The holder's namespace (address, hosts file, fault rules),
		// and the node's name as its host name.
		opts = append(opts,
			testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
				hc.NetworkMode = container.NetworkMode("container:" + h.id)
			}),
			testcontainers.WithConfigModifier(func(c *container.Config) { c.Hostname = s.name }))
	} else {
		opts = append(opts,
			testcontainers.WithExposedPorts(string(s.port)),
			testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
				if hc.PortBindings == nil {
					hc.PortBindings = nat.PortMap{}
				}
				// Every other exposed port keeps a random host port; the
				// one clients use is pinned, so a restart keeps it.
				hc.PortBindings[s.port] = []nat.PortBinding{pin}
			}))
	}
	opts = append(opts,
		// Readiness is our own probe (waitReady), after the container
		// has started; the modules' log waits are replaced.
		testcontainers.WithWaitStrategy(wait.ForNop(func(context.Context, wait.StrategyTarget) error { return nil })),
		testcontainers.WithLogger(slogAdapter{s.log}),
		providerOption,
	)
	c, err := s.run(ctx, s.image, opts...)
	if c != nil {
		id := c.GetContainerID()
		s.mu.Lock()
		s.id = id
		s.mu.Unlock()
		if gerr := s.rt.g.TrackContainer(id); gerr != nil {
			err = errors.Join(err, gerr)
		}
	}
	if err != nil {
		return fmt.Errorf("create container from %s: %w", s.image, err)
	}
	return nil
}

// waitReady polls the probe until it succeeds, the container exits, or
// ctx ends.
func (s *Service) waitReady(ctx context.Context) error {
	var last error
	for {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		v, err := s.ready(pctx, s.Endpoint())
		cancel()
		if err == nil {
			s.mu.Lock()
			s.version = v
			s.mu.Unlock()
			return nil
		}
		last = err
		if st, ierr := s.state(ctx); ierr == nil && !st.Running {
			return fmt.Errorf("container exited (code %d) before it was ready: %v\n%s", st.ExitCode, err, logtail.File(s.LogFile(), 20))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w (last probe: %v)\n%s", ctx.Err(), last, logtail.File(s.LogFile(), 20))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *Service) state(ctx context.Context) (*container.State, error) {
	id, err := s.containerID()
	if err != nil {
		return nil, err
	}
	info, err := s.rt.cli.ContainerInspect(ctx, id)
	if err != nil {
		return nil, err
	}
	if info.State == nil {
		return nil, fmt.Errorf("inspect %s: no state", id)
	}
	return info.State, nil
}

// Stop implements cluster.Service: the image's stop signal (SIGINT for
// PostgreSQL, SIGTERM for the others), then SIGKILL after the service's
// stop timeout. A container not running is already stopped.
func (s *Service) Stop(ctx context.Context) error {
	id, err := s.containerID()
	if err != nil {
		return nil
	}
	if st, err := s.state(ctx); err == nil && st.Paused {
		if err := s.rt.cli.ContainerUnpause(ctx, id); err != nil {
			return fmt.Errorf("stop %s: unpause: %w", s.name, err)
		}
	}
	secs := int(s.stopTimeout.Seconds())
	if err := s.rt.cli.ContainerStop(ctx, id, container.StopOptions{Timeout: &secs}); err != nil {
		return fmt.Errorf("stop %s: %w", s.name, err)
	}
	return s.waitStopped(ctx)
}

// Kill implements cluster.Killer: SIGKILL to the container through the
// engine, then wait until it is not running. A paused container is
// killed while still frozen, so it gets no chance to act on anything
// queued for it; the engine is asked first, and if it refuses to signal
// a paused container (Podman does) the init process is signalled on this
// host, then the container thawed so the kill lands.
func (s *Service) Kill(ctx context.Context) error {
	id, err := s.containerID()
	if err != nil {
		return fmt.Errorf("kill %s: %w", s.name, err)
	}
	st, err := s.state(ctx)
	if err != nil {
		return fmt.Errorf("kill %s: %w", s.name, err)
	}
	if !st.Running {
		return fmt.Errorf("kill %s: not running", s.name)
	}
	kerr := s.rt.cli.ContainerKill(ctx, id, "KILL")
	if kerr != nil && st.Paused {
		if st.Pid > 0 && syscall.Kill(st.Pid, syscall.SIGKILL) == nil {
			kerr = nil
		}
		if err := s.rt.cli.ContainerUnpause(ctx, id); err != nil && kerr == nil {
			kerr = err
		}
		if kerr == nil {
			kerr = s.rt.cli.ContainerKill(ctx, id, "KILL")
			if kerr != nil {
				// Already dead from the host-side kill.
				if st2, err := s.state(ctx); err == nil && !st2.Running {
					kerr = nil
				}
			}
		}
	}
	if kerr != nil {
		return fmt.Errorf("kill %s: %w", s.name, kerr)
	}
	if err := s.waitStopped(ctx); err != nil {
		return fmt.Errorf("kill %s: %w", s.name, err)
	}
	s.log.Debug("killed")
	return nil
}

func (s *Service) waitStopped(ctx context.Context) error {
	for {
		st, err := s.state(ctx)
		if err != nil {
			return err
		}
		if !st.Running {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s to stop: %w", s.name, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Pause implements cluster.Pauser: the engine freezes the container's
// cgroup (the equivalent of SIGSTOP to every process in it).
func (s *Service) Pause(ctx context.Context) error {
	id, err := s.containerID()
	if err != nil {
		return fmt.Errorf("pause %s: %w", s.name, err)
	}
	if err := s.rt.cli.ContainerPause(ctx, id); err != nil {
		return fmt.Errorf("pause %s: %w", s.name, err)
	}
	return nil
}

// Resume implements cluster.Pauser.
func (s *Service) Resume(ctx context.Context) error {
	id, err := s.containerID()
	if err != nil {
		return fmt.Errorf("resume %s: %w", s.name, err)
	}
	if err := s.rt.cli.ContainerUnpause(ctx, id); err != nil {
		return fmt.Errorf("resume %s: %w", s.name, err)
	}
	return nil
}

// Restart implements cluster.Restarter: a graceful stop, then the same
// container started again (same data, same host port).
func (s *Service) Restart(ctx context.Context) error {
	if err := s.Stop(ctx); err != nil {
		return err
	}
	return s.Start(ctx)
}

// LogFile implements cluster.LogFiler: the container's output so far, copied
// into a file under the service's temp dir when asked for.
func (s *Service) LogFile() string {
	path := filepath.Join(s.dir, s.name+".log")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.saveLogs(ctx, path); err != nil {
		s.log.Debug("save logs", "err", err)
	}
	return path
}

// saveLogs writes to path the output of the service's wiped containers
// (earlierLog), then the current one's.
func (s *Service) saveLogs(ctx context.Context, path string) error {
	id, err := s.containerID()
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if earlier, err := os.Open(s.earlierLog()); err == nil {
		_, err = io.Copy(f, earlier)
		earlier.Close()
		if err != nil {
			f.Close()
			return err
		}
	}
	if err := s.copyLogs(ctx, id, f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// copyLogs writes container id's output so far (stdout and stderr) to w.
func (s *Service) copyLogs(ctx context.Context, id string, w io.Writer) error {
	rc, err := s.rt.cli.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return err
	}
	defer rc.Close()
	_, err = stdcopy.StdCopy(w, w, rc)
	return err
}

// Close implements cluster.Service: the container and its anonymous
// volumes are removed (force: a running or paused one is killed), and the
// log dir too unless the runtime keeps it. Safe to call more than once.
func (s *Service) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	id := s.id
	s.mu.Unlock()
	var errs []error
	if id != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if s.rt.keep {
			_ = s.saveLogs(ctx, filepath.Join(s.dir, s.name+".log"))
		}
		err := s.rt.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !client.IsErrNotFound(err) {
			errs = append(errs, fmt.Errorf("remove %s container: %w", s.name, err))
		} else {
			errs = append(errs, s.rt.g.UntrackContainer(id))
		}
	}
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	if !s.rt.keep {
		errs = append(errs, os.RemoveAll(s.dir))
	}
	return errors.Join(errs...)
}

// slogAdapter routes testcontainers' log lines to slog at debug level.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Printf(format string, v ...any) { a.l.Debug(fmt.Sprintf(format, v...)) }

// exec runs cmd in the container and returns its exit code.
func (s *Service) exec(ctx context.Context, id string, cmd []string) (int, error) {
	_, code, err := s.execOutput(ctx, id, cmd)
	if err != nil {
		return 0, fmt.Errorf("exec in %s: %w", s.name, err)
	}
	return code, nil
}

// ExitStatus says how the container's main process last ended, as the
// local runtime's ExitStatus spells it for a child process: "" while it
// runs (or before it ever ran), "signal: killed" after a SIGKILL (exit
// code 137, the engine's 128+9), else "exit status N".
func (s *Service) ExitStatus() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := s.state(ctx)
	if err != nil || st.Running || st.Status == "created" {
		return ""
	}
	if st.ExitCode == 128+int(syscall.SIGKILL) {
		return "signal: killed"
	}
	return "exit status " + strconv.Itoa(st.ExitCode)
}

// Paused reports whether the engine has the container frozen.
func (s *Service) Paused(ctx context.Context) (bool, error) {
	st, err := s.state(ctx)
	if err != nil {
		return false, err
	}
	return st.Paused, nil
}

// PID is the host pid of the container's main process (the server: the
// images exec it as PID 1), 0 when it does not run.
func (s *Service) PID(ctx context.Context) (int, error) {
	st, err := s.state(ctx)
	if err != nil || !st.Running {
		return 0, err
	}
	return st.Pid, nil
}

// HolderID is, for a node of a replicated service, the engine's id of
// the holder container whose namespace it joins (nodes.go); "" otherwise.
func (s *Service) HolderID() string {
	if s.holder == nil {
		return ""
	}
	return s.holder.id
}
