package checker

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/deliverycheck/deliverycheck/history"
)

// Validity is the verdict of a check. Nothing is Valid by default: Valid
// needs both no fatal anomaly and the facts established (drain complete,
// final read complete).
type Validity string

// The verdicts, ranked as Jepsen's merge-valid does: Invalid over Unknown
// over Valid.
const (
	Valid   Validity = "valid"
	Invalid Validity = "invalid"
	Unknown Validity = "unknown"
)

// Kind names an anomaly, or a notable but expected behaviour, in results.
type Kind string

// Anomaly kinds. Whether one makes a run invalid depends on [Guarantees].
const (
	// Lost: committed, and after a complete drain a subscription has no
	// effect for it and did not dead-letter it.
	Lost Kind = "lost"
	// DuplicateEffect: one subscription applied one event more than once.
	DuplicateEffect Kind = "duplicate-effect"
	// Unexpected: applied, but its commit failed or was never attempted (a
	// phantom).
	Unexpected Kind = "unexpected"
	// UnauthorizedEffect: applied, and no commit op names the event while
	// an intrude op (ok, info, or never completed) does: the intruder
	// forged it past the outbox and the consumer took it for an
	// authorized producer's (intruder.go, docs/security.md). Always fatal.
	UnauthorizedEffect Kind = "unauthorized-effect"
	// OrderRegression: for one aggregate, a subscription applied version v
	// after it had finished applying a version above v. Order is judged on
	// each event's first effect; repeats are DuplicateEffect.
	OrderRegression Kind = "order-regression"
	// Gap: a subscription never applied version v of an aggregate because it
	// had already applied a later one (its version guard skipped v as
	// stale).
	Gap Kind = "gap"
	// DLQUnaccounted: a poison event neither applied nor dead-lettered.
	DLQUnaccounted Kind = "dlq-unaccounted"
	// WronglyDeadLettered: an event not marked poison is in the DLQ.
	WronglyDeadLettered Kind = "wrongly-dead-lettered"
	// PoisonApplied: a subscription applied an event marked poison: its
	// consumer took garbage for an effect. Always fatal.
	PoisonApplied Kind = "poison-applied"
	// InboxMismatch: in a subscription that has an inbox, an inbox mark
	// without its effect or an effect without its inbox mark. The two are
	// written in one transaction, so either breaks its atomicity. Always
	// fatal.
	InboxMismatch Kind = "inbox-mismatch"

	// The kinds of a transactional stage (transactions.go), each judged
	// per input record of the stage's input topic from what
	// read_committed readers saw, and shown per output topic.

	// OutputDuplicate: an input has more than one record in an output
	// topic, as the final read_committed read of the topic found it.
	OutputDuplicate Kind = "output-duplicate"
	// OutputLost: an input of the input topic has a record in none of
	// the output topics (one that has a record in some but not all is a
	// TornTransaction).
	OutputLost Kind = "output-lost"
	// AbortedVisible: a record that an aborted transaction wrote was read
	// by a reader that should read committed records only (a reader
	// during the run, a subscription's delivery, the final read).
	AbortedVisible Kind = "aborted-visible"
	// TornTransaction: an input has a record in one output topic and
	// none in another: its transaction was not atomic.
	TornTransaction Kind = "torn-transaction"
	// OutputOrder: in one partition of an output topic, the records of
	// one input partition are not in their inputs' order (judged on each
	// input's first record). Fatal where order is promised.
	OutputOrder Kind = "output-order"
	// TransactionLeftOpen: after the drain, a partition of an output
	// topic has its last stable offset below its high watermark: a
	// transaction is still open there, and read_committed readers are
	// stuck behind it.
	TransactionLeftOpen Kind = "transaction-left-open"

	// The kinds of the resources a run's processes used (stall.go,
	// resources.go), fatal only when their guarantee is set.

	// Stall: a subscription had committed events pending and settled
	// none for longer than the guarantees' max-stall. Shown per
	// subscription.
	Stall Kind = "stall"
	// Memory: a process the harness runs reached a peak resident set
	// above the guarantees' max-rss. Shown per process.
	Memory Kind = "memory"

	// The kinds of operating the pipeline (issue 25): redrive, retries,
	// backlog. Always fatal: Unrecovered, OverRetried, PollSkip,
	// NonmonotonicPoll, RedriveRate; RetryStorm and BacklogAge only when
	// their guarantee is set.

	// Unrecovered: a subscription's dead-lettered event, not poison, has
	// no effect after a redrive of that subscription took effect: still
	// in the dead-letter queue, or never redriven (redrive.go).
	Unrecovered Kind = "unrecovered"
	// OverRetried: a consumer went on refusing an event past its own
	// attempt limit instead of dead-lettering it (retries.go).
	OverRetried Kind = "over-retried"
	// PollSkip: within one assignment of a Kafka partition, a consumer
	// was handed an offset past a record the broker's log holds that it
	// was never handed (positions.go).
	PollSkip Kind = "poll-skip"
	// NonmonotonicPoll: within one assignment of a Kafka partition, a
	// consumer was handed an offset below its position, other than a
	// refused record's redelivery (positions.go).
	NonmonotonicPoll Kind = "nonmonotonic-poll"
	// RedriveRate: a redrive republished more dead letters in some one
	// second than its step's limit allows (redrive.go).
	RedriveRate Kind = "redrive-rate"
	// RetryStorm: the consumers' transient retries were synchronized
	// beyond the guarantees' max-retry-sync (retries.go).
	RetryStorm Kind = "retry-storm"
	// BacklogAge: a subscription's oldest unapplied event waited longer
	// than the guarantees' max-backlog-age (backlog.go).
	BacklogAge Kind = "backlog-age"
)

