package checker

// This file is the checker's rules: what each op means for an event and
// for what a subscription did with it (event, subEvent), and how each is
// judged (count, judge, and regressions and gaps among the first effects
// of one key). Nothing here reads files or knows about shards: shard.go
// finds each op's event and calls in, order.go gathers the effects of
// each key, check.go turns the findings into the verdict.
//
// The rules of issue 19, and where each lives:
//  1. Only what happens after a commit's invoke proves the commit, and
//     nothing that follows from a publish the producer made itself before
//     committing: event.observe, cEarly.
//  2. A drain that ended by quiet leaves what is not applied unseen:
//     drainAfter, judge, and the verdict in check.go.
//  3. Order is judged by when effects committed (an effect row's
//     commit_time, else its apply ops' times: the applyRec order.go
//     keeps); equal times are not ordered: regressions.
//  4. Gaps are found from what was applied: gaps; an inbox mark without
//     its effect under a later version is a stale skip: judge.
//  5. A poison event applied is an anomaly: judge.
//  6. Inbox marks and effects must agree: judge.
//  7. and 8. (a typeless op, ids that are not exact text) are bad input,
//     refused by package history.
//  9. Only the final-read attempt that completed counts: finalReads,
//     event.row, subEvent.row, the settle methods.
//  10. Once the final read is complete the effects ledger is
//     authoritative: an apply ok without an effect row is lost: judge.
//
// And of issue 22: where each lost event was last seen, from its publish
// ops, the broker's log read after the drain and the subscription's
// deliveries, is decided in lostStage; a loss the database caused in a
// failover (what it acknowledged before, gone from the new primary), in
// lostInFailover, before any stage downstream can take the blame.
//
// And of issue 24: an effect for an event no commit op names and the
// intruder sent is an unauthorized effect, not a phantom (judge,
// intruder.go); the intruder's events are owed to no one, so none is
// lost, and a dead letter of one is a rejection.

import (
	"cmp"
	"slices"
	"strconv"

	"github.com/deliverycheck/deliverycheck/history"
)

// commit flags of an event.
const (
	cInvoke uint16 = 1 << iota
	cOK
	cFail
	cInfo
	cObserved  // some op downstream of the commit, and after its invoke, mentions it
	cPublished // broker confirmed, or outbox row marked published
	cPoison
	cTimeSet
	// cEarly: published before its commit was invoked (a producer that
	// publishes, then commits). Deliveries and effects then follow from
	// that publish, not from the commit, and prove nothing about it.
	cEarly
	cSent     // some publish op names it: a publish was attempted
	cInBroker // the final read found it in the broker's log
	cInOutbox // the final read found its outbox row
	cIntrude  // an intrude op names it: the intruder sent it (intruder.go)
	// cNewSchema: its commit op gives a schema version above 1, which
	// consumers refuse until a deploy-fix (redrive.go): its dead letter
	// before the fix is right.
	cNewSchema
	cCommitSeen = cInvoke | cOK | cFail | cInfo
)

// Final-read flags of an event, valid for the final-read attempt frAttempt.
const (
	fObserved  uint8 = 1 << iota // a row names it
	fPublished                   // its outbox row is marked published
	fInBroker                    // a broker row names it
	fInOutbox                    // its outbox row
)

// event is what the history says about one event as a whole: its commit,
// whether something proves it, whether the broker has it.
type event struct {
	id, source string
	firstPos   int64 // position in the history of the first op naming it
	version    int64
	commitTime int64 // ok time, else first invoke time
	key        int32
	flags      uint16
	frFlags    uint8
	frAttempt  uint8 // the final-read attempt frFlags belong to
}

// named folds what any op naming e says of it: its version (the first
// one given) and whether it is poison.
func (e *event) named(v *history.Value) {
	if e.version == 0 {
		e.version = v.Version
	}
	if v.Poison {
		e.flags |= cPoison
	}
	if v.Schema > 1 {
		e.flags |= cNewSchema
	}
}

