package cluster

import (
	"context"
	"errors"
	"fmt"
)

// Service is one real server under the harness's control: the core every
// runtime provides. What a runtime may or may not be able to do besides
// (kill, pause, restart, name its log file, report its version, list its
// processes) is an optional ability, its own small interface below, as in
// Jepsen's db.clj: a caller checks for one with a type assertion, or asks
// the [Cluster] ([Cluster.Killer], [Cluster.Pauser], [Cluster.Restarter]),
// which says which service lacks it on which runtime.
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
	// Endpoint is the host:port a client dials to reach the server
	// directly. Clients of a run dial the service's proxy link instead.
	Endpoint() string
	// Close kills anything still running and removes the service's temp
	// dir unless it was asked to keep it.
	Close() error
}

// Killer is a service that can be crashed. Kill sends SIGKILL to the
// server (all its processes) and waits for it to exit: a crash, with
// whatever the server had not made durable lost. Start brings it back.
type Killer interface {
	Kill(ctx context.Context) error
}

// Pauser is a service that can be frozen. Pause freezes the server
// (SIGSTOP): sockets stay open, nothing answers. Resume undoes Pause
// (SIGCONT).
type Pauser interface {
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
}

// Restarter is a service that can be restarted in place. Restart stops
// the server gracefully if it runs, then starts it again on the same
// ports with the same data.
type Restarter interface {
	Restart(ctx context.Context) error
}

// LogFiler is a service whose log the harness can read. LogFile is the
// path of the server's log file; a run copies it into its folder.
type LogFiler interface {
	LogFile() string
}

// Versioner is a service that reports its exact server version, for
// reports (e.g. "PostgreSQL 15.18"). It is known once Start has
// succeeded.
type Versioner interface {
	Version() string
}

// Failoverer is a replicated database that can lose its primary.
// Failover kills the primary (kill -9), promotes a standby, waits until it
// accepts writes and points the service's link at it, so every client of
// the run reconnects to the new primary through the same address and the
// final read reads it. The evidence says what it did, in words, e.g.
// "postgres-0 killed (signal: killed), ...; postgres-1 promoted (timeline
// 2) ...; link postgres → postgres-1".
type Failoverer interface {
	Failover(ctx context.Context) (evidence string, err error)
}

// ReplicationPorter is a replicated service whose nodes replicate over a
// listener of their own. ReplicationPort is its port, the same on every
// node (each alone in its network namespace), so a cut of that port
// between nodes stops replication while the rest of their traffic flows:
// a Kafka cluster's inter-broker listener, whose cut leaves the
// controller quorum (its own listener) and the clients (through the
// links) reaching every node.
type ReplicationPorter interface {
	ReplicationPort() int
}

// HealthChecker is a replicated service that can tell whether it has
// recovered from the loss of a node: every node serves and the service's
// replicas are back in sync (Kafka: every node a live broker, no
// under-replicated partition; RabbitMQ: every node running in the
// cluster, every quorum queue's members running). A rolling restart
// waits for it before it restarts the next node. CheckHealth returns nil
// when healthy, else an error saying what is not; it does not wait.
type HealthChecker interface {
	CheckHealth(ctx context.Context) error
}

// Wiper is a node of a replicated service that can be replaced by a node
// with an empty disk, as when a pod is rescheduled without its volume:
// same name, same address, same configuration, nothing it ever stored.
// Wipe kills the node (kill -9) and removes its data; the node stays
// down. Rejoin starts it again and makes it a full member of its cluster
// once more, doing what the service needs for that (see each
// implementation); Start of a wiped node rejoins it the same way, so a
// heal that only starts what was killed is a rejoin too. Each returns
// its evidence in words, e.g. "kafka-1 killed (signal: killed); disk
// wiped: 212 files, 3.1 MiB" and "kafka-1 rejoined with an empty disk:
// storage formatted again (directory id ...)".
type Wiper interface {
	Wipe(ctx context.Context) (evidence string, err error)
	Rejoin(ctx context.Context) (evidence string, err error)
}

// RabbitUserAdmin is a RabbitMQ that can add and remove users of a run's
// own (AMQP itself cannot): the intruder's, with permissions on the
// default vhost "/" (configure, write and read: RabbitMQ's regular
// expressions over resource names, "^$" for none). DeleteUser of a user
// that does not exist succeeds. See docs/security.md.
type RabbitUserAdmin interface {
	AddUser(ctx context.Context, user, password, configure, write, read string) error
	DeleteUser(ctx context.Context, user string) error
	UserExists(ctx context.Context, user string) (bool, error)
}

