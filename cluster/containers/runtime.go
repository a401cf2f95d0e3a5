package containers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/docker/docker/client"

	"github.com/deliverycheck/deliverycheck/process/guard"
)

// Options configure a Runtime.
type Options struct {
	// Engine to use, overriding the default of [Detect]'s choice.
	Engine *Engine
	// Keep leaves each service's log dir on disk after Close (containers
	// are removed regardless).
	Keep bool
	// TempRoot is where log dirs are made, overriding os.TempDir().
	TempRoot string
	// Logger overrides slog.Default().
	Logger *slog.Logger
}

// Runtime creates services as containers on one engine and owns what
// they share: the engine client, the run's label and the watchdog that
// removes the containers if the harness dies. Close it after the services.
type Runtime struct {
	eng  Engine
	cli  *client.Client
	g    *guard.Guard
	run  string
	own  string
	keep bool
	tmp  string
	log  *slog.Logger
}

// New connects to the engine, removes containers left by runs whose
// harness died, makes sure the network every container joins exists
// (network.go: services start in parallel, and must not race to create
// it), and starts the watchdog.
func New(ctx context.Context, o Options) (_ *Runtime, err error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	var eng Engine
	if o.Engine != nil {
		eng = *o.Engine
	} else if eng, err = Detect(ctx); err != nil {
		return nil, fmt.Errorf("containers runtime: %w", err)
	}
	if err := useEngine(eng); err != nil {
		return nil, fmt.Errorf("containers runtime: %w", err)
	}
	cli, err := newClient(eng.Host)
	if err != nil {
		return nil, fmt.Errorf("containers runtime: %w", err)
	}
	defer func() {
		if err != nil {
			cli.Close()
		}
	}()
	if err := sweep(ctx, cli, log); err != nil {
		return nil, fmt.Errorf("containers runtime: %w", err)
	}
	if _, err := ensureNetwork(ctx, cli, log); err != nil {
		return nil, fmt.Errorf("containers runtime: %w", err)
	}
	g, err := newGuard(eng.Host)
	if err != nil {
		return nil, fmt.Errorf("containers runtime: %w", err)
	}
	if g == nil {
		log.Warn("no watchdog for containers (curl not found or engine not on a plain socket): a harness killed with -9 leaves them until the next run sweeps them")
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return &Runtime{
		eng: eng, cli: cli, g: g,
		run:  "dc-" + hex.EncodeToString(b[:]),
		own:  owner(os.Getpid()),
		keep: o.Keep, tmp: o.TempRoot,
		log: log.With("runtime", "containers"),
	}, nil
}

// Engine is the engine the runtime uses.
func (r *Runtime) Engine() Engine { return r.eng }

// Close stops the watchdog and closes the engine client. Close every
// service first: their containers are no longer guarded after this.
func (r *Runtime) Close() error {
	return errors.Join(r.g.Close(), r.cli.Close())
}