// Kinds shown in results that are not anomalies.
const (
	// Recovered: an indeterminate commit that something downstream proves
	// took effect; it then counts as committed.
	Recovered Kind = "recovered"
	// InDoubt: an indeterminate commit never observed downstream; neither
	// lost nor committed.
	InDoubt Kind = "in-doubt"
	// Redelivered: delivered more than once to one subscription; expected
	// under at-least-once.
	Redelivered Kind = "redelivered"
	// StaleSkipped: a version guard skipped the event.
	StaleSkipped Kind = "stale-skipped"
	// Unseen: committed but not applied when the facts were not established
	// (drain incomplete or final read missing): lost or just late.
	Unseen Kind = "unseen"
)

// AnomalyKinds lists the anomaly kinds of subscriptions in the order
// results show them. Each call returns a new slice, so no caller can
// reorder another's.
func AnomalyKinds() []Kind {
	return []Kind{Lost, DuplicateEffect, Unexpected, UnauthorizedEffect, OrderRegression, Gap, DLQUnaccounted, WronglyDeadLettered, PoisonApplied, InboxMismatch,
		Unrecovered, OverRetried, PollSkip, NonmonotonicPoll}
}

// TxnStageKinds lists the anomaly kinds of a transactional stage in the
// order results show them, after those of [AnomalyKinds].
func TxnStageKinds() []Kind {
	return []Kind{OutputDuplicate, OutputLost, AbortedVisible, TornTransaction, OutputOrder, TransactionLeftOpen}
}

// ResourceKinds lists the anomaly kinds of the resources a run's
// processes used in the order results show them, after those of
// [TxnStageKinds].
func ResourceKinds() []Kind {
	return []Kind{Stall, Memory}
}

// OperationKinds lists the anomaly kinds of operating the pipeline that
// are not one event's (a redrive's rate, the retries' synchronization,
// a backlog's age) in the order results show them, after those of
// [ResourceKinds].
func OperationKinds() []Kind {
	return []Kind{RedriveRate, RetryStorm, BacklogAge}
}

