package checker

// This file is the dead-letter redrive (issue 25, "DLQ redrive"): an
// operator's redriver republishes a subscription's dead letters once a
// fix is deployed, at a bounded rate. What the checker makes of it, and
// where:
//
//   - A redrive op (history.Redrive, process redrive-<subscription>) is
//     an op of the subscription in value.consumer for the event it names
//     (rules.go:event.op); shard.op hands it to shard.redrive, which keeps,
//     per subscription, every invoke's time and the limit (value.rate),
//     and per event how often it was redriven and what the subscription
//     did with it after the first (subRedrive, redriveAcc: rare, so
//     maps).
//   - Once a redrive of a subscription took effect (a redrive fault of
//     it, ok), each of its dead-lettered events that is not poison, has
//     no effect and was not superseded must have been recovered: still in
//     the dead-letter queue it is unrecovered; gone from a queue read
//     whole, lost at stage purged-from-dlq (rules.go:judge, unredriven).
//   - redrive-rate: the most redrive invokes of the subscription in any
//     1 s window exceeds its limit plus a burst of one (maxWindow).
//   - [Result.Redrive] counts, per subscription with a redrive op, what
//     became of what was redriven: the seed's «recuperados, reincidentes
//     y efectos rechazados» (recovered, re-failed, rejected).

import (
	"fmt"
	"slices"
	"strings"

	"github.com/deliverycheck/deliverycheck/history"
)

// SubscriptionRedrive is what the redrives of one subscription did.
type SubscriptionRedrive struct {
	Subscription string `json:"subscription"`
	// Rate is the redrive's limit per second (its ops' value.rate, the
	// highest if they differ), 0 if none was given.
	Rate int64 `json:"rate"`
	// MaxRate is the most redrive invokes in any 1 s window, and
	// MaxRateNS when that window starts (ns since the run started).
	MaxRate   int64 `json:"max_rate"`
	MaxRateNS int64 `json:"max_rate_ns"`
	// Redriven counts the distinct events with a redrive ok, Redrives
	// the redrive oks.
	Redriven int64 `json:"redriven"`
	Redrives int64 `json:"redrives"`
	// What became of each redriven event, one of: Recovered (applied:
	// it has an effect), Superseded (its version guard skipped it as
	// stale: a later version was applied), AlreadyApplied (its inbox
	// turned the redriven copy away as a duplicate: it had been applied
	// before it was dead-lettered), ReFailed (not poison, dead-lettered
	// again), Rejected (poison, dead-lettered again: expected), Pending
	// (nothing after the redrive).
	Recovered      int64 `json:"recovered"`
	Superseded     int64 `json:"superseded"`
	AlreadyApplied int64 `json:"already_applied"`
	ReFailed       int64 `json:"re_failed"`
	Rejected       int64 `json:"rejected"`
	Pending        int64 `json:"pending"`
	// Unrecovered and Purged count the findings of the subscription:
	// dead letters still in the queue after the redrive
	// ([Unrecovered]), gone from it without an effect ([Lost] at
	// [PurgedFromDLQ]).
	Unrecovered int64 `json:"unrecovered"`
	Purged      int64 `json:"purged"`
	// Kept counts the dead letters still in the queue that were never
	// redriven: what a classifying redriver left there as incompatible
	// (poison, a schema no fix covers).
	Kept int64 `json:"kept"`
	// Canary is the event the redriver sent first and alone (a redrive
	// op with detail canary), and CanaryOutcome what became of it, as
	// above (recovered, superseded, already-applied, re-failed,
	// rejected, pending); absent without a canary.
	Canary        string `json:"canary,omitempty"`
	CanaryOutcome string `json:"canary_outcome,omitempty"`
}

// The outcomes of a redriven event, as CanaryOutcome names them.
const (
	redriveRecovered      = "recovered"
	redriveSuperseded     = "superseded"
	redriveAlreadyApplied = "already-applied"
	redriveReFailed       = "re-failed"
	redriveRejected       = "rejected"
	redrivePending        = "pending"
)

