// Package testenv decides what a test does when a real server, tool or
// container engine it needs is not on this machine: skip on a laptop, fail
// where the environment says it must be there (`make test`, CI), so a run
// can never pass by quietly leaving the real servers out.
//
// It follows the Go tree's own internal/testenv: each Must… helper skips,
// unless the matching DELIVERYCHECK_REQUIRE_… variable is set, in which
// case it fails. -short always skips: it is asked for by the person
// running the tests, not a sign that something is missing.
package testenv

import (
	"os"
	"testing"
)

// Environment variables that turn a missing dependency from a skip into
// a failure. The Makefile's test target sets both.
const (
	// RequireServers covers the servers and tools scripts/deps.sh
	// installs: PostgreSQL, RabbitMQ, Kafka's jars, Chromium.
	RequireServers = "DELIVERYCHECK_REQUIRE_SERVERS"
	// RequireContainers covers the containers runtime: an engine and the
	// images scripts/containers.sh builds.
	RequireContainers = "DELIVERYCHECK_REQUIRE_CONTAINERS"
)

// ServersRequired reports whether RequireServers is set (to anything but
// "" or "0").
func ServersRequired() bool { return set(RequireServers) }

// ContainersRequired reports whether RequireContainers is set (to
// anything but "" or "0").
func ContainersRequired() bool { return set(RequireContainers) }

func set(name string) bool {
	v := os.Getenv(name)
	return v != "" && v != "0"
}

// SkipIfShort skips tb under -short, saying what it would have started
// (e.g. "starts a real Kafka broker").
func SkipIfShort(tb testing.TB, what string) {
	tb.Helper()
	if testing.Short() {
		tb.Skipf("-short: %s", what)
	}
}

// MustHaveServer ends tb when err says server (a server or a tool the
// real-server tests run, e.g. "rabbitmq", "chromium") is unavailable: a
// skip, or a failure when RequireServers is set. It returns when err is
// nil.
func MustHaveServer(tb testing.TB, server string, err error) {
	tb.Helper()
	if err == nil {
		return
	}
	if ServersRequired() {
		tb.Fatalf("%s required (%s is set) but unavailable: %v", server, RequireServers, err)
	}
	tb.Skipf("%s unavailable (set %s to make this a failure): %v", server, RequireServers, err)
}

// MustHaveContainers ends tb when the containers runtime is unavailable
// (why is not ""): a skip, or a failure when RequireContainers is set. It
// returns when why is "".
func MustHaveContainers(tb testing.TB, why string) {
	tb.Helper()
	if why == "" {
		return
	}
	if ContainersRequired() {
		tb.Fatalf("containers runtime required (%s is set) but unavailable: %s", RequireContainers, why)
	}
	tb.Skipf("containers runtime unavailable (set %s to make this a failure): %s", RequireContainers, why)
}
