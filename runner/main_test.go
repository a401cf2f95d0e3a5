package runner

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

// The test binary doubles as the worker binary.
func TestMain(m *testing.M) {
	if spec := os.Getenv(supervisor.SpecEnv); spec != "" {
		os.Exit(worker.Main(spec))
	}
	code := m.Run()
	shared.close()
	os.Exit(code)
}

// shared is the one set of servers the package's tests run on.
var shared sharedCluster

type sharedCluster struct {
	mu  sync.Mutex
	c   *cluster.Cluster
	err error
}

func (s *sharedCluster) get(t testing.TB) *cluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts real servers")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		s.c, s.err = cluster.Start(ctx, cluster.Config{})
	}
	if s.err != nil {
		t.Fatalf("start servers: %v", s.err)
	}
	return s.c
}

// reset replaces the servers after a run left them broken.
func (s *sharedCluster) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c != nil {
		s.c.Close()
	}
	s.c, s.err = nil, nil
}

func (s *sharedCluster) close() {
	if s.c != nil {
		if err := s.c.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close servers:", err)
		}
	}
}

func workerCmd() []string { return []string{os.Args[0]} }
