package containers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/docker/docker/client"
)

// Engine is a healthy container engine reachable through the Docker API.
type Engine struct {
	// Host is the engine's address as DOCKER_HOST spells it, e.g.
	// "unix:///run/podman/podman.sock".
	Host string
	// Name is "Docker" or "Podman".
	Name string
	// Version is the engine's own version.
	Version string
	// From says how Host was found (e.g. "DOCKER_HOST", "default socket").
	From string
}

func (e Engine) String() string {
	return fmt.Sprintf("%s %s at %s (%s)", e.Name, e.Version, e.Host, e.From)
}

// candidate is one place an engine may listen.
type candidate struct{ host, from string }

// candidates lists where to look, in order: DOCKER_HOST wins when set
// (and is then the only place tried: a user who set it means it), then
// Docker's default socket, then Podman's rootful and rootless sockets.
func candidates() []candidate {
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		return []candidate{{h, "DOCKER_HOST"}}
	}
	out := []candidate{
		{"unix:///var/run/docker.sock", "Docker's default socket"},
		{"unix:///run/podman/podman.sock", "Podman's rootful socket"},
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		out = append(out,
			candidate{"unix://" + d + "/podman/podman.sock", "Podman's rootless socket"},
			candidate{"unix://" + d + "/docker.sock", "rootless Docker's socket"})
	}
	return out
}

// ErrNoEngine means no container engine answered.
var ErrNoEngine = errors.New("no container engine reachable")

// Detect finds a container engine that answers a ping and a version
// request within a few seconds. It never panics: testcontainers-go panics
// when it cannot find an engine, so callers ask here first. The error
// lists every place tried and why each failed.
func Detect(ctx context.Context) (Engine, error) {
	var why []string
	for _, c := range candidates() {
		if path, ok := strings.CutPrefix(c.host, "unix://"); ok {
			if _, err := os.Stat(path); err != nil {
				why = append(why, fmt.Sprintf("%s: %s: no socket", c.from, c.host))
				continue
			}
		}
		e, err := ping(ctx, c)
		if err != nil {
			why = append(why, fmt.Sprintf("%s: %s: %v", c.from, c.host, err))
			continue
		}
		return e, nil
	}
	return Engine{}, fmt.Errorf("%w (%s)", ErrNoEngine, strings.Join(why, "; "))
}

func ping(ctx context.Context, c candidate) (Engine, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cli, err := newClient(c.host)
	if err != nil {
		return Engine{}, err
	}
	defer cli.Close()
	if _, err := cli.Ping(ctx); err != nil {
		return Engine{}, fmt.Errorf("ping: %w", err)
	}
	v, err := cli.ServerVersion(ctx)
	if err != nil {
		return Engine{}, fmt.Errorf("version: %w", err)
	}
	e := Engine{Host: c.host, Name: "Docker", Version: v.Version, From: c.from}
	for _, comp := range v.Components {
		if strings.Contains(comp.Name, "Podman") {
			e.Name = "Podman"
		}
	}
	return e, nil
}

func newClient(host string) (*client.Client, error) {
	cli, err := client.NewClientWithOpts(client.WithHost(host), client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("docker client for %s: %w", host, err)
	}
	return cli, nil
}

// useEngine points testcontainers-go at e. testcontainers reads its engine
// from the environment once per process and caches it, so this is set
// before its first call and must agree with every later one. Ryuk, its
// reaper container, is turned off: its image may not be pullable (this
// runtime must work with no registry) and the runtime reaps its own
// containers (see guard.go).
func useEngine(e Engine) error {
	if cur := os.Getenv("DOCKER_HOST"); cur != "" && cur != e.Host {
		return fmt.Errorf("DOCKER_HOST is %s but the engine in use is %s", cur, e.Host)
	}
	if err := os.Setenv("DOCKER_HOST", e.Host); err != nil {
		return err
	}
	return os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
}

// CanProvide reports whether engine e can run every image: each is
// present, or its registry answers for it (checked without pulling).
func CanProvide(ctx context.Context, e Engine, images []string) error {
	cli, err := newClient(e.Host)
	if err != nil {
		return err
	}
	defer cli.Close()
	var missing []string
	for _, img := range images {
		if _, err := cli.ImageInspect(ctx, img); err == nil {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := cli.DistributionInspect(rctx, img, "")
		cancel()
		if err != nil {
			missing = append(missing, img)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("image(s) %s neither present nor reachable in a registry (pull them, or point DELIVERYCHECK_IMAGE_<SERVICE> or --image at local ones)", strings.Join(missing, ", "))
	}
	return nil
}

// Exists reports whether engine e still has container id, for tests and
// checks that a run left nothing behind.
func Exists(ctx context.Context, e Engine, id string) (bool, error) {
	cli, err := newClient(e.Host)
	if err != nil {
		return false, err
	}
	defer cli.Close()
	if _, err := cli.ContainerInspect(ctx, id); err != nil {
		if client.IsErrNotFound(err) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}