// op folds op, of e's event and not a final-read row, into e. It reports
// whether op is also an op of a subscription (deliver, apply, skip-stale,
// ack, dlq), which subEvent.op then folds into what that subscription
// did with the event.
func (e *event) op(op *history.Op) (ofSubscription bool) {
	switch op.F {
	case history.Commit:
		switch op.Type {
		case history.Invoke:
			e.flags |= cInvoke
		case history.OK:
			e.flags |= cOK | cTimeSet
			e.commitTime = op.Time
		case history.Fail:
			e.flags |= cFail
		case history.Info:
			e.flags |= cInfo
		}
		if e.flags&cTimeSet == 0 {
			e.commitTime, e.flags = op.Time, e.flags|cTimeSet
		}
	case history.Publish:
		if e.flags&cCommitSeen == 0 {
			e.flags |= cEarly
		}
		e.flags |= cSent
		e.observe(false)
		if op.Type == history.OK {
			e.flags |= cPublished
		}
	case history.Deliver, history.Apply, history.SkipStale, history.Ack, history.DLQ, history.Redrive:
		e.observe(true)
		return true
	}
	return false
}

// observe marks e as seen downstream: proof of its commit only if the
// commit was invoked already and, for ops that follow from a publish
// (downstream true), the publish was not the producer's own before it.
func (e *event) observe(downstream bool) {
	if e.flags&cCommitSeen != 0 && (!downstream || e.flags&cEarly == 0) {
		e.flags |= cObserved
	}
}

// row folds a final-read row of attempt a into e: rows of an earlier
// attempt are forgotten. It reports whether the row is a subscription's
// (every table but the outbox and the broker's log), for subEvent.row.
func (e *event) row(a uint8, v *history.Value) (ofSubscription bool) {
	if e.frAttempt != a {
		e.frAttempt, e.frFlags = a, 0
	}
	switch v.Table {
	case history.TableOutbox:
		e.frFlags |= fObserved | fInOutbox
		if v.Published {
			e.frFlags |= fPublished
		}
		return false
	case history.TableBroker:
		// In the broker: it was published, which proves its commit
		// as a publish op does, unless the producer published it
		// itself before committing.
		e.frFlags |= fInBroker
		if e.flags&cEarly == 0 {
			e.frFlags |= fObserved
		}
		return false
	}
	if e.flags&cEarly == 0 {
		e.frFlags |= fObserved
	}
	return true
}

// settle folds e's final-read flags into its flags; the caller calls it
// only when they are of the attempt that counts.
func (e *event) settle() {
	if e.frFlags&fObserved != 0 && e.flags&cCommitSeen != 0 {
		e.flags |= cObserved
	}
	if e.frFlags&fPublished != 0 {
		e.flags |= cPublished
	}
	if e.frFlags&fInBroker != 0 {
		e.flags |= cInBroker
	}
	if e.frFlags&fInOutbox != 0 {
		e.flags |= cInOutbox
	}
}

// committed reports whether e's commit took effect: it is ok, or it is
// indeterminate and something proves it.
func (e *event) committed() bool {
	return e.flags&cOK != 0 || (e.indeterminate() && e.flags&cObserved != 0)
}

// indeterminate reports whether e's commit may or may not have taken
// effect: info, or invoked and never completed.
func (e *event) indeterminate() bool {
	return e.flags&cOK == 0 && (e.flags&cInfo != 0 || (e.flags&cInvoke != 0 && e.flags&cFail == 0))
}

// subEvent flags, untyped so that the final-read ones (below 1<<8) fit
// frFlags as well.
const (
	sAcked = 1 << iota
	sDLQ
	sSkipped
	sResolved // applied, skipped or dead-lettered: resolved is set
	// Final-read flags, valid for the attempt frAttempt; settle folds the
	// ones of the attempt that counts into flags.
	sInbox     // an inbox mark
	sBrokerDLQ // in the broker's dead-letter queue
	sTimed     // its first effect row carries commit_time
	sDLQRow    // a dead-letter row
	// sSeen: some op of the subscription names the event (a deliver, an
	// apply of any type, an ack...): the consumer was handed it.
	sSeen
	// sDupRefused: an apply fail says the inbox turned it away as a
	// duplicate (identity.go).
	sDupRefused
)

// subEvent is what one subscription did with one event.
type subEvent struct {
	resolved   int64 // time of the first apply, skip or dead-letter
	deliveries uint32
	applies    uint32 // apply ok ops
	effects    uint32 // final-read effect rows of attempt frAttempt
	flags      uint16
	frFlags    uint8 // sInbox, sBrokerDLQ, sTimed, sDLQRow of attempt frAttempt
	frAttempt  uint8
}

