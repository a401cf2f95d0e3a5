package checker

// This file is the backlog (issue 25, backpressure): «Una cola absorbe
// diferencias temporales, no capacidad infinita. [...] La métrica decisiva
// no es sólo tamaño: edad del mensaje más antiguo, percentiles de espera,
// throughput, errores y capacidad disponible describen impacto.» What
// follows, per subscription, from the same pending events the stalls
// measure (stall.go: an event is pending from its commit until the
// subscription first settles it):
//
//   - its size is Series.Unseen (not repeated here) and, exactly,
//     MaxPending: the most events pending at once;
//   - the age of its oldest pending event, per bucket end
//     (Series.OldestAge) and at its worst (MaxAgeNS, exact: judged on
//     times, not buckets);
//   - the wait of each event, commit to first settle: p50, p99, max;
//   - per consumer process, the deliveries it held at once
//     (inflight.go: Series.InFlight, BacklogConsumers).
//
// With max-backlog-age each stretch during which the oldest pending event
// was older is a BacklogAge finding, fatal. Everything is measured up to
// the drain's end, like the stalls; a subscription whose consumers record
// nothing they do is not measured, and with max-backlog-age makes the run
// Unknown.

import (
	"fmt"
	"strings"
	"time"

	"github.com/deliverycheck/deliverycheck/history"
)

// SubscriptionBacklog is one subscription's backlog over the run.
type SubscriptionBacklog struct {
	Subscription string `json:"subscription"`
	// Measured: its consumers record what they do (as for its stalls);
	// without, nothing below is known.
	Measured bool `json:"measured"`
	// MaxPending is the most events pending at once, first reached at
	// MaxPendingNS.
	MaxPending   int64 `json:"max_pending"`
	MaxPendingNS int64 `json:"max_pending_ns"`
	// MaxAgeNS is the oldest any pending event got before it settled (or
	// at the drain's end), at MaxAgeAtNS.
	MaxAgeNS   int64 `json:"max_age_ns"`
	MaxAgeAtNS int64 `json:"max_age_at_ns"`
	// Waits counts the events that settled; WaitP50NS, WaitP99NS and
	// WaitMaxNS are their waits, commit to first settle.
	Waits     int64 `json:"waits"`
	WaitP50NS int64 `json:"wait_p50_ns"`
	WaitP99NS int64 `json:"wait_p99_ns"`
	WaitMaxNS int64 `json:"wait_max_ns"`
	// Over counts the stretches its oldest pending event was older than
	// max-backlog-age, when one is set.
	Over int `json:"over,omitempty"`
}

// ConsumerBacklog is one consumer process's most deliveries in flight at
// once (inflight.go).
type ConsumerBacklog struct {
	Process      string `json:"process"`
	Subscription string `json:"subscription"`
	MaxInFlight  int64  `json:"max_in_flight"`
}

// backlogSection measures every subscription's backlog up to drainEnd
// into r.Backlog, r.BacklogConsumers and the series OldestAge and
// InFlight (r.Series must be built: its buckets are theirs), and adds a
// BacklogAge anomaly per subscription whose oldest pending event got
// older than max-backlog-age.
func (a *analyzer) backlogSection(v *view, r *Result, pend []*pendingSet, drainEnd int64) {
	opts := a.opts
	limit := int64(opts.Guarantees.MaxBacklogAge)
	width, n := max(r.Series.BucketNanos, 1), max(r.Series.Buckets, 1)
	for si, g := range v.subs {
		b := SubscriptionBacklog{Subscription: g.name}
		curve := Curve{Subscription: g.name, Values: make([]int64, n)}
		if p := pend[si]; p != nil {
			b.Measured = true
			evs := p.evs
			b.measure(p, drainEnd)
			curve.Values = oldestAgeCurve(evs, drainEnd, width, n)
			if limit > 0 {
				if overs := backlogOvers(evs, drainEnd, limit); len(overs) > 0 {
					b.Over = len(overs)
					r.Anomalies = append(r.Anomalies, v.backlogAnomaly(g.name, evs, overs, r.Guarantees, opts))
				}
			}
		} else if limit > 0 && r.Counts.Committed > 0 {
			v.opsReasons = append(v.opsReasons, fmt.Sprintf("backlog age in %s not judged: its consumers record no apply, skip-stale, dlq or deliver op", g.name))
		}
		r.Backlog = append(r.Backlog, b)
		r.Series.OldestAge = append(r.Series.OldestAge, curve)
	}
	accs := make([]*flightAcc, len(a.shards))
	for i, s := range a.shards {
		accs[i] = &s.series.flight
	}
	for _, f := range inFlight(accs, width, n) {
		r.BacklogConsumers = append(r.BacklogConsumers, ConsumerBacklog{Process: f.process, Subscription: f.subscription, MaxInFlight: f.most})
		r.Series.InFlight = append(r.Series.InFlight, Curve{Subscription: f.subscription, Process: f.process, Values: f.curve})
	}
}

