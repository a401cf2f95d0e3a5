package history

import (
	"fmt"
	"strconv"
)

// Type says how an op ended, as in Jepsen: an Invoke starts an operation and
// exactly one of OK, Fail or Info completes it. Observations that have no
// meaningful start (a delivery, a final-read row) are written as a lone OK.
type Type uint8

// The op types. The zero Type is invalid and is never written.
const (
	Invoke Type = iota + 1 // the process is about to attempt F
	OK                     // F definitely took effect
	Fail                   // F definitely did not take effect
	Info                   // indeterminate: F may or may not have taken effect
)

var typeNames = [...]string{Invoke: "invoke", OK: "ok", Fail: "fail", Info: "info"}

// String returns the wire name of t: "invoke", "ok", "fail" or "info".
func (t Type) String() string {
	if t >= Invoke && t <= Info {
		return typeNames[t]
	}
	return "type(" + strconv.Itoa(int(t)) + ")"
}

// ParseType parses a wire name as returned by [Type.String].
func ParseType(s string) (Type, error) {
	switch s {
	case "invoke":
		return Invoke, nil
	case "ok":
		return OK, nil
	case "fail":
		return Fail, nil
	case "info":
		return Info, nil
	}
	return 0, &TypeError{Name: s}
}

// A TypeError is a type name that is not one of invoke, ok, fail, info.
type TypeError struct{ Name string }

func (e *TypeError) Error() string { return fmt.Sprintf("history: invalid op type %q", e.Name) }

// MarshalText implements [encoding.TextMarshaler].
func (t Type) MarshalText() ([]byte, error) {
	if t < Invoke || t > Info {
		return nil, fmt.Errorf("history: invalid op type %d", t)
	}
	return []byte(typeNames[t]), nil
}

