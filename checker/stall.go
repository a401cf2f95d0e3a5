package checker

// This file is the stall (issue 24, "Hostile payloads and headers": a
// consumer stuck on one message stops serving the rest). A subscription
// stalls while it has work pending, committed events it has not settled
// yet, and settles none; the guarantee max-stall bounds how long
// (Guarantees.MaxStall). What follows, and where:
//
//   - A settle is any op of a subscription that settles an event for it:
//     apply ok, apply fail with a reason beginning with duplicate (its
//     inbox had it), skip-stale ok, dlq ok (settles, recorded by the
//     shards as they go).
//   - An event is pending in a subscription from its commit (commit ok, or
//     for a recovered one its commit's invoke: event.commitTime) until the
//     subscription's first settle of it; one settled before its commit op
//     was never pending.
//   - A stall is a stretch, between the first commit and the drain's end,
//     during which events were pending all along and no settle happened:
//     it ends at the next settle, or at the drain's end (stallSpans).
//   - [Result.Stalls] has each subscription's longest stall, promised or
//     not; with MaxStall each longer one is a [Stall] finding. A
//     subscription whose consumers record nothing they do (no settle,
//     apply or deliver op, no lineage op for them) cannot be measured:
//     with MaxStall that makes the run Unknown. One whose consumers
//     record what they do and settled nothing stalled from the first
//     commit to the drain's end.

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/deliverycheck/deliverycheck/history"
)

// SubscriptionStall is the longest stall of one subscription.
type SubscriptionStall struct {
	Subscription string `json:"subscription"`
	// Measured: its consumers record what they do: a settle (apply,
	// skip-stale, dlq), an apply op, its deliveries (a deliver op, or
	// the harness's lineage op for them). Without, nothing below is
	// known.
	Measured bool `json:"measured"`
	// Longest is its longest stall, nil if it never had work pending
	// without settling something at once.
	Longest *StallSpan `json:"longest,omitempty"`
	// Over counts its stalls longer than the guarantees' max-stall, when
	// one is set.
	Over int `json:"over,omitempty"`
}

// StallSpan is one stall: from StartNS to EndNS (ns since the run
// started) the subscription had Pending events committed and not yet
// settled (at its end: the most of the stretch) and settled none.
type StallSpan struct {
	StartNS    int64 `json:"start_ns"`
	EndNS      int64 `json:"end_ns"`
	DurationNS int64 `json:"duration_ns"`
	Pending    int64 `json:"pending"`
	// Open: it was still going at the drain's end, where it is cut.
	Open bool `json:"open,omitempty"`
	// Faults are the fault windows overlapping it (their steps), at
	// most maxStallFaults.
	Faults []string `json:"faults,omitempty"`
}

const maxStallFaults = 5

// settleRec is one settle of a subscription: its time and the shard's
// event.
type settleRec struct {
	t  int64
	ev int32
}

// settles reports whether op, an op of a subscription, settles its
// event for it.
func settles(op *history.Op) bool {
	switch op.F {
	case history.Apply:
		return op.Type == history.OK || op.Type == history.Fail && duplicateReason(op.Value.Reason)
	case history.SkipStale, history.DLQ:
		return op.Type == history.OK
	}
	return false
}

// stallSpans calls fn for each stall, in time order: ups are the times
// an event became pending, downs the times one stopped being (each a
// settle time), settles every settle's time, all sorted and at most end.
func stallSpans(ups, downs, settles []int64, end int64, fn func(StallSpan)) {
	var pending int64
	start := int64(-1) // the open stall's start, -1 if none
	i, j, k := 0, 0, 0
	for i < len(ups) || k < len(settles) {
		t := int64(math.MaxInt64)
		if i < len(ups) {
			t = ups[i]
		}
		if k < len(settles) {
			t = min(t, settles[k])
		}
		settled := false
		for k < len(settles) && settles[k] == t {
			settled = true
			k++
		}
		if settled && start >= 0 && t > start {
			fn(StallSpan{StartNS: start, EndNS: t, DurationNS: t - start, Pending: pending})
		}
		for i < len(ups) && ups[i] == t {
			pending++
			i++
		}
		for j < len(downs) && downs[j] == t {
			pending--
			j++
		}
		switch {
		case pending <= 0:
			start = -1
		case settled || start < 0:
			start = t
		}
	}
	if start >= 0 && end > start {
		fn(StallSpan{StartNS: start, EndNS: end, DurationNS: end - start, Pending: pending, Open: true})
	}
}

