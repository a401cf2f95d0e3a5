// Package checker finds lost, duplicate-effect and out-of-order deliveries
// in a history, and judges them against a scenario's [Guarantees] into a
// [Result].
//
// [Check] and [CheckFiles] take a history (see package history) and return
// a Result: a [Validity] verdict, the [Anomaly] findings of each kind per
// subscription (with example events, the ops that show them and the last
// pipeline [Boundary] each crossed), statistics, and time series for the
// report. The same history always gives the same Result, byte for byte
// once marshalled.
//
// # Rules
//
// An event is committed if its commit op is ok, or if it is indeterminate
// (info, or invoked and never completed) and something downstream proves it
// (a publish, a delivery, an effect, its outbox row), as Jepsen's Kafka
// checker does; such an event is shown as recovered, an indeterminate one
// never observed as in-doubt. Each subscription is judged on its own: it
// must apply every committed event exactly once (or dead-letter it if it
// is poison). Effects are counted from apply ok ops and from the effects
// table of the final read, whichever shows more.
//
// # Verdict
//
// The verdict is Invalid if any anomaly the guarantees do not allow was
// found; otherwise Valid only if the drain completed and the final read is
// complete, and Unknown if not. Without those facts an event not yet
// applied is shown as unseen, not lost.
package checker