// op folds a deliver, skip-stale, ack or dlq op into se. Apply ops go
// through subEvent.applied, since they also order the effects.
func (se *subEvent) op(op *history.Op) {
	if op.Type != history.OK {
		return
	}
	switch op.F {
	case history.Deliver:
		se.deliveries++
	case history.SkipStale:
		se.resolve(op.Time, sSkipped)
	case history.Ack:
		se.flags |= sAcked
	case history.DLQ:
		se.resolve(op.Time, sDLQ)
	}
}

// applied folds an apply ok at time t into se. It reports whether it is
// the event's first effect in the subscription, the one order is judged
// on.
func (se *subEvent) applied(t int64) (first bool) {
	se.applies++
	if se.applies > 1 {
		return false
	}
	se.resolve(t, 0)
	return true
}

// row folds a final-read row of a subscription's table, of attempt a at
// time t, into se: rows of an earlier attempt are forgotten. It reports
// whether the row is the event's first effect row and carries a
// commit_time, which then orders the effect.
func (se *subEvent) row(a uint8, t int64, v *history.Value) (timed bool) {
	if se.frAttempt != a {
		se.frAttempt, se.effects, se.frFlags = a, 0, 0
	}
	switch v.Table {
	case history.TableEffects:
		se.effects++
		se.resolve(t, 0)
		if se.effects == 1 && v.CommitTime != 0 {
			se.frFlags |= sTimed
			return true
		}
	case history.TableInbox:
		se.frFlags |= sInbox
	case history.TableDLQ:
		se.frFlags |= sDLQRow
		se.resolve(t, 0)
	case history.TableBrokerDLQ:
		se.frFlags |= sBrokerDLQ
	}
	return false
}

// settle keeps se's final-read rows if they are of the attempt that counts
// (counts true), folding their flags into its flags, and forgets them if
// not.
func (se *subEvent) settle(counts bool) {
	if !counts {
		se.effects, se.frFlags = 0, 0
		return
	}
	se.flags |= uint16(se.frFlags)
	if se.frFlags&sDLQRow != 0 {
		se.flags |= sDLQ
	}
}

func (se *subEvent) resolve(t int64, flag uint16) {
	se.flags |= flag
	if se.flags&sResolved == 0 {
		se.flags |= sResolved
		se.resolved = t
	}
}

// finalReads follows a final read's brackets, the final-read ops without
// a table, which every shard sees. Each invoke starts an attempt; the last
// one to get its closing ok is the one whose rows count.
type finalReads struct {
	state         string // missing, incomplete, complete or failed
	attempt, good uint8  // final-read invokes; the last attempt that got its closing ok
	// broker is the broker read of the current attempt: missing,
	// complete or failed (shard 0 only: the op closing it names no
	// event).
	broker string
	// dlqRead is the read of the dead-letter queues in the current
	// attempt (a broker-dlq row without an event closes it), as broker
	// is.
	dlqRead string
}

// bracket folds a bracket of type t. It reports whether it starts a new
// attempt.
func (f *finalReads) bracket(t history.Type) (started bool) {
	switch t {
	case history.Invoke:
		// A new attempt: the state it reads supersedes what earlier ones
		// read, and the final read is complete only if it completes too.
		if f.attempt < 255 {
			f.attempt++
		}
		f.state, f.broker, f.dlqRead = "incomplete", "missing", "missing"
		return true
	case history.OK:
		f.state = "complete"
		f.good = f.attempt
	case history.Fail, history.Info:
		if f.state != "complete" {
			f.state = "failed"
		}
	}
	return false
}

// brokerRead folds the op of type t closing the current attempt's read
// of the broker's log.
func (f *finalReads) brokerRead(t history.Type) {
	switch t {
	case history.OK:
		f.broker = "complete"
	case history.Fail, history.Info:
		f.broker = "failed"
	}
}

// deadLettersRead folds the op of type t closing the current attempt's
// read of the dead-letter queues.
func (f *finalReads) deadLettersRead(t history.Type) {
	switch t {
	case history.OK:
		f.dlqRead = "complete"
	case history.Fail, history.Info:
		f.dlqRead = "failed"
	}
}

// counts reports whether final-read rows of attempt stamp count: those of
// the last attempt, when it completed (or of a history without brackets).
func (f *finalReads) counts(stamp uint8) bool {
	return stamp == f.good && (f.state == "complete" || f.attempt == 0)
}