// gatherSettles gathers each subscription's settles from the shards into
// its gsub, by the view's event index, in time order.
func (a *analyzer) gatherSettles(v *view, localToGlobal [][]int32) {
	for _, g := range v.subs {
		for sh, p := range g.parts {
			if p == nil {
				continue
			}
			for _, r := range p.settles {
				g.settles = append(g.settles, settleRec{r.t, localToGlobal[sh][r.ev]})
			}
			p.settles = nil
		}
		slices.SortStableFunc(g.settles, func(x, y settleRec) int { return cmp.Compare(x.t, y.t) })
	}
}

// measured reports whether subscription si's consumers record what they
// do (a settle, an apply op of any type, its deliveries): one that
// settled nothing had its events pending all along, it was not
// unmeasured. The stalls and the backlog (backlog.go) are measured only
// for these.
func (v *view) measured(si int) bool {
	return len(v.subs[si].settles) > 0 || v.subApplied[si] || v.subLineage[si]
}

// pendingEvents returns the events that were pending in subscription g
// by end, in view order, each with its commit time and its first settle
// in g (math.MaxInt64 if none): committed, by end, and not settled before
// their commit (such an event was never pending). first is scratch space
// of one entry per event. The stalls and the backlog (backlog.go) share
// it.
func (v *view) pendingEvents(g *gsub, end int64, first []int64) []pendingEvent {
	for i := range first {
		first[i] = math.MaxInt64
	}
	for _, r := range g.settles {
		first[r.ev] = min(first[r.ev], r.t)
	}
	var out []pendingEvent
	for i := range v.events {
		e := &v.events[i]
		if !e.committed() || e.commitTime > end || first[i] <= e.commitTime {
			continue
		}
		out = append(out, pendingEvent{ev: int32(i), commit: e.commitTime, first: first[i]})
	}
	return out
}

// stallFinding is a stall longer than max-stall, for the anomalies.
type stallFinding struct {
	sub  int
	span StallSpan
}

// pendingSet is one subscription's pending events up to the drain's
// end, as the stalls and the backlog both measure them: evs in commit
// order (byCommit), ups their commit times and downs their first settles
// up to the end, sorted.
type pendingSet struct {
	evs   []pendingEvent
	ups   []int64
	downs []int64
}

// newPendingSet sorts evs (pending up to end) into a pendingSet.
func newPendingSet(evs []pendingEvent, end int64) *pendingSet {
	slices.SortFunc(evs, byCommit)
	p := &pendingSet{evs: evs, ups: make([]int64, len(evs)), downs: make([]int64, 0, len(evs))}
	for i, e := range evs {
		p.ups[i] = e.commit
		if e.first <= end {
			p.downs = append(p.downs, e.first)
		}
	}
	slices.Sort(p.downs)
	return p
}

// pendingSets is every subscription's pendingSet up to end, nil for one
// that is not measured: built once for the stalls and the backlog.
func (v *view) pendingSets(end int64) []*pendingSet {
	out := make([]*pendingSet, len(v.subs))
	first := make([]int64, len(v.events))
	for si, g := range v.subs {
		if v.measured(si) {
			out[si] = newPendingSet(v.pendingEvents(g, end, first), end)
		}
	}
	return out
}

// stalls measures every subscription's stalls up to end (the drain's
// end) from its pending set and returns the Stalls section and the
// stalls longer than limit (0: none promised), each with the faults
// overlapping it.
func (v *view) stalls(pend []*pendingSet, faults []Fault, end int64, limit time.Duration) ([]SubscriptionStall, []stallFinding) {
	if len(v.subs) == 0 {
		return nil, nil
	}
	out := make([]SubscriptionStall, len(v.subs))
	var over []stallFinding
	for si, g := range v.subs {
		out[si].Subscription = g.name
		p := pend[si]
		if p == nil {
			continue
		}
		out[si].Measured = true
		settleTimes := make([]int64, 0, len(g.settles))
		for _, r := range g.settles {
			if r.t <= end {
				settleTimes = append(settleTimes, r.t)
			}
		}
		stallSpans(p.ups, p.downs, settleTimes, end, func(sp StallSpan) {
			if l := out[si].Longest; l == nil || sp.DurationNS > l.DurationNS {
				out[si].Longest = &sp
			}
			if limit > 0 && sp.DurationNS > int64(limit) {
				out[si].Over++
				over = append(over, stallFinding{sub: si, span: sp})
			}
		})
		if l := out[si].Longest; l != nil {
			l.Faults = overlapping(faults, l.StartNS, l.EndNS)
		}
	}
	for i := range over {
		over[i].span.Faults = overlapping(faults, over[i].span.StartNS, over[i].span.EndNS)
	}
	return out, over
}