// ShownKinds lists the non-anomaly kinds in the order results show them.
func ShownKinds() []Kind {
	return []Kind{Recovered, InDoubt, Redelivered, StaleSkipped, Unseen}
}

// Boundary is how far along the pipeline an event is known to have got,
// from the ops each component recorded.
type Boundary string

// Boundaries, in pipeline order.
const (
	Committed Boundary = "committed"  // commit ok (or recovered); never confirmed by the broker
	Published Boundary = "published"  // broker confirmed the publish (or outbox row marked published)
	Delivered Boundary = "delivered"  // the broker delivered it to the subscription
	BrokerDLQ Boundary = "broker-dlq" // in a dead-letter queue the harness set up on the broker
	Applied   Boundary = "applied"    // the subscription's effect is durable
	Acked     Boundary = "acked"      // the subscription acked it
)

// Stage is where a lost event was last seen on its way to one
// subscription, from the history alone: the publish ops, the broker's
// log as the final read found it (rows of table broker) and the
// subscription's deliveries. It says whose loss it was: a loss the broker
// caused (absent-from-broker) is never put on the consumer, and where the
// history cannot tell, the stage says between which points it happened
// instead of guessing. [Stage.Meaning] says it in words.
type Stage string

// The stages a lost event can stop at: LostInFailover, the database's
// loss, first; then the others in pipeline order. Any other stage is
// unknown-between-X-and-Y (see [Stage.Between]).
const (
	// LostInFailover: the database took it and a failover lost it. Its
	// outbox row committed (commit ok) before a failover that took
	// effect, and the final read, on the new primary, has no outbox row
	// for it while it has others, and it never reached the broker; or a
	// consumer's effect committed (apply ok) before the failover, and the
	// final read has neither that effect nor its inbox mark (written in
	// the same transaction). An asynchronous standby promoted before it
	// replayed them: not the relay's, the broker's or the consumer's
	// doing.
	LostInFailover Stage = "lost-in-failover"
	// NeverPublished: no publish op, and not in the broker's log.
	NeverPublished Stage = "never-published"
	// Unconfirmed: published but never confirmed (a publish invoke, info
	// or fail, no ok), and not in the broker's log.
	Unconfirmed Stage = "unconfirmed"
	// AbsentFromBroker: the publish was confirmed (a publish ok, or an
	// outbox row marked published), yet the broker's log does not hold it:
	// the broker lost it, or the publisher recorded a confirm it never got
	// (a fire-and-forget publisher).
	AbsentFromBroker Stage = "absent-from-broker"
	// NeverDelivered: in the broker's log, and never delivered to a
	// subscription whose deliveries are recorded.
	NeverDelivered Stage = "never-delivered"
	// RolledBack: delivered to the subscription (or acked, or applied),
	// and no effect is in the ledger: the consumer's effect was rolled
	// back or never made durable.
	RolledBack Stage = "rolled-back"
	// DeduplicatedAgainstOtherSource: delivered to the subscription,
	// whose inbox turned it away as a duplicate (an apply fail with
	// reason duplicate) while it had applied only another source's event
	// with the same id, never this one: its inbox keys events by id
	// alone, and CloudEvents identifies one by source + id.
	DeduplicatedAgainstOtherSource Stage = "deduplicated-against-another-source"
	// PurgedFromDLQ: dead-lettered, then gone from the dead-letter queue
	// without an effect after a redrive of its subscription (purged, or
	// taken off and never republished), the dead-letter queue read whole.
	PurgedFromDLQ Stage = "purged-from-dlq"
)

// The points of the pipeline an unknown stage lies between, in order.
const (
	pointCommitted = iota + 1
	pointPublished // a publish attempted
	pointConfirmed
	pointInBroker // in the broker's log at the final read
	pointDelivered
	pointApplied
)

var pointNames = [...]string{pointCommitted: "committed", pointPublished: "published", pointConfirmed: "confirmed",
	pointInBroker: "in-broker", pointDelivered: "delivered", pointApplied: "applied"}

