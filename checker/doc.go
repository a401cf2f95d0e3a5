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
// never observed as in-doubt. Only what happens after the commit's invoke
// proves it, and nothing that follows from a publish the producer made
// itself before committing. Each subscription is judged on its own: it
// must apply every committed event exactly once (or dead-letter it if it
// is poison, and never apply a poison one). Once the final read is
// complete its effects ledger is authoritative: an event is applied iff
// it has an effect row. Order is judged by when effects committed (an
// effect row's commit_time, else its apply ops' times); equal times are
// not ordered. Where a subscription has an inbox, inbox marks and effects
// must agree. Only the final-read attempt that completed counts.
//
// # Verdict
//
// The verdict is Invalid if any anomaly the guarantees do not allow was
// found; otherwise Valid only if the drain completed, the final read is
// complete and something was exercised (a commit took effect, every
// scheduled fault took effect, some fault of a random schedule did), and
// Unknown if not. Without those facts an event not yet applied is shown
// as unseen, not lost. [Result.Faults] lists each fault window with its
// outcome and evidence.
//
// # Intruder
//
// A history may hold the intruder's messages (intrude ops,
// docs/security.md): events published straight to the broker with the
// intruder's own credentials, which no authorized producer committed. An
// effect for one is an [UnauthorizedEffect], always fatal; a dead letter
// of one is a rejection; none is owed to any subscription, so none is
// lost. [Result.Intruder] says, per kind, what the broker and each
// subscription did with them. A run whose intruder did not bite (no
// message refused by the broker, nor accepted and then rejected, skipped
// or applied by every subscription), or with an accepted message some
// subscription neither rejected, skipped nor applied, is Unknown unless
// it is Invalid.
//
// # Transactional stage
//
// A history may hold a transactional consume-transform-produce stage
// (a txn-stage op, docs/history.md): a processor that, per input record,
// writes one record to each output topic and commits its input offsets in
// the same Kafka transaction. Its exactly-once is judged per input record
// from the final read_committed read of the output topics, the
// transactions' ops and what readers read during the run, into the kinds
// of [TxnStageKinds] (one [Anomaly] per kind and output topic) and
// [Result.TxnStage], which also sets the topics' delivery beside the
// processor's own effect on the database ("exactly once on Kafka's
// topics; at least once on the database"). A stage whose facts are not
// established (no transaction committed or aborted, an output topic not
// read whole, ...) makes the verdict Unknown.
package checker