// DrainQuiet is the reason a drain ok carries when it ended after a quiet
// window without anything to show that nothing was pending (a team's
// relay, whose outbox the harness cannot see): events not yet applied are
// then unseen, not lost.
const DrainQuiet = history.ReasonQuiet

// drainAfter returns the drain's state (missing before any drain op,
// complete, quiet or timed-out) after a drain op of type t and reason.
func drainAfter(drain string, t history.Type, reason string) string {
	switch t {
	case history.OK:
		if reason == DrainQuiet {
			return DrainQuiet
		}
		return "complete"
	case history.Fail, history.Info:
		if drain != "complete" && drain != DrainQuiet {
			return "timed-out"
		}
	}
	return drain
}

// count counts e into c, and returns the kind it is shown as: Recovered
// (indeterminate, and something proves its commit), InDoubt
// (indeterminate, and nothing does), or "".
func count(c *Counts, e *event) (shown Kind) {
	if e.flags&cCommitSeen != 0 {
		c.Attempted++
	}
	switch {
	case e.flags&cOK != 0:
		c.Acknowledged++
	case e.indeterminate():
		c.Indeterminate++
		if e.flags&cObserved != 0 {
			c.Recovered++
			shown = Recovered
		} else {
			c.InDoubt++
			shown = InDoubt
		}
	case e.flags&cFail != 0:
		c.Failed++
	}
	if e.committed() {
		c.Committed++
		if e.flags&cPublished != 0 {
			c.Published++
		}
		if e.flags&cPoison != 0 {
			c.Poison++
		}
	}
	return shown
}

// facts are what the judge may rely on for one event of one subscription.
type facts struct {
	drained bool // the drain completed: whatever is not applied will not be
	final   bool // the final read completed: the effects ledger is authoritative
	inbox   bool // the final read is complete and the subscription has inbox rows
	// newer: the subscription applied a later version of the event's key
	// (set only with inbox).
	newer bool
	// brokerAttempt is how many deliveries the event had before the broker
	// dead-lettered it in the subscription, 0 if unknown.
	brokerAttempt int64
	// brokerRead: the final read read the broker's whole log, so an
	// event without a broker row is not in the broker.
	brokerRead bool
	// publishes: some publish op is in the history, so the relay records
	// its publishes and an event without one was never published.
	publishes bool
	// lineage: the subscription's consumers record every delivery (the
	// setup op says so, or it has a deliver op), so an event without a
	// deliver op was never delivered to it.
	lineage bool
	// outboxRead: the final read holds outbox rows, so the outbox keeps
	// its rows and an event without one is not in the database.
	outboxRead bool
	// failoverEnd is when the last database failover that took effect
	// ended, 0 if none did: what the database acknowledged before then
	// may be gone after it.
	failoverEnd int64
	// otherSource is the source of another event with the same id that
	// the subscription applied, when it turned this one away as a
	// duplicate and never applied it (identity.go); "" if not so.
	otherSource string
	// intruder is, for an event no commit op names, what the intruder's
	// ops say of it (intruder.go): forged (the broker accepted it, or
	// may have), refused (the broker refused it), or none.
	intruder intrusionState
	// redrive: a redrive of the subscription took effect (a redrive
	// fault of it, ok), so its dead letters are owed a recovery
	// (redrive.go); redriven is what its redrives did with the event,
	// nil if none redrove it.
	redrive  bool
	redriven *redriveAcc
	// maxAttempts is the run's dead-letter limit (the setup op's
	// attempt, 0 if it gives none), refusedAt the highest attempt the
	// subscription refused the event at (retries.go).
	maxAttempts, refusedAt int64
	// dlqRead: the final read read every dead-letter queue whole, so a
	// dead letter without a broker-dlq row is gone from it.
	dlqRead bool
}