// stage is a Stage as the checker keeps it: the last point seen and the
// first point known not reached, packed as seen<<4 | notReached; 0 is
// none. The definite stages are those with nothing unknown in between,
// and stageFailover, which is no span of the pipeline.
type stage uint8

func stageOf(seen, notReached int) stage { return stage(seen<<4 | notReached) }

// stageFailover is LostInFailover, packed below every pipeline stage so
// that it sorts first.
const stageFailover = stage(pointCommitted << 4)

// stagePurged is PurgedFromDLQ, packed after the broker's
// dead-letter point: it reached the dead-letter queue, which lost it.
const stagePurged = stage(pointInBroker<<4 | 0xe)

// stageOtherSource is DeduplicatedAgainstOtherSource, packed after
// never-delivered and before rolled-back: it was delivered, and the
// consumer's inbox, not its rollback, lost it.
const stageOtherSource = stage(pointDelivered << 4)

var definiteStages = map[stage]Stage{
	stageFailover:                           LostInFailover,
	stageOf(pointCommitted, pointPublished): NeverPublished,
	stageOf(pointPublished, pointConfirmed): Unconfirmed,
	stageOf(pointConfirmed, pointInBroker):  AbsentFromBroker,
	stageOf(pointInBroker, pointDelivered):  NeverDelivered,
	stageOf(pointDelivered, pointApplied):   RolledBack,
	stageOtherSource:                        DeduplicatedAgainstOtherSource,
	stagePurged:                             PurgedFromDLQ,
}

// Stage names st: a definite stage, or unknown-between-X-and-Y.
func (st stage) Stage() Stage {
	if st == 0 {
		return ""
	}
	if s, ok := definiteStages[st]; ok {
		return s
	}
	return Stage("unknown-between-" + pointNames[st>>4] + "-and-" + pointNames[st&0xf])
}

// Between returns, for an unknown-between-X-and-Y stage, X (the last
// point the event was seen at: committed, published, confirmed,
// in-broker) and Y (the first it is known not to have reached:
// in-broker, delivered, applied); ok is false for a definite stage.
func (s Stage) Between() (seen, notReached string, ok bool) {
	rest, found := strings.CutPrefix(string(s), "unknown-between-")
	if !found {
		return "", "", false
	}
	for _, y := range pointNames[pointInBroker:] {
		if x, found := strings.CutSuffix(rest, "-and-"+y); found {
			return x, y, true
		}
	}
	return "", "", false
}

// Meaning says in words what s means for a lost event of subscription sub.
func (s Stage) Meaning(sub string) string {
	switch s {
	case LostInFailover:
		return "committed, then absent from the database after a failover: the database lost it"
	case NeverPublished:
		return "never published: no publish, and not in the broker"
	case Unconfirmed:
		return "published but never confirmed, and not in the broker"
	case AbsentFromBroker:
		return "confirmed by the broker, but absent from the broker's log: the broker lost it"
	case NeverDelivered:
		return "in the broker, never delivered to " + sub
	case RolledBack:
		return "delivered to " + sub + ", its effect rolled back"
	case DeduplicatedAgainstOtherSource:
		return "delivered to " + sub + ", deduplicated against another source's event with the same id"
	case PurgedFromDLQ:
		return "dead-lettered by " + sub + ", then gone from the dead-letter queue without an effect"
	}
	x, y, ok := s.Between()
	if !ok {
		return string(s)
	}
	why := "the broker's log was not read"
	switch {
	case x == "in-broker":
		why = sub + "'s consumers record no deliveries"
	case y == "in-broker":
		why = "not in the broker, and the relay records no publishes"
	case y == "applied":
		why += ", and " + sub + "'s consumers record no deliveries"
	}
	return "lost between " + x + " and " + y + " (" + why + ")"
}