// subRedrive is what one shard keeps of one subscription's redrives.
type subRedrive struct {
	invokes []int64 // the times of its redrive invokes
	rate    int64   // the highest value.rate of its redrive ops
	events  map[int32]*redriveAcc
}

// redriveAcc is what the redrives of one subscription did with one event.
type redriveAcc struct {
	redrives uint16 // redrive oks
	dlqAfter uint16 // dlq oks after the first redrive ok
	after    uint8  // the after* flags
	canary   bool
}

// What a subscription did with an event after its first redrive ok.
const (
	afterApplied   uint8 = 1 << iota // an apply ok
	afterDuplicate                   // an apply fail: a duplicate
	afterSkipped                     // a skip-stale ok
	afterDLQ                         // a dlq ok
)

// redrive folds a redrive op of subscription sub for the shard's event
// ei.
func (s *shard) redrive(op *history.Op, sub *subscription, ei int32) {
	rd := sub.redrive
	if rd == nil {
		rd = &subRedrive{events: map[int32]*redriveAcc{}}
		sub.redrive = rd
	}
	rd.rate = max(rd.rate, op.Value.Rate)
	switch op.Type {
	case history.Invoke:
		rd.invokes = append(rd.invokes, op.Time)
	case history.OK:
		a := rd.events[ei]
		if a == nil {
			a = &redriveAcc{}
			rd.events[ei] = a
		}
		if a.redrives < 1<<16-1 {
			a.redrives++
		}
		a.canary = a.canary || op.Value.Detail == history.DetailCanary
	}
}

// afterRedrive folds an op of subscription sub for the shard's event ei
// into what the subscription did after redriving it, if it did.
func (rd *subRedrive) afterRedrive(op *history.Op, ei int32) {
	a := rd.events[ei]
	if a == nil || a.redrives == 0 {
		return
	}
	switch {
	case op.F == history.Apply && op.Type == history.OK:
		a.after |= afterApplied
	case op.F == history.Apply && op.Type == history.Fail && duplicateReason(op.Value.Reason):
		a.after |= afterDuplicate
	case op.F == history.SkipStale && op.Type == history.OK:
		a.after |= afterSkipped
	case op.F == history.DLQ && op.Type == history.OK:
		a.after |= afterDLQ
		if a.dlqAfter < 1<<16-1 {
			a.dlqAfter++
		}
	}
}

// redriveAcc returns what subscription s's redrives did with event i,
// nil if it redrove it never.
func (v *view) redriveAcc(s *gsub, i int) *redriveAcc {
	r := v.refs[i]
	if p := s.parts[r.shard]; p != nil && p.redrive != nil {
		return p.redrive.events[r.local]
	}
	return nil
}

// redriveTook names the subscriptions a redrive fault took effect on.
func redriveTook(faults []Fault) map[string]bool {
	var out map[string]bool
	for _, f := range faults {
		if f.Kind == FaultRedrive && f.TookEffect {
			if out == nil {
				out = map[string]bool{}
			}
			out[f.Target] = true
		}
	}
	return out
}

// FaultRedrive is the fault kind of a redrive step (the nemesis's
// "redrive"): its target is the subscription.
const FaultRedrive = "redrive"

// unredriven judges dead-lettered event e of a subscription a redrive
// took effect on, not poison, without an effect and not superseded: it
// should have been recovered. Still in the dead-letter queue it is
// unrecovered; gone from a queue read whole, purged (lost); otherwise
// the facts cannot tell.
func unredriven(st *SubscriptionStats, e *event, se *subEvent, f facts, add func(Kind, Boundary, stage, string)) {
	switch {
	case f.final && se.flags&sBrokerDLQ != 0:
		add(Unrecovered, BrokerDLQ, 0, unrecoveredDetail(f.redriven))
	case f.drained && f.final && f.dlqRead:
		st.Lost++
		add(Lost, BrokerDLQ, stagePurged, "dead-lettered, then gone from the dead-letter queue without an effect")
	default:
		st.Unseen++
		why := "dead-lettered, not applied, and the dead-letter queues were not read whole"
		if !f.drained || !f.final {
			why = "dead-lettered, not applied, and the drain or final read did not complete"
		}
		add(Unseen, boundary(e, se), 0, why)
	}
}