// overlapping names the fault windows that overlap [start, end]: their
// steps, at most maxStallFaults, then how many more.
func overlapping(faults []Fault, start, end int64) []string {
	var out []string
	n := 0
	for _, f := range faults {
		if f.StartNS > end || f.EndNS < start {
			continue
		}
		n++
		if len(out) < maxStallFaults {
			out = append(out, faultName(f))
		}
	}
	if n > len(out) {
		out = append(out, fmt.Sprintf("and %d more", n-len(out)))
	}
	return out
}

// faultName is a fault's step, or its kind and target.
func faultName(f Fault) string {
	if f.Detail != "" {
		return f.Detail
	}
	return strings.TrimSpace(f.Kind + " " + f.Target)
}

// stallAnomalies turns the stalls longer than max-stall into one Stall
// anomaly per subscription, and says in v.resourceReasons which
// subscriptions could not be measured when max-stall is promised.
func (v *view) stallAnomalies(r *Result, over []stallFinding, committed int64, opts Options) {
	g := r.Guarantees
	if g.MaxStall > 0 && committed > 0 {
		for _, s := range r.Stalls {
			if !s.Measured {
				v.resourceReasons = append(v.resourceReasons, fmt.Sprintf("stall in %s not judged: its consumers record no apply, skip-stale, dlq or deliver op", s.Subscription))
			}
		}
	}
	same := func(x, y stallFinding) bool { return x.sub == y.sub }
	runs(over, same, func(fs []stallFinding) {
		an := Anomaly{Kind: Stall, Subscription: v.subs[fs[0].sub].name, Fatal: g.Fatal(Stall)}
		fillAnomaly(&an, fs, opts, func(f stallFinding) string { return stallLabel(f.span) },
			func(f stallFinding) Example {
				return Example{Detail: stallDetail(f.span, g.MaxStall), Ops: []history.Op{}}
			})
		r.Anomalies = append(r.Anomalies, an)
	})
}

// stallLabel names a stall by its span: "5.1s–17.4s".
func stallLabel(sp StallSpan) string {
	return fmtSeconds(sp.StartNS) + "–" + fmtSeconds(sp.EndNS)
}

// stallDetail says a stall in words, the wording results, the report and
// junit.xml share.
func stallDetail(sp StallSpan, limit time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "settled nothing for %s (from %s to %s) with %d events pending", fmtDuration(sp.DurationNS), fmtSeconds(sp.StartNS), fmtSeconds(sp.EndNS), sp.Pending)
	if sp.Open {
		b.WriteString(", still stalled at the drain's end")
	}
	if limit > 0 {
		fmt.Fprintf(&b, "; max-stall is %s", limit)
	}
	if len(sp.Faults) > 0 {
		b.WriteString("; faults overlapping: " + strings.Join(sp.Faults, "; "))
	} else {
		b.WriteString("; no fault overlapping")
	}
	return b.String()
}

// fmtSeconds writes ns since the run started as seconds: "5.100s".
func fmtSeconds(ns int64) string {
	return fmt.Sprintf("%.3fs", float64(ns)/1e9)
}

// StallSummary says each measured subscription's longest stall in one
// line, "inventory 7s (3.000s–10.000s, 3 pending); email none", the
// wording the command line uses; "" when none was measured.
func StallSummary(stalls []SubscriptionStall) string {
	var parts []string
	for _, s := range stalls {
		switch l := s.Longest; {
		case !s.Measured:
		case l == nil:
			parts = append(parts, s.Subscription+" none")
		default:
			parts = append(parts, fmt.Sprintf("%s %s (%s, %d pending)", s.Subscription, fmtDuration(l.DurationNS), stallLabel(*l), l.Pending))
		}
	}
	return strings.Join(parts, "; ")
}

// fmtDuration writes ns as a duration, to the millisecond from one on.
func fmtDuration(ns int64) string {
	d := time.Duration(ns)
	if d >= time.Millisecond {
		d = d.Round(time.Millisecond)
	}
	return d.String()
}