// StageSummary says in words where a's lost events were last seen, how
// many at each stage ("3 confirmed by the broker, but absent from the
// broker's log: the broker lost it; 1 delivered to inventory, its effect
// rolled back"), or "" when it has no stages: the one wording the
// command line, the report and junit.xml share.
func (a *Anomaly) StageSummary() string {
	var b strings.Builder
	for i, sc := range a.Stages {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(strconv.Itoa(sc.Count) + " " + sc.Stage.Meaning(a.Subscription))
	}
	return b.String()
}

// Result is the outcome of a check. It marshals to the stable
// results.json schema documented in docs/results.md.
type Result struct {
	Valid Validity `json:"valid"`
	// Reasons says why the result is not Valid: fatal anomalies and facts
	// not established. Empty when Valid.
	Reasons       []string            `json:"reasons"`
	Guarantees    Guarantees          `json:"guarantees"`
	Facts         Facts               `json:"facts"`
	Counts        Counts              `json:"counts"`
	Subscriptions []SubscriptionStats `json:"subscriptions"`
	// Anomalies has one entry per kind and subscription found, fatal or not,
	// in the order of [AnomalyKinds] then subscription name; then one per
	// kind and output topic of a transactional stage, in the order of
	// [TxnStageKinds] then topic; then one per subscription with a
	// stall and one per process over max-rss ([ResourceKinds]).
	Anomalies []Anomaly `json:"anomalies"`
	// Shown has the non-anomaly kinds, in the order of [ShownKinds].
	Shown []Anomaly `json:"shown"`
	// Faults lists every fault the nemesis injected, in the order they
	// started, with whether it took effect and the evidence, so a report
	// can show each window next to what it did.
	Faults []Fault `json:"faults"`
	// Availability is the throughput around each fault window that took
	// effect, and how long after its heal it was back to normal.
	Availability Availability `json:"availability"`
	// Nodes is the time line of every server node the history names
	// (and of each server as a whole): down, faults aimed at it, leader.
	Nodes  []Node `json:"nodes"`
	Series Series `json:"series"`
	// TxnStage is the transactional stage, when the history has one
	// (transactions.go): what its transactions did, what each output
	// topic held, and the database boundary.
	TxnStage *TxnStage `json:"transactional_stage,omitempty"`
	// Intruder is what became of the messages the intruder published
	// straight to the broker, when the history has an intrude op or an
	// intrude fault (intruder.go).
	Intruder *Intruder `json:"intruder,omitempty"`
	// Stalls is each subscription's longest stall, in name order: the
	// longest it had committed events pending and settled none
	// (stall.go). Absent when there is no subscription.
	Stalls []SubscriptionStall `json:"stalls,omitempty"`
	// Resources is each measured process's peak resident set, in name
	// order (resources.go). Absent when the history has no resources op.
	Resources []ProcessResources `json:"resources,omitempty"`
	// Redrive is, per subscription a redrive op names, what its
	// dead-letter redrive did (redrive.go).
	Redrive []SubscriptionRedrive `json:"redrive,omitempty"`
	// Retries is how the consumers retried transient failures: the
	// synchronization figure and counts (retries.go). Absent without
	// any retry.
	Retries *Retries `json:"retries,omitempty"`
	// Backlog is, per subscription, its backlog's oldest age and wait
	// times (backlog.go).
	Backlog []SubscriptionBacklog `json:"backlog,omitempty"`
	// BacklogConsumers is, per consumer process, the most deliveries it
	// held at once (backlog.go).
	BacklogConsumers []ConsumerBacklog `json:"backlog_consumers,omitempty"`
	// Positions is, per subscription, the Kafka consumers' positions as
	// judged per assignment (positions.go).
	Positions []SubscriptionPositions `json:"positions,omitempty"`
	// Lag is the consumer lag the harness sampled during the run, and
	// when a lag alert would have fired (lag.go).
	Lag *Lag `json:"lag,omitempty"`
	// Traces is how the events' trace context travelled (traces.go).
	Traces *Traces `json:"traces,omitempty"`
}