// judge judges what one subscription did with event e (se): it counts
// into st and calls add with each finding, anomaly or shown.
func judge(st *SubscriptionStats, e *event, se *subEvent, f facts, add func(Kind, Boundary, stage, string)) {
	// Once the final read is complete the effects ledger is authoritative:
	// an event is applied iff it has an effect row. Before, apply ops are
	// all there is.
	effects := max(se.applies, se.effects)
	if f.final {
		effects = se.effects
	}
	st.Deliveries += int64(se.deliveries)
	st.Effects += int64(effects)
	if se.deliveries > 0 {
		st.Delivered++
	}
	if se.deliveries > 1 {
		st.Redelivered++
		add(Redelivered, "", 0, "")
	}
	if effects > 0 {
		st.Applied++
	}
	if se.flags&sAcked != 0 {
		st.Acked++
	}
	dlq := se.flags&sDLQ != 0
	if dlq {
		st.DeadLettered++
	}
	skipped := se.flags&sSkipped != 0
	if !skipped && f.inbox && se.flags&sInbox != 0 && effects == 0 && !dlq && f.newer {
		// Taken in (inbox mark) but not applied, while a later version
		// was: the version guard skipped it, with no skip-stale op.
		skipped = true
	}
	if skipped {
		st.StaleSkipped++
		add(StaleSkipped, "", 0, "")
	}
	if f.maxAttempts > 0 && f.refusedAt > f.maxAttempts {
		add(OverRetried, "", 0, overRetriedDetail(f.refusedAt, f.maxAttempts, dlq))
	}
	if !e.committed() {
		// Never owed: not lost, and a dead letter of it is a rejection.
		// An effect is a phantom, or the intruder's forgery taken for
		// an authorized producer's (intruder.go).
		if effects > 0 && !e.indeterminate() {
			switch f.intruder {
			case intrusionForged:
				st.UnauthorizedEffect++
				add(UnauthorizedEffect, boundary(e, se), 0, "forged by the intruder, no authorized producer committed it")
			case intrusionRefused:
				st.Unexpected++
				add(Unexpected, boundary(e, se), 0, "the broker refused the intruder's message, yet it was applied")
			default:
				st.Unexpected++
				add(Unexpected, boundary(e, se), 0, "")
			}
		}
		return
	}
	if effects > 1 {
		st.DuplicateEffect++
		add(DuplicateEffect, boundary(e, se), 0, "")
	}
	if effects > 0 && e.flags&cPoison != 0 {
		st.PoisonApplied++
		add(PoisonApplied, "", 0, "")
	}
	if dlq && e.flags&(cPoison|cNewSchema) == 0 {
		add(WronglyDeadLettered, "", 0, "")
	}
	if f.inbox {
		switch {
		case se.flags&sInbox != 0 && effects == 0 && !dlq && !skipped:
			st.InboxMismatch++
			add(InboxMismatch, "", 0, "inbox mark without its effect")
		case effects > 0 && se.flags&sInbox == 0:
			st.InboxMismatch++
			add(InboxMismatch, "", 0, "effect without its inbox mark")
		}
	}
	if dlq && f.redrive && e.flags&cPoison == 0 && effects == 0 && !skipped {
		unredriven(st, e, se, f, add)
		return
	}
	if effects > 0 || dlq {
		return
	}
	b := boundary(e, se)
	detail := ""
	if b == BrokerDLQ {
		detail = "in the broker's dead-letter queue"
		if f.brokerAttempt > 0 {
			detail += " after " + strconv.FormatInt(f.brokerAttempt, 10) + " deliveries"
		}
	}
	switch {
	case skipped:
		add(Gap, "", 0, "")
	case f.final && se.applies > 0:
		st.Lost++
		ls, why := lostStage(e, se, f), "apply ok but no effect in the ledger"
		if ls == stageFailover {
			why = "apply ok before the failover, and neither its effect nor its inbox mark is in the database after it"
		}
		add(Lost, Applied, ls, why)
	case !f.drained || !f.final:
		st.Unseen++
		add(Unseen, b, 0, detail)
	case e.flags&cPoison != 0:
		add(DLQUnaccounted, b, 0, detail)
	default:
		st.Lost++
		ls := lostStage(e, se, f)
		switch {
		case ls == stageFailover:
			detail = "committed before the failover, and its outbox row is not in the database after it"
		case f.otherSource != "":
			ls = stageOtherSource
			detail = "deduplicated against another source's event: " + f.otherSource + " has the same id"
		}
		add(Lost, b, ls, detail)
	}
}

