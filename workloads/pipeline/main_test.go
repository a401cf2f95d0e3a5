package pipeline

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/workloads/supervisor"
	"github.com/deliverycheck/deliverycheck/workloads/worker"
)

// The test binary doubles as the worker binary: the supervisor starts it
// again with a spec in the environment, and TestMain runs the worker.
func TestMain(m *testing.M) {
	if spec := os.Getenv(supervisor.SpecEnv); spec != "" {
		os.Exit(worker.Main(spec))
	}
	code := m.Run()
	env.close()
	os.Exit(code)
}

// env is the one cluster shared by every test of the package: a JVM and an
// Erlang VM per test would starve a 2-core machine.
var env testEnv

type testEnv struct {
	once sync.Once
	c    *cluster.Cluster
	err  error
}

func (e *testEnv) cluster(t testing.TB) *cluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts real servers")
	}
	e.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		e.c, e.err = cluster.Start(ctx, cluster.Config{})
	})
	if e.err != nil {
		t.Fatalf("start cluster: %v", e.err)
	}
	return e.c
}

func (e *testEnv) close() {
	if e.c != nil {
		if err := e.c.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close cluster:", err)
		}
	}
}

// workerCmd starts this test binary as a worker.
func workerCmd() []string { return []string{os.Args[0]} }