// Fault is one fault window of the history: a fault invoke and the op that
// completed it.
type Fault struct {
	Kind   string `json:"fault"`  // "kill", "partition", "failpoint", ...
	Target string `json:"target"` // the service, link or worker hit
	Detail string `json:"detail"` // the schedule step
	// StartNS and EndNS bound the window in ns since the run started. A
	// fault never completed (the history was cut) ends at the history's
	// last op.
	StartNS int64 `json:"start_ns"`
	EndNS   int64 `json:"end_ns"`
	// Outcome is what completed it: "took-effect" (ok: healed, and it
	// bit), "no-effect" (fail: not injected, or in place but it never
	// bit), "heal-failed" (info: injected, the heal failed; it counts as
	// taking effect) or "cut" (never completed: no evidence either way).
	Outcome    string `json:"outcome"`
	TookEffect bool   `json:"took_effect"`
	// Random: the step came from a seeded random schedule, where a fault
	// that did not bite is reported and not counted.
	Random   bool   `json:"random"`
	Evidence string `json:"evidence,omitempty"` // what showed it bit
	Error    string `json:"error,omitempty"`    // why it did not, or why its heal failed
}

// The outcomes of a [Fault].
const (
	FaultTookEffect = "took-effect"
	FaultNoEffect   = "no-effect"
	FaultHealFailed = "heal-failed"
	FaultCut        = "cut"
)

// Facts are what the run established; Valid needs DrainComplete and
// FinalRead "complete".
type Facts struct {
	// Drain is "complete", "quiet" (it ended after a quiet window, with
	// nothing to show that nothing was pending: events not applied are
	// unseen, not lost), "timed-out" or "missing".
	Drain string `json:"drain"`
	// FinalRead is "complete", "failed", "incomplete" (started, history
	// ends before its closing op) or "missing".
	FinalRead string `json:"final_read"`
	// BrokerRead is whether the final read that counts read the broker's
	// log (rows of table broker): "complete", "failed" (it could not:
	// broker down, timeout) or "missing" (not read, as in histories from
	// before the broker read). Without it a lost event's stage past its
	// publish is unknown-between-X-and-Y.
	BrokerRead string `json:"broker_read,omitempty"`
	// Cuts lists torn lines skipped while reading; they do not change the
	// verdict by themselves.
	Cuts []history.Cut `json:"cuts"`
}

// Counts are run-wide statistics, in the vocabulary of Jepsen's
// total-queue.
type Counts struct {
	Ops           int64 `json:"ops"`
	Events        int64 `json:"events"`        // distinct event ids seen
	Attempted     int64 `json:"attempted"`     // events with a commit op
	Acknowledged  int64 `json:"acknowledged"`  // commit ok
	Failed        int64 `json:"failed"`        // commit definitely failed
	Indeterminate int64 `json:"indeterminate"` // commit info, or invoked and never completed
	Recovered     int64 `json:"recovered"`     // indeterminate, then observed downstream
	InDoubt       int64 `json:"in_doubt"`      // indeterminate, never observed
	Committed     int64 `json:"committed"`     // acknowledged + recovered
	Published     int64 `json:"published"`     // committed events the broker confirmed
	Poison        int64 `json:"poison"`
	Faults        int64 `json:"faults"` // faults that took effect (ok or info), not invokes
	Crashes       int64 `json:"crashes"`
	Restarts      int64 `json:"restarts"`
}