// measure fills b's figures from its pending set,
// up to end.
func (b *SubscriptionBacklog) measure(p *pendingSet, end int64) {
	evs := p.evs
	b.MaxPending, b.MaxPendingNS = maxPending(p)
	oldestSpans(evs, end, func(s oldestSpan) {
		if age := s.to - evs[s.i].commit; age > b.MaxAgeNS {
			b.MaxAgeNS, b.MaxAgeAtNS = age, s.to
		}
	})
	var waits int
	b.WaitP50NS, b.WaitP99NS, b.WaitMaxNS, waits = waitQuantiles(evs)
	b.Waits = int64(waits)
}

// backlogAnomaly is the BacklogAge anomaly of one subscription: a finding
// per stretch over the limit, each named by its worst event (the oldest
// pending one at the stretch's worst point).
func (v *view) backlogAnomaly(sub string, evs []pendingEvent, overs []backlogOver, g Guarantees, opts Options) Anomaly {
	an := Anomaly{Kind: BacklogAge, Subscription: sub, Fatal: g.Fatal(BacklogAge)}
	worst := func(o backlogOver) *event { return &v.events[evs[o.worst].ev] }
	fillAnomaly(&an, overs, opts, func(o backlogOver) string { return worst(o).id }, func(o backlogOver) Example {
		e := worst(o)
		ex := Example{Event: e.id, Source: e.source, Version: e.version, Detail: backlogDetail(o, g.MaxBacklogAge), Ops: []history.Op{}}
		if e.key >= 0 {
			ex.Key = v.keyNames[e.key]
		}
		return ex
	})
	return an
}

// backlogDetail says a stretch over max-backlog-age in words, the wording
// results, the report and junit.xml share.
func backlogDetail(o backlogOver, limit time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "oldest unapplied event waited %s (at %s), over max-backlog-age %s; over it from %s to %s", fmtDuration(o.worstAge), fmtSeconds(o.worstAt), limit, fmtSeconds(o.start), fmtSeconds(o.end))
	if o.open {
		b.WriteString(", still pending at the drain's end")
	}
	return b.String()
}

// BacklogSummary says each measured subscription's backlog in one line,
// "inventory oldest 2.4s (at 5.411s), 181 pending at most, waits p50
// 1.2s p99 2.4s", the wording the command line uses; "" when none was
// measured.
func BacklogSummary(bs []SubscriptionBacklog) string {
	var parts []string
	for _, b := range bs {
		if b.Measured {
			parts = append(parts, fmt.Sprintf("%s oldest %s (at %s), %d pending at most, waits p50 %s p99 %s",
				b.Subscription, fmtDuration(b.MaxAgeNS), fmtSeconds(b.MaxAgeAtNS), b.MaxPending, fmtDuration(b.WaitP50NS), fmtDuration(b.WaitP99NS)))
		}
	}
	return strings.Join(parts, "; ")
}