// lostStage is where lost event e was last seen on its way to the
// subscription (se): the last point of the pipeline the history shows it
// at, and the first it shows it never reached. What a subscription did
// is believed only where its consumers record deliveries, and what the
// broker holds only where its log was read: otherwise the stage spans
// the points in between rather than guess, so a loss the broker caused
// is never put on the consumer. A write the database acknowledged and a
// failover lost (lostInFailover) is put on the database, before anyone
// downstream.
func lostStage(e *event, se *subEvent, f facts) stage {
	if lostInFailover(e, se, f) {
		return stageFailover
	}
	if se.flags&sSeen != 0 || se.effects > 0 {
		// The consumer was handed it: whatever the broker did, the
		// effect is what went missing.
		return stageOf(pointDelivered, pointApplied)
	}
	seen := pointCommitted
	switch {
	case e.flags&cPublished != 0:
		seen = pointConfirmed
	case e.flags&cSent != 0:
		seen = pointPublished
	}
	notReached := pointDelivered
	if !f.lineage {
		notReached = pointApplied
	}
	switch {
	case !f.brokerRead:
		return stageOf(seen, notReached)
	case e.flags&cInBroker != 0:
		return stageOf(pointInBroker, notReached)
	case seen == pointCommitted && !f.publishes:
		return stageOf(pointCommitted, pointInBroker)
	}
	// Not in the broker: it stopped right after the last point seen.
	return stageOf(seen, seen+1)
}

// lostInFailover reports whether lost event e (se) was lost by the
// database in a failover, from what the history shows: the last write
// the database acknowledged for it came before the failover ended, and
// the final read, on the new primary, does not have it. For the
// subscription that write is its effect (an apply ok, whose effect and
// inbox mark one transaction wrote: both are gone); before any consumer
// had it, its outbox row (commit ok; the final read has outbox rows, so
// the outbox keeps them, and the broker's log, read, does not hold it).
// A confirmed publish is no database loss: the broker had it.
func lostInFailover(e *event, se *subEvent, f facts) bool {
	if f.failoverEnd == 0 {
		return false
	}
	if se.applies > 0 {
		// se.resolved is the first apply ok's time: a lost event was
		// neither skipped nor dead-lettered, nor has an effect row.
		return se.resolved <= f.failoverEnd && se.flags&sInbox == 0 && se.effects == 0
	}
	return se.flags&sSeen == 0 && e.flags&cTimeSet != 0 && e.commitTime <= f.failoverEnd &&
		f.outboxRead && e.flags&cInOutbox == 0 && e.flags&cPublished == 0 &&
		f.brokerRead && e.flags&cInBroker == 0
}

// regressions appends to out the order regressions among the first
// effects of one subscription and key, sorted by completion: each that
// began strictly after the first effect of a higher version was done.
func regressions(recs []applyRec, out []finding) []finding {
	prefixMax := make([]int64, len(recs))
	m := int64(0)
	for i, r := range recs {
		m = max(m, r.version)
		prefixMax[i] = m
	}
	for _, r := range recs {
		// Effects completed before r's apply began: recs[:n].
		n, _ := slices.BinarySearchFunc(recs, r.inv, func(x applyRec, inv int64) int { return cmp.Compare(x.ok, inv) })
		if n > 0 && prefixMax[n-1] > r.version {
			out = append(out, finding{kind: OrderRegression, sub: r.sub, event: r.event,
				detail: "version " + strconv.FormatInt(r.version, 10) + " applied after version " + strconv.FormatInt(prefixMax[n-1], 10)})
		}
	}
	return out
}

// gaps appends to out, among the first effects of one subscription and
// key, each version v-1 applied only after version v was: the
// subscription went through a state it must never show (v without v-1).
func gaps(recs []applyRec, out []finding) []finding {
	byVersion := make(map[int64]*applyRec, len(recs))
	for i := range recs {
		if _, ok := byVersion[recs[i].version]; !ok {
			byVersion[recs[i].version] = &recs[i]
		}
	}
	for _, r := range recs {
		if prev, ok := byVersion[r.version-1]; ok && prev.inv > r.ok {
			out = append(out, finding{kind: Gap, sub: prev.sub, event: prev.event,
				detail: "version " + strconv.FormatInt(prev.version, 10) + " applied after version " + strconv.FormatInt(r.version, 10)})
		}
	}
	return out
}

// boundary is the last pipeline boundary e is known to have crossed in
// the subscription.
func boundary(e *event, se *subEvent) Boundary {
	switch {
	case se.flags&sBrokerDLQ != 0 && se.applies == 0 && se.effects == 0:
		return BrokerDLQ
	case se.flags&sAcked != 0:
		return Acked
	case se.applies > 0 || se.effects > 0:
		return Applied
	case se.deliveries > 0:
		return Delivered
	case e.flags&cPublished != 0:
		return Published
	}
	return Committed
}