// SubscriptionStats are the counts of one subscription.
type SubscriptionStats struct {
	Name            string `json:"name"`
	Declared        bool   `json:"declared"`    // named in the guarantees or a setup op
	Delivered       int64  `json:"delivered"`   // events delivered at least once
	Deliveries      int64  `json:"deliveries"`  // deliver ops
	Redelivered     int64  `json:"redelivered"` // events delivered more than once
	Applied         int64  `json:"applied"`     // events with at least one effect
	Effects         int64  `json:"effects"`     // effects in all
	Acked           int64  `json:"acked"`
	DeadLettered    int64  `json:"dead_lettered"`
	StaleSkipped    int64  `json:"stale_skipped"`
	Lost            int64  `json:"lost"`
	DuplicateEffect int64  `json:"duplicate_effect"`
	Unexpected      int64  `json:"unexpected"`
	Unseen          int64  `json:"unseen"`
	PoisonApplied   int64  `json:"poison_applied"`
	InboxMismatch   int64  `json:"inbox_mismatch"`
	// UnauthorizedEffect counts the intruder's events it applied.
	UnauthorizedEffect int64 `json:"unauthorized_effect"`
	// JoinedNS is when its first Kafka delivery was recorded: for a
	// late subscription, when its group started (positions.go).
	JoinedNS int64 `json:"joined_ns,omitempty"`
}

// Anomaly is every finding of one kind in one subscription (or, for a
// transactional stage, in one output topic).
type Anomaly struct {
	Kind         Kind   `json:"kind"`
	Subscription string `json:"subscription,omitempty"`
	// Topic is the output topic of a transactional stage's finding
	// (torn-transaction has none: it is between topics).
	Topic string `json:"topic,omitempty"`
	Fatal bool   `json:"fatal"`
	Count int    `json:"count"`
	// Events lists up to Options.MaxEvents event ids, in order of first
	// appearance in the history.
	Events []string `json:"events"`
	// Boundaries counts the findings by the last boundary crossed (lost and
	// duplicate-effect only), in pipeline order.
	Boundaries []BoundaryCount `json:"boundaries,omitempty"`
	// Stages counts the findings by the stage each event was last seen at
	// (lost only), in pipeline order, unknown ones after the definite
	// stage they begin at.
	Stages []StageCount `json:"stages,omitempty"`
	// Examples details the first Options.MaxExamples findings.
	Examples []Example `json:"examples,omitempty"`
	// Process is the process of a memory finding.
	Process string `json:"process,omitempty"`
}

// Where names where a's findings are: its subscription, its output
// topic, its process, "all consumers" for a retry storm (run-wide), or
// "the transactional stage".
func (a *Anomaly) Where() string {
	switch {
	case a.Subscription != "":
		return a.Subscription
	case a.Topic != "":
		return a.Topic
	case a.Process != "":
		return a.Process
	case a.Kind == RetryStorm:
		return "all consumers"
	}
	return "the transactional stage"
}

// BoundaryCount is how many findings stopped at one boundary.
type BoundaryCount struct {
	Boundary Boundary `json:"boundary"`
	Count    int      `json:"count"`
}

// StageCount is how many lost events stopped at one stage.
type StageCount struct {
	Stage Stage `json:"stage"`
	Count int   `json:"count"`
}

// Example is one finding with the ops that show it.
type Example struct {
	Event    string   `json:"event"`
	Source   string   `json:"source,omitempty"`
	Key      string   `json:"key,omitempty"`
	Version  int64    `json:"version,omitempty"`
	Boundary Boundary `json:"boundary,omitempty"`
	Stage    Stage    `json:"stage,omitempty"` // lost only
	Detail   string   `json:"detail,omitempty"`
	// Ops are the event's ops for this subscription (and its commit and
	// publish ops), at most Options.MaxOps of them.
	Ops []history.Op `json:"ops"`
}

// ExitCode maps a verdict to the process exit code of deliverycheck: 0
// valid, 1 invalid, 2 unknown.
func (v Validity) ExitCode() int {
	switch v {
	case Valid:
		return 0
	case Invalid:
		return 1
	}
	return 2
}

// WriteJSON writes r as indented results.json. The output depends only on
// r, byte for byte.
func (r *Result) WriteJSON(w io.Writer) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("checker: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
