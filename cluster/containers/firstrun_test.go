package containers

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/testcontainers/testcontainers-go"
	"golang.org/x/sync/errgroup"

	"github.com/deliverycheck/deliverycheck/internal/testenv"
)

// TestFirstRunOnFreshEngine is the regression test for issue 19's first
// failure on a fresh machine: "ensure default network: network create:
// network name reaper_default already used". On an engine that has never
// run a container, testcontainers-go creates its default network on the
// first container create, and three creates at once race to make it.
//
// Flow: remove that network (only when no container uses it, so nobody
// else's run is disturbed), which is what an engine that never ran a
// container looks like; start PostgreSQL, Kafka and RabbitMQ at once, as
// cluster.Start does; all three must come up.
func TestFirstRunOnFreshEngine(t *testing.T) {
	testenv.SkipIfShort(t, "starts three containers")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	eng := requireEngine(t, ctx, DefaultImage("postgres"), DefaultImage("kafka"), DefaultImage("rabbitmq"))
	removeUnusedNetwork(t, ctx, eng, testcontainers.ReaperDefault)

	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	r, err := New(ctx, Options{Engine: &eng, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
	}()
	pg, err := r.NewPostgres("")
	if err != nil {
		t.Fatal(err)
	}
	k, err := r.NewKafka("", "")
	if err != nil {
		t.Fatal(err)
	}
	q, err := r.NewRabbitMQ("")
	if err != nil {
		t.Fatal(err)
	}
	services := []*Service{pg.Service, k.Service, q.Service}
	defer func() {
		for _, s := range services {
			if err := s.Close(); err != nil {
				t.Error(err)
			}
		}
	}()
	g, gctx := errgroup.WithContext(ctx)
	for _, s := range services {
		g.Go(func() error { return s.Start(gctx) })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// requireEngine returns the engine, when it can run images; otherwise it
// skips t, or fails it under testenv.RequireContainers.
func requireEngine(t *testing.T, ctx context.Context, images ...string) Engine {
	t.Helper()
	eng, err := Detect(ctx)
	if err != nil {
		testenv.MustHaveContainers(t, err.Error())
	}
	if err := CanProvide(ctx, eng, images); err != nil {
		testenv.MustHaveContainers(t, err.Error())
	}
	return eng
}

// removeUnusedNetwork removes network name from eng so the test starts
// as on an engine that never had it. A network some container is attached
// to belongs to a run in progress: the test is skipped rather than break
// that run.
func removeUnusedNetwork(t *testing.T, ctx context.Context, eng Engine, name string) {
	t.Helper()
	cli, err := newClient(eng.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	nw, err := cli.NetworkInspect(ctx, name, network.InspectOptions{})
	switch {
	case client.IsErrNotFound(err):
		return
	case err != nil:
		t.Fatalf("inspect network %s: %v", name, err)
	case len(nw.Containers) > 0:
		t.Skipf("network %s is in use by %d container(s) of another run: cannot make the engine look fresh", name, len(nw.Containers))
	}
	if err := cli.NetworkRemove(ctx, name); err != nil && !client.IsErrNotFound(err) {
		t.Fatalf("remove network %s: %v", name, err)
	}
	t.Logf("removed network %s: the engine now has no testcontainers network, as before its first run", name)
}

// TestEnsureNetwork covers both ways ensureNetwork settles the network:
// the engine's bridge when it lists one (nothing is created), else the
// fallback network, created once however many runtimes ask at once.
func TestEnsureNetwork(t *testing.T) {
	testenv.SkipIfShort(t, "talks to the container engine")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	eng := requireEngine(t, ctx)
	cli, err := newClient(eng.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	fallback := fmt.Sprintf("deliverycheck-test-%d", time.Now().UnixNano())
	defer func() {
		if err := cli.NetworkRemove(context.Background(), fallback); err != nil && !client.IsErrNotFound(err) {
			t.Errorf("remove %s: %v", fallback, err)
		}
	}()
	for _, tc := range []struct {
		name    string
		bridge  string
		callers int
		want    string
	}{
		{"engine's bridge", testcontainers.Bridge, 1, testcontainers.Bridge},
		{"no bridge: fallback created by one of three", "no-such-bridge", 3, fallback},
		{"no bridge: fallback already there", "no-such-bridge", 1, fallback},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, gctx := errgroup.WithContext(ctx)
			got := make([]string, tc.callers)
			for i := range got {
				g.Go(func() (err error) {
					got[i], err = ensureNetworkNamed(gctx, cli, log, tc.bridge, fallback)
					return err
				})
			}
			if err := g.Wait(); err != nil {
				t.Fatal(err)
			}
			for _, name := range got {
				if name != tc.want {
					t.Errorf("network %q, want %q", name, tc.want)
				}
			}
			list, err := cli.NetworkList(ctx, network.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, nw := range list {
				if nw.Name == fallback {
					n++
				}
			}
			want := 0
			if tc.want == fallback {
				want = 1
			}
			if n != want {
				t.Errorf("%d networks named %s, want %d", n, fallback, want)
			}
		})
	}
}
