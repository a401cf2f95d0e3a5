package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/deliverycheck/deliverycheck/cluster/containers"
	"github.com/deliverycheck/deliverycheck/cluster/freeport"
	"github.com/deliverycheck/deliverycheck/cluster/link"
	"github.com/deliverycheck/deliverycheck/cluster/local"
)

// Both runtimes have every optional ability today; an external runtime
// (servers someone else runs) would have fewer.
var (
	_ fullService = (*local.Postgres)(nil)
	_ fullService = (*local.Kafka)(nil)
	_ fullService = (*local.RabbitMQ)(nil)
	_ fullService = (*containers.Service)(nil)
)

type fullService interface {
	Service
	Killer
	Pauser
	Restarter
	LogFiler
	Versioner
}

// Service names, as scenarios and reports spell them.
const (
	Postgres = "postgres"
	Kafka    = "kafka"
	RabbitMQ = "rabbitmq"
)

// Names lists every service a cluster can hold.
func Names() []string { return []string{Postgres, Kafka, RabbitMQ} }

// Config says which services a cluster runs and how.
type Config struct {
	// Runtime is "local" (child processes), "containers" (testcontainers
	// on Docker or Podman) or "auto" (see [ResolveRuntime]); "" is "local".
	Runtime string
	// Images overrides the containers runtime's image per service name
	// (e.g. "postgres": "postgres:17"); see containers.DefaultImage.
	Images map[string]string
	// Services to start, overriding the default of all three.
	Services []string
	// Keep leaves temp dirs (data, logs) on disk after Close.
	Keep bool
	// TempRoot is where temp dirs are made, overriding os.TempDir().
	TempRoot string
	// KafkaVersion overrides the default broker version.
	KafkaVersion string
	// Logger overrides slog.Default().
	Logger *slog.Logger
}

// Cluster is a set of running services, each behind its own toxiproxy
// link. Clients of a run reach a service only through its link (see
// [Cluster.ClientURL]), so a nemesis can break any one connection path.
// The caller should call Close when finished, also on error paths.
type Cluster struct {
	runtime  string
	ctr      *containers.Runtime // nil on the local runtime
	links    *link.Server
	services map[string]Service
	urls     map[string]func(addr string) string
}

