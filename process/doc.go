// Package process starts a child process as the leader of its own process
// group and signals, stops and waits for the whole tree it grows, as
// deliverycheck's local runtime runs its servers.
//
// Read [Start] and [Group] first. A [Group] covers the leader's group
// and every descendant of the leader, also ones that moved to a session
// of their own (PostgreSQL backends call setsid): [Group.Kill] freezes
// them all before it kills, and returns only once every one is gone, so
// nothing a server started outlives it. Registered with a
// [guard.Guard], the group is killed even if the harness dies first.
//
// The subpackages are the rest of process supervision: [guard] is the
// watchdog that cleans up after a harness that died, and supervisor runs
// a pipeline's workers as processes and restarts them after crashes.
package process