// SASLListener is a Kafka with a second client listener where users of
// a run's own log in with SCRAM-SHA-256, and an authorizer whose super
// user is the plaintext listeners' principal (every client of the
// harness): such a user may do only what its ACLs allow. Users and ACLs
// are made through the Kafka API (broker.CreateKafkaUser). The endpoint
// is dialled directly, not through the service's link.
type SASLListener interface {
	SASLEndpoint() string
}

// PIDer is implemented by services that run as local processes. It lists
// every process the service started that is still alive, so a test can
// prove nothing outlived a run.
type PIDer interface {
	PIDs() []int
}

// UnsupportedError says that a service lacks the optional ability an
// operation needs on the runtime that provisioned it. It matches
// [errors.ErrUnsupported].
type UnsupportedError struct {
	Service string // "kafka"
	Runtime string // "local", "containers"
	// Cannot is what the service cannot be: "killed", "paused",
	// "restarted".
	Cannot string
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("service %s cannot be %s on runtime %s", e.Service, e.Cannot, e.Runtime)
}

// Is reports whether target is errors.ErrUnsupported.
func (e *UnsupportedError) Is(target error) bool { return target == errors.ErrUnsupported }

// Killer returns the named service as a [Killer], or an error: an
// [*UnsupportedError] when it cannot be killed on this cluster's runtime.
func (c *Cluster) Killer(name string) (Killer, error) { return ability[Killer](c, name, "killed") }

// Pauser returns the named service as a [Pauser], or an error: an
// [*UnsupportedError] when it cannot be paused on this cluster's runtime.
func (c *Cluster) Pauser(name string) (Pauser, error) { return ability[Pauser](c, name, "paused") }

// Restarter returns the named service as a [Restarter], or an error: an
// [*UnsupportedError] when it cannot be restarted on this cluster's
// runtime.
func (c *Cluster) Restarter(name string) (Restarter, error) {
	return ability[Restarter](c, name, "restarted")
}

// HealthChecker returns the named service as a [HealthChecker], or an
// error: an [*UnsupportedError] when it is not a replicated service that
// can tell.
func (c *Cluster) HealthChecker(name string) (HealthChecker, error) {
	return ability[HealthChecker](c, name, "checked for health (it is not a replicated service)")
}

// Wiper returns the named node as a [Wiper], or an error: an
// [*UnsupportedError] when it cannot be replaced by an empty one (a
// single server, whose cluster would be gone with its disk, or a runtime
// without the ability).
func (c *Cluster) Wiper(name string) (Wiper, error) {
	return ability[Wiper](c, name, "replaced with an empty disk")
}

// Failoverer returns the named service as a [Failoverer], or an error:
// an [*UnsupportedError] when it has no standby to fail over to.
func (c *Cluster) Failoverer(name string) (Failoverer, error) {
	return ability[Failoverer](c, name, "failed over (it has no standby)")
}

// ReplicationPorter returns the named service as a [ReplicationPorter],
// or an error: an [*UnsupportedError] when it has no listener for
// replication alone.
func (c *Cluster) ReplicationPorter(name string) (ReplicationPorter, error) {
	return ability[ReplicationPorter](c, name, "cut off from its replication alone (no listener of its own carries it)")
}

// RabbitUserAdmin returns the named service as a [RabbitUserAdmin], or
// an error: an [*UnsupportedError] when this runtime cannot add its users.
func (c *Cluster) RabbitUserAdmin(name string) (RabbitUserAdmin, error) {
	return ability[RabbitUserAdmin](c, name, "given users of a run's own")
}

// SASLListener returns the named service as a [SASLListener], or an
// error: an [*UnsupportedError] when it has no SASL listener on this
// runtime.
func (c *Cluster) SASLListener(name string) (SASLListener, error) {
	return ability[SASLListener](c, name, "logged in to with SASL (it has no SASL listener and authorizer)")
}

// ability is the named service as A, or why it cannot be.
func ability[A any](c *Cluster, name, cannot string) (A, error) {
	var zero A
	s := c.lookup(name)
	if s == nil {
		return zero, fmt.Errorf("cluster: no service %s", name)
	}
	a, ok := s.(A)
	if !ok {
		return zero, &UnsupportedError{Service: name, Runtime: c.runtime, Cannot: cannot}
	}
	return a, nil
}

// lookup is the named service, or the named node of a replicated one.
func (c *Cluster) lookup(name string) Service {
	if s := c.services[name]; s != nil {
		return s
	}
	for _, nodes := range c.nodes {
		for _, n := range nodes {
			if n.Name() == name {
				return n
			}
		}
	}
	return nil
}
