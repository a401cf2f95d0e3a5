package cluster

import "context"

// Service is one real server under the harness's control.
//
// A Service is created stopped; Start brings it up and returns only once a
// client can use it (readiness is checked with a real client call, not a
// log line). Every method that blocks takes a context and gives up when it
// is done. Close releases everything the service owns (processes, temp
// dirs, ports) and is safe to call more than once, in any state.
type Service interface {
	// Name is a short stable identifier such as "postgres" or "kafka".
	Name() string
	// Start starts the server and waits until it is ready.
	Start(ctx context.Context) error
	// Stop shuts the server down gracefully and waits for it to exit.
	Stop(ctx context.Context) error
	// Kill sends SIGKILL to the server (all its processes) and waits for
	// it to exit: a crash, with whatever the server had not made durable lost.
	Kill(ctx context.Context) error
	// Pause freezes the server (SIGSTOP): sockets stay open, nothing answers.
	Pause(ctx context.Context) error
	// Resume undoes Pause (SIGCONT).
	Resume(ctx context.Context) error
	// Restart stops the server gracefully if it runs, then starts it again
	// on the same ports with the same data.
	Restart(ctx context.Context) error
	// Endpoint is the host:port a client dials to reach the server
	// directly. Clients of a run dial the service's proxy link instead.
	Endpoint() string
	// Logs is the path of the server's log file.
	Logs() string
	// Version is the exact server version, for reports (e.g.
	// "PostgreSQL 15.18"). It is known once Start has succeeded.
	Version() string
	// Close kills anything still running and removes the service's temp
	// dir unless it was asked to keep it.
	Close() error
}

// PIDer is implemented by services that run as local processes. It lists
// every process the service started that is still alive, so a test can
// prove nothing outlived a run.
type PIDer interface {
	PIDs() []int
}
