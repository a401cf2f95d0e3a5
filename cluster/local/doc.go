// Package local runs real servers as child processes of the harness: the
// local runtime of [cluster.Service].
//
// Each server gets a fresh temp dir and free 127.0.0.1 ports, and never
// touches a system-wide instance. Every child runs in its own process group
// ([process.Group]) so that Kill, Pause and Resume reach the whole server
// (PostgreSQL backends, the Erlang VM's helpers) at once. A guard process
// ([guard.Guard]) per service kills those groups and removes the temp dir
// if the harness itself dies without cleaning up (SIGKILL, test timeout),
// so nothing outlives a run.
//
// Start with [NewPostgres], [NewKafka] and [NewRabbitMQ].
package local
