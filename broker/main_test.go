package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/cluster/local"
	"github.com/deliverycheck/deliverycheck/internal/testenv"
)

// TestMain runs the package's tests, then closes every server a test
// started through a shared* helper. Servers are started lazily, once per
// package run, the first time a test asks for one: a `-run Kafka` run never
// starts RabbitMQ and the other way round.
//
// To add a server kind: a sync.OnceValues that starts it and calls
// servers.onClose with its Close, plus a shared* helper that skips the
// test when the server cannot be had (see sharedRabbitMQ).
func TestMain(m *testing.M) {
	code := m.Run()
	if err := servers.closeAll(); err != nil {
		fmt.Fprintln(os.Stderr, "close test servers:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// servers collects the Close functions of the servers this package's
// tests started, so TestMain can close them after m.Run.
var servers testServers

type testServers struct {
	mu     sync.Mutex
	closes []func() error
}

func (s *testServers) onClose(f func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closes = append(s.closes, f)
}

func (s *testServers) closeAll() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var first error
	for i := len(s.closes) - 1; i >= 0; i-- {
		if err := s.closes[i](); err != nil && first == nil {
			first = err
		}
	}
	s.closes = nil
	return first
}

// rabbitNode starts the package's one RabbitMQ node the first time it is
// called. Tests that kill or restart it must leave it running (Start it
// again) before they end, and must not run in parallel with other
// RabbitMQ tests.
var rabbitNode = sync.OnceValues(func() (*local.RabbitMQ, error) {
	r, err := local.NewRabbitMQ(local.Options{})
	if err != nil {
		return nil, err
	}
	servers.onClose(r.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := r.Start(ctx); err != nil {
		return nil, fmt.Errorf("%w rabbitmq: %w", errStartFailed, err)
	}
	return r, nil
})

// sharedRabbitMQ returns the package's RabbitMQ node, starting it if
// needed; it skips the test with -short or when RabbitMQ is not installed
// (fails it under testenv.RequireServers), and fails it when an installed
// node will not start.
func sharedRabbitMQ(tb testing.TB) *local.RabbitMQ {
	tb.Helper()
	testenv.SkipIfShort(tb, "starts a real RabbitMQ node")
	r, err := rabbitNode()
	if err != nil && errors.Is(err, errStartFailed) {
		tb.Fatalf("rabbitmq: %v", err)
	}
	testenv.MustHaveServer(tb, "rabbitmq", err)
	return r
}

// errStartFailed marks a server that is installed but would not start,
// which fails a test instead of skipping it.
var errStartFailed = errors.New("start shared test server")
