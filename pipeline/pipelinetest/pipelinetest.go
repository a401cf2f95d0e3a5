// Package pipelinetest is what tests that run whole pipelines share: a
// TestMain that lets the test binary double as the worker binary, and one
// set of servers per test package (a JVM and an Erlang VM per test would
// starve a 2-core machine).
package pipelinetest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/pipeline/worker"
	"github.com/deliverycheck/deliverycheck/process/supervisor"
)

// Main is a TestMain body: in a process the supervisor started as a worker
// it runs the worker; otherwise it runs the tests, then closes every set
// of servers.
func Main(m *testing.M, servers ...*Servers) {
	if spec := os.Getenv(supervisor.SpecEnv); spec != "" {
		os.Exit(worker.Main(spec))
	}
	code := m.Run()
	for _, s := range servers {
		s.Close()
	}
	os.Exit(code)
}

// WorkerCmd starts the running test binary as a worker.
func WorkerCmd() []string { return []string{os.Args[0]} }

// Servers is one set of PostgreSQL, Kafka and RabbitMQ for a test
// package, started on first use. Its zero value is ready to use. A
// package whose tests run scenarios side by side has one set per lane: a
// scenario's faults kill and cut its servers.
type Servers struct {
	mu sync.Mutex
	c  *cluster.Cluster
}

// Get returns the servers, starting them the first time; it skips the
// test under -short.
func (s *Servers) Get(t testing.TB) *cluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts real servers")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c == nil {
		// A start that failed is tried again by the next test: one
		// unlucky start must not fail every test after it.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		// DELIVERYCHECK_KEEP, which keeps the tests' run folders,
		// keeps the servers' data and logs too.
		c, err := cluster.Start(ctx, cluster.Config{Keep: os.Getenv("DELIVERYCHECK_KEEP") != ""})
		if err != nil {
			t.Fatalf("start servers: %v", err)
		}
		s.c = c
	}
	return s.c
}

// Reset closes the servers so the next Get starts fresh ones, after a run
// left them broken.
func (s *Servers) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c != nil {
		s.c.Close()
	}
	s.c = nil
}

// Close stops the servers.
func (s *Servers) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c != nil {
		if err := s.c.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close servers:", err)
		}
		s.c = nil
	}
}