// Start provisions and starts the configured services concurrently and
// returns once every one is ready. On error everything started is torn down.
func Start(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	names := cfg.Services
	if len(names) == 0 {
		names = Names()
	}
	if cfg.Runtime == "" {
		cfg.Runtime = Local
	}
	var eng *containers.Engine // found while resolving "auto"
	if cfg.Runtime == Auto {
		cfg.Runtime, _, eng = resolveAuto(ctx, images(cfg, names))
	}
	if cfg.Runtime != Local && cfg.Runtime != Containers {
		return nil, fmt.Errorf("cluster: unknown runtime %q (want %s, %s or %s)", cfg.Runtime, Local, Containers, Auto)
	}
	for _, n := range names {
		if !slices.Contains(Names(), n) {
			return nil, fmt.Errorf("cluster: unknown service %q (want one of %v)", n, Names())
		}
	}
	for n := range cfg.Images {
		if !slices.Contains(Names(), n) {
			return nil, fmt.Errorf("cluster: image for unknown service %q (want one of %v)", n, Names())
		}
	}
	c := &Cluster{
		runtime:  cfg.Runtime,
		links:    link.NewServer(),
		services: map[string]Service{},
		urls:     map[string]func(string) string{},
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close())
		}
	}()
	if cfg.Runtime == Containers {
		if c.ctr, err = containers.New(ctx, containers.Options{Engine: eng, Keep: cfg.Keep, TempRoot: cfg.TempRoot, Logger: cfg.Logger}); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	opts := local.Options{Keep: cfg.Keep, TempRoot: cfg.TempRoot, Logger: cfg.Logger}
	for _, n := range names {
		if err := c.provision(n, opts, cfg); err != nil {
			return nil, err
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, s := range c.services {
		g.Go(func() error { return s.Start(gctx) })
	}
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	return c, nil
}

// provision creates one service (not started) and the link in front of it.
func (c *Cluster) provision(name string, opts local.Options, cfg Config) error {
	// A link keeps its port across Refuse and Accept, so it takes one no
	// outgoing connection can hold when it listens again.
	port, err := freeport.Take(1)
	if err != nil {
		return fmt.Errorf("cluster: link %s: %w", name, err)
	}
	l, err := c.links.Add(name, "127.0.0.1:"+strconv.Itoa(port[0]), "127.0.0.1:1")
	if err != nil {
		return err
	}
	var s Service
	if c.ctr != nil {
		img := cfg.Images[name]
		switch name {
		case Postgres:
			pg, err := c.ctr.NewPostgres(img)
			if err != nil {
				return err
			}
			s, c.urls[name] = pg, pg.DSN
		case Kafka:
			k, err := c.ctr.NewKafka(img, l.Addr())
			if err != nil {
				return err
			}
			s, c.urls[name] = k, func(addr string) string { return addr }
		case RabbitMQ:
			r, err := c.ctr.NewRabbitMQ(img)
			if err != nil {
				return err
			}
			s, c.urls[name] = r, r.URL
		}
		c.services[name] = s
		return l.SetUpstream(s.Endpoint())
	}
	switch name {
	case Postgres:
		pg, err := local.NewPostgres(local.PostgresOptions{Options: opts})
		if err != nil {
			return err
		}
		s, c.urls[name] = pg, pg.DSN
	case Kafka:
		// The broker advertises the link's address, so every client,
		// including ones we don't write, goes through the proxy.
		k, err := local.NewKafka(local.KafkaOptions{Options: opts, Version: cfg.KafkaVersion, Advertise: l.Addr()})
		if err != nil {
			return err
		}
		s, c.urls[name] = k, func(addr string) string { return addr }
	case RabbitMQ:
		r, err := local.NewRabbitMQ(opts)
		if err != nil {
			return err
		}
		s, c.urls[name] = r, r.URL
	}
	c.services[name] = s
	return l.SetUpstream(s.Endpoint())
}

// Runtime names the runtime that provisioned the cluster ("local" or
// "containers").
func (c *Cluster) Runtime() string { return c.runtime }

// Service returns the named service, or nil if the cluster does not run it.
func (c *Cluster) Service(name string) Service { return c.services[name] }

// Services returns the running services sorted by name.
func (c *Cluster) Services() []Service {
	out := make([]Service, 0, len(c.services))
	for _, s := range c.services {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out
}

// Link returns the proxy link in front of the named service, or nil.
func (c *Cluster) Link(name string) *link.Link { return c.links.Link(name) }

// Links returns the link server, to heal everything at once.
func (c *Cluster) Links() *link.Server { return c.links }

// ClientURL is what a client of the run dials to reach the named service
// through its link: a PostgreSQL DSN, a Kafka seed broker (host:port) or
// an AMQP URL. It is "" for a service the cluster does not run.
func (c *Cluster) ClientURL(name string) string {
	u, l := c.urls[name], c.links.Link(name)
	if u == nil || l == nil {
		return ""
	}
	return u(l.Addr())
}

// Versions maps each service's name to its exact server version, for the
// services that report one ([Versioner]).
func (c *Cluster) Versions() map[string]string {
	out := map[string]string{}
	for n, s := range c.services {
		if v, ok := s.(Versioner); ok {
			out[n] = v.Version()
		}
	}
	return out
}

// PIDs lists every live process of every service, for cleanup checks.
func (c *Cluster) PIDs() []int {
	var out []int
	for _, s := range c.services {
		if p, ok := s.(PIDer); ok {
			out = append(out, p.PIDs()...)
		}
	}
	return out
}

// Close tears everything down: links first (so clients see the services
// vanish together), then every service. It reports every failure, not just
// the first, and is safe to call more than once.
func (c *Cluster) Close() error {
	errs := []error{c.links.Close()}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range c.services {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Close(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if c.ctr != nil {
		errs = append(errs, c.ctr.Close())
		c.ctr = nil
	}
	return errors.Join(errs...)
}