// UnmarshalText implements [encoding.TextUnmarshaler].
func (t *Type) UnmarshalText(b []byte) error {
	v, err := ParseType(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// F names what an op attempted or observed. The pipeline vocabulary is the
// set of F constants below; other values are kept and ignored by the checker.
type F string

// The pipeline vocabulary. See docs/history.md for which process writes
// each one, with which types and which Value fields.
const (
	Setup     F = "setup"      // harness: run parameters, value.subscriptions lists every subscription
	Commit    F = "commit"     // producer: local tx writing the aggregate and its outbox row
	Publish   F = "publish"    // relay: send to the broker; ok only after the broker confirmed
	Deliver   F = "deliver"    // consumer: the broker handed the event to subscription value.consumer
	Apply     F = "apply"      // consumer: tx writing the effect and the inbox row; ok = committed
	SkipStale F = "skip-stale" // consumer: version guard skipped an event older than the applied state
	Ack       F = "ack"        // consumer: ack / offset commit covering the event
	DLQ       F = "dlq"        // consumer: event dead-lettered
	Fault     F = "fault"      // nemesis: invoke = fault starts, ok = fault healed
	Crash     F = "crash"      // nemesis/harness: process value.target killed
	Restart   F = "restart"    // nemesis/harness: process value.target started again
	Drain     F = "drain"      // harness: ok = every committed row consumed; info/fail = deadline passed
	FinalRead F = "final-read" // harness: one ok per row of the final state, bracketed by invoke/ok without table
	// Lineage is the harness's ok, at setup, naming in value.consumer a
	// subscription whose consumers record every delivery (its own): one
	// without a deliver op for an event was never handed it. A
	// subscription without one counts as recording its deliveries once
	// it has a deliver op (a team's consumer may post none).
	Lineage F = "lineage"
	// Leader is the harness's lone ok naming in value.target the node
	// that leads a replicated service now (value.detail says what it
	// leads), written when a run starts sampling and whenever the
	// answer changes; a fail (value.target the service, value.error
	// why) says no leader could be named.
	Leader F = "leader"

	// Intrude is one message the intruder (process "intruder") published
	// straight to the broker with its own credentials, bypassing the
	// outbox (docs/security.md): invoke before the publish, ok once the
	// broker accepted it, fail when the broker refused it (value.error
	// its refusal: least privilege stopped it), info when the answer was
	// lost. value.event, source, key, version the forged event,
	// value.detail its kind (an intruder.Kind: "type", "tenant", ...).
	// No authorized producer committed it: an effect for it is an
	// unauthorized effect.
	Intrude F = "intrude"

	// Redrive is one dead letter the redriver (process
	// "redrive-<subscription>") republished to its subscription: invoke
	// before the publish, ok once the broker confirmed it, fail when
	// refused, info when the answer was lost. value.event, source, key,
	// version the event as dead-lettered, value.consumer the
	// subscription, value.attempt how many times this redriver sent this
	// message (from 1), value.rate the step's limit per second,
	// value.detail "canary" on the canary, value.published_as the id it
	// sent when not value.event (docs/history.md, "Redrive").
	Redrive F = "redrive"
	// Assign is a Kafka consumer's lone ok whenever its group hands it a
	// partition or takes one away: value.consumer the subscription,
	// value.topic, value.partition, value.detail [AssignAssigned],
	// [AssignRevoked] or [AssignLost] (docs/history.md, "Assignments").
	Assign F = "assign"
	// Lag is the harness's lone ok per sample of how far a subscription's
	// consumers are behind: value.consumer the subscription, value.target
	// the group (Kafka) or queue (RabbitMQ), value.topic and
	// value.partition on Kafka, value.lag the records or ready messages
	// not consumed yet, value.detail "dlq" on a dead-letter queue's
	// depth. A fail (value.error) says the broker could not be asked
	// (docs/history.md, "Lag").
	Lag F = "lag"

	// Resources is the harness's lone ok measuring one process it runs
	// (value.target, e.g. "consumer-inventory-0"): value.rss its peak
	// resident set so far, in bytes (VmHWM). The supervisor samples each
	// process every 200 ms and writes one when the peak grew by at least
	// 1 MiB and 5% since its last one for that process, and a last one
	// when the process exits or is killed. A restarted process starts
	// again from its own peak.
	Resources F = "resources"

	// The transactional stage (docs/history.md, "Transactional stage"): a
	// consume-transform-produce processor between the events topic and
	// its output topics, and the read_committed readers downstream.

	// TxnStage is the harness's lone ok, at setup, declaring a
	// transactional stage: value.consumer its consumer group (also the
	// subscription of a database effect it writes, if any), value.target
	// its input topic, value.topics its output topics.
	TxnStage F = "txn-stage"
	// Txn is one Kafka transaction of the processor, value.txn naming it:
	// invoke when it begins, ok once it committed, fail once it aborted
	// (value.reason [ReasonAbort] when aborted on purpose), info when the
	// commit's outcome is not known.
	Txn F = "txn"
	// TxnInput is the processor's ok for one input record read into
	// transaction value.txn: value.topic, partition and offset its
	// position in the input topic, value.event (and source) its event.
	TxnInput F = "txn-input"
	// TxnOutput is the processor's ok for one output record transaction
	// value.txn produced (the broker acknowledged it; it becomes visible
	// only if the transaction commits): value.topic, partition and offset
	// its position, value.event, input_partition and input_offset its input.
	TxnOutput F = "txn-output"
	// OutputRead is a read_committed reader's ok for one record of an
	// output topic it read during the run (the process names the reader),
	// with the fields of a [TxnOutput].
	OutputRead F = "output-read"
)

// Reasons with a meaning of their own, in value.reason.
const (
	// ReasonRandom marks a fault op (invoke and completion) whose step
	// came from a seeded random schedule: such a fault that did not bite
	// is reported and not counted, and the run needs one that did.
	ReasonRandom = "random"
	// ReasonQuiet marks a drain ok that ended after a quiet window with
	// nothing to show that nothing was pending (a relay the harness
	// cannot see into): what is not applied then is unseen, not lost.
	ReasonQuiet = "quiet"
	// ReasonAbort marks a txn fail the processor aborted on purpose, as
	// opposed to one the broker aborted (fenced, timed out).
	ReasonAbort = "abort"
	// ReasonRetryBudget begins the reason of an apply fail that gave a
	// delivery back to the broker because its transient failures outlasted
	// the consumer's retry budget: not a refusal of the event, so it never
	// counts towards over-retried (docs/history.md, Retries).
	ReasonRetryBudget = "retry budget spent"
)

// Final-read tables, the value.table of a [FinalRead] row.
const (
	TableOutbox  = "outbox"  // a row of the producer's outbox: event, source, key, version, published
	TableEffects = "effects" // one applied effect: event, source, consumer, key, version (one row per application)
	TableInbox   = "inbox"   // the inbox dedupe mark: event, source, consumer
	TableDLQ     = "dlq"     // a dead-lettered event: event, source, consumer, reason
	// TableBrokerDLQ is a message in a dead-letter queue or topic the
	// harness itself set up on the broker (e.g. RabbitMQ's delivery
	// limit): event, source, consumer, attempt (deliveries before it was
	// dead-lettered, 0 unknown), reason. It explains a loss; it is not the
	// consumer dead-lettering a poison event.
	TableBrokerDLQ = "broker-dlq"
	// TableBroker is a record the harness found in the broker after the
	// drain, reading it the way it holds events for every subscription:
	// every partition of the events topic from its start to its
	// high-water mark (Kafka: event, source, partition, offset), or the
	// run's unconsumed witness queue (RabbitMQ: event, source, target the
	// queue). A row without an event closes that read: ok when the whole
	// log was read (target the topic or queue, detail what was read),
	// fail or info when it could not be (error says why). The rows place
	// a lost event: confirmed but absent from the broker's log, or in the
	// broker but never delivered.
	TableBroker = "broker"
	// TableOutput is a record of an output topic of the transactional
	// stage, read after the drain with read_committed from offset 0 to
	// each partition's last stable offset: topic, partition, offset,
	// event, source, input_partition, input_offset. A row without an
	// event closes the read of one topic (topic named): ok when all of it
	// was read, fail or info when it could not be (error says why).
	TableOutput = "output"
	// TablePartition is one partition's offsets after the drain, for
	// each partition of the stage's output topics: topic, partition,
	// last_stable_offset, high_watermark. A last stable offset below the
	// high watermark means a transaction is still open there.
	TablePartition = "partition"
	// TableAborted is a record of an output topic of the transactional
	// stage that the harness read after the drain read_uncommitted and
	// not read_committed, below the last stable offset the committed read
	// went to: a record of an aborted transaction, whoever wrote it (the
	// processor need not say): topic, partition, offset, event, source,
	// input_partition, input_offset. A row without an event closes the
	// uncommitted read of one topic (topic named): ok when all of it was
	// read and compared, fail or info when it could not be (error says
	// why).
	TableAborted = "aborted"
)

// Values of value.detail on an [Assign] op, and on the canary [Redrive].
const (
	AssignAssigned = "assigned"
	AssignRevoked  = "revoked"
	AssignLost     = "lost"
	DetailCanary   = "canary"
)

// Op is one line of a history.
type Op struct {
	// Index is the op's position. A [Recorder] numbers each file from 0;
	// [Merge] and [ScanFiles] renumber the merged history from 0.
	Index int64 `json:"index"`
	// Time is nanoseconds since the run started.
	Time int64 `json:"time"`
	// Process names the writer, e.g. "producer-1", "relay-0",
	// "consumer-inventory-1", "nemesis", "harness".
	Process string `json:"process"`
	Type    Type   `json:"type"`
	F       F      `json:"f"`
	Value   Value  `json:"value"`
}

// Value holds the fields an op may carry. A zero field is not written and
// reads back as zero, so 0 and absent mean the same.
type Value struct {
	Event     string `json:"event,omitempty"`     // event id; with Source, the event's identity
	Source    string `json:"source,omitempty"`    // CloudEvents-style source; may be empty
	Key       string `json:"key,omitempty"`       // aggregate id
	Version   int64  `json:"version,omitempty"`   // aggregate version, from 1, contiguous per key
	Partition int64  `json:"partition,omitempty"` // Kafka partition
	Offset    int64  `json:"offset,omitempty"`    // Kafka offset
	Tag       int64  `json:"tag,omitempty"`       // RabbitMQ delivery tag
	Attempt   int64  `json:"attempt,omitempty"`   // delivery or publish attempt, from 1
	Consumer  string `json:"consumer,omitempty"`  // subscription / consumer group name
	Table     string `json:"table,omitempty"`     // final-read table: outbox, effects, inbox, dlq
	Published bool   `json:"published,omitempty"` // final-read outbox row: marked published
	Poison    bool   `json:"poison,omitempty"`    // the event is meant to be dead-lettered
	Error     string `json:"error,omitempty"`
	Reason    string `json:"reason,omitempty"`
	Fault     string `json:"fault,omitempty"`  // nemesis: fault name, e.g. "kill", "partition"
	Target    string `json:"target,omitempty"` // nemesis: process or link hit
	Detail    string `json:"detail,omitempty"`
	// Evidence says, on a fault's healing ok, what showed the fault took
	// effect ("relay-0 exited: signal: killed").
	Evidence string `json:"evidence,omitempty"`
	// CommitTime is when an effects row's transaction committed, in ns
	// since the run started (the history clock), or 0 if unknown. It
	// orders effects where apply ops cannot: insert order is not commit
	// order under concurrency.
	CommitTime int64 `json:"commit_time,omitempty"`
	// Subscriptions lists the subscriptions of the run, on a Setup op.
	Subscriptions []string `json:"subscriptions,omitempty"`

	// Topic is the Kafka topic of the record an op is about (a
	// transactional stage's input or output record, a delivery from an
	// output topic, a final-read output or partition row).
	Topic string `json:"topic,omitempty"`
	// Txn names one transaction of a transactional stage, unique in the
	// run (e.g. the transactional id, the producer epoch and a sequence
	// number: "processor-0:3:17").
	Txn string `json:"txn,omitempty"`
	// TransactionalID is the producer's transactional.id, on a txn op.
	TransactionalID string `json:"transactional_id,omitempty"`
	// InputPartition and InputOffset are the position, in the stage's
	// input topic, of the input an output record was made from.
	InputPartition int64 `json:"input_partition,omitempty"`
	InputOffset    int64 `json:"input_offset,omitempty"`
	// LastStableOffset and HighWatermark are a partition's offsets, on a
	// final-read partition row.
	LastStableOffset int64 `json:"last_stable_offset,omitempty"`
	HighWatermark    int64 `json:"high_watermark,omitempty"`
	// Topics lists a transactional stage's output topics, on a Stage op.
	Topics []string `json:"topics,omitempty"`
	// PublishedAs is, on a publish op, the event id the message carried
	// on the wire when it is not value.event, the committed event's id (a
	// relay that mints an id per attempt). The checker then judges every
	// op and row naming that id under value.source as the committed
	// event's (docs/history.md, "Identity").
	PublishedAs string `json:"published_as,omitempty"`
	// RSS is, on a resources op, the peak resident set size of the
	// process value.target so far, in bytes.
	RSS int64 `json:"rss,omitempty"`
	// Schema is, on a commit op, the event's schema version when it is
	// not 1 (0 means 1): consumers refuse versions they were not
	// deployed to accept until a deploy-fix (docs/history.md, "Redrive").
	Schema int64 `json:"schema,omitempty"`
	// Rate is, on a redrive op, the redrive step's limit in messages per
	// second.
	Rate int64 `json:"rate,omitempty"`
	// Lag is, on a lag op, the records (Kafka) or ready messages
	// (RabbitMQ) not consumed yet.
	Lag int64 `json:"lag,omitempty"`
	// Trace is the W3C traceparent this hop made or received.
	Trace string `json:"trace,omitempty"`
}

// History is a sequence of ops ordered by Time, Index numbering them from 0.
type History []Op

// String renders op as its JSONL line without the newline.
func (op Op) String() string { return string(op.AppendJSON(nil)) }