// unrecoveredDetail says what the redrives did with an event still in
// the dead-letter queue: "never redriven", "still in the dead-letter
// queue after 2 redrives, dead-lettered again after each".
func unrecoveredDetail(a *redriveAcc) string {
	if a == nil || a.redrives == 0 {
		return "never redriven"
	}
	s := fmt.Sprintf("still in the dead-letter queue after %d %s", a.redrives, plural(int64(a.redrives), "redrive", "redrives"))
	switch {
	case a.dlqAfter >= a.redrives:
		s += ", dead-lettered again after each"
	case a.dlqAfter > 0:
		s += fmt.Sprintf(", dead-lettered again %d %s", a.dlqAfter, plural(int64(a.dlqAfter), "time", "times"))
	}
	return s
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// maxWindow returns the most of times (sorted) in any window [t, t+w),
// and the first such window's start t (a time of times); 0, 0 if none.
func maxWindow(times []int64, w int64) (n int64, start int64) {
	i := 0
	for j, t := range times {
		for t-times[i] >= w {
			i++
		}
		if c := int64(j - i + 1); c > n {
			n, start = c, times[i]
		}
	}
	return n, start
}

// redriveOutcome is what became of an event subscription s redrove (a),
// given its effects and whether it was skipped.
func redriveOutcome(e *event, a *redriveAcc, effects uint32, skipped bool) string {
	switch {
	case a.after&afterDuplicate != 0 && a.after&afterApplied == 0 && effects <= 1:
		return redriveAlreadyApplied
	case effects > 0:
		return redriveRecovered
	case skipped || a.after&afterSkipped != 0:
		return redriveSuperseded
	case a.after&afterDLQ != 0 && e.flags&cPoison != 0:
		return redriveRejected
	case a.after&afterDLQ != 0:
		return redriveReFailed
	}
	return redrivePending
}

// redriveSection builds [Result.Redrive], one entry per subscription with
// a redrive op, and the RedriveRate anomalies. r's anomalies must be
// grouped already: it reads their unrecovered and purged counts.
func (a *analyzer) redriveSection(v *view, r *Result, f facts) {
	for si, s := range v.subs {
		var times []int64
		var rate int64
		seen := false
		for _, p := range s.parts {
			if p == nil || p.redrive == nil {
				continue
			}
			seen = true
			times = append(times, p.redrive.invokes...)
			rate = max(rate, p.redrive.rate)
		}
		if !seen {
			continue
		}
		slices.Sort(times)
		out := SubscriptionRedrive{Subscription: s.name, Rate: rate}
		out.MaxRate, out.MaxRateNS = maxWindow(times, second)
		v.redriveCounts(&out, s, si, f)
		for _, a := range r.Anomalies {
			switch {
			case a.Subscription != s.name:
			case a.Kind == Unrecovered:
				out.Unrecovered += int64(a.Count)
			case a.Kind == Lost:
				for _, sc := range a.Stages {
					if sc.Stage == PurgedFromDLQ {
						out.Purged += int64(sc.Count)
					}
				}
			}
		}
		r.Redrive = append(r.Redrive, out)
		if f.drained && f.final && !f.dlqRead && v.redriveTook[s.name] && slices.ContainsFunc(r.Shown, func(a Anomaly) bool { return a.Kind == Unseen && a.Subscription == s.name }) {
			// With the drain and the final read complete, only a dead
			// letter the redrive owed a recovery is unseen: whether it
			// is still in the queue or purged needs the queues read.
			v.opsReasons = append(v.opsReasons, "dead letters of "+s.name+" not judged: the dead-letter queues were not read whole, so still there and purged cannot be told apart")
		}
		if rate > 0 && out.MaxRate > rate+1 {
			r.Anomalies = append(r.Anomalies, Anomaly{Kind: RedriveRate, Subscription: s.name, Fatal: r.Guarantees.Fatal(RedriveRate), Count: 1,
				Events:   []string{fmtSeconds(out.MaxRateNS) + "–" + fmtSeconds(out.MaxRateNS+second)},
				Examples: []Example{{Detail: RedriveRateDetail(out), Ops: []history.Op{}}}})
		}
	}
}

// redriveCounts counts what subscription s (index si) did with each event
// it redrove, the canary's outcome, and the dead letters it kept.
func (v *view) redriveCounts(out *SubscriptionRedrive, s *gsub, si int, f facts) {
	for i := range v.events {
		e := &v.events[i]
		a := v.redriveAcc(s, i)
		se := v.se(s, i)
		if a == nil || a.redrives == 0 {
			if f.final && se.flags&sBrokerDLQ != 0 {
				out.Kept++
			}
			continue
		}
		effects := max(se.applies, se.effects)
		if f.final {
			effects = se.effects
		}
		skipped := se.flags&sSkipped != 0
		if !skipped && f.final && v.subInbox[si] && se.flags&sInbox != 0 && effects == 0 && e.key >= 0 && e.version > 0 {
			skipped = v.maxApplied[si*v.nk+int(e.key)] > e.version
		}
		out.Redriven++
		out.Redrives += int64(a.redrives)
		o := redriveOutcome(e, a, effects, skipped)
		switch o {
		case redriveRecovered:
			out.Recovered++
		case redriveSuperseded:
			out.Superseded++
		case redriveAlreadyApplied:
			out.AlreadyApplied++
		case redriveReFailed:
			out.ReFailed++
		case redriveRejected:
			out.Rejected++
		default:
			out.Pending++
		}
		if a.canary && out.Canary == "" {
			out.Canary, out.CanaryOutcome = e.id, o
		}
	}
}

// RedriveRateDetail says a subscription's busiest second of redrives
// against its limit, the wording results, the report and junit.xml
// share: "52 redrives in the 1s from 5.100s, over email's limit of 50/s
// (a burst of 1 allowed)".
func RedriveRateDetail(rd SubscriptionRedrive) string {
	return fmt.Sprintf("%d redrives in the 1s from %s, over %s's limit of %d/s (a burst of 1 allowed)", rd.MaxRate, fmtSeconds(rd.MaxRateNS), rd.Subscription, rd.Rate)
}

// RedriveSummary says each redriven subscription's outcome in one line, in
// the order of rds,
// "email: 15 redriven, 14 recovered, 1 rejected, 2 kept; at most 50/s
// (limit 50/s)", the wording the command line uses; "" without any.
func RedriveSummary(rds []SubscriptionRedrive) string {
	parts := make([]string, 0, len(rds))
	for _, rd := range rds {
		var b strings.Builder
		fmt.Fprintf(&b, "%s: %d redriven", rd.Subscription, rd.Redriven)
		for _, c := range []struct {
			n    int64
			what string
		}{{rd.Recovered, "recovered"}, {rd.Superseded, "superseded"}, {rd.AlreadyApplied, "already applied"}, {rd.ReFailed, "re-failed"},
			{rd.Rejected, "rejected"}, {rd.Pending, "pending"}, {rd.Unrecovered, "unrecovered"}, {rd.Purged, "purged"}, {rd.Kept, "kept"}} {
			if c.n > 0 {
				fmt.Fprintf(&b, ", %d %s", c.n, c.what)
			}
		}
		fmt.Fprintf(&b, "; at most %d/s", rd.MaxRate)
		if rd.Rate > 0 {
			fmt.Fprintf(&b, " (limit %d/s)", rd.Rate)
		}
		parts = append(parts, b.String())
	}
	return strings.Join(parts, "; ")
}
