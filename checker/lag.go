package checker

// This file is the consumer lag the harness sampled during the run
// (issue 25, "Lag and traces"; the appendix's exercise 5: «Métrica de lag
// del consumer group expuesta en Prometheus + alerta si supera un
// umbral»). The harness writes a lag op every 500 ms per subscription and
// partition (Kafka) or per subscription queue and dead-letter queue
// (RabbitMQ), docs/history.md "Lag":
//
//   - [Result.Lag] has every series, its peak, its samples (capped), and
//     per subscription the total over its partitions, which is what a
//     group-lag alert watches.
//   - With [Options.LagAlert], [Lag.Alerts] says when a Prometheus alert
//     `lag > threshold for d` on each subscription's total would have
//     fired and resolved. It is an observation, never a guarantee: it
//     does not change the verdict.

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/deliverycheck/deliverycheck/history"
)

// Lag is what the run's lag ops measured.
type Lag struct {
	// Series has one entry per subscription and partition (Kafka) or per
	// subscription queue (RabbitMQ), sorted by subscription then
	// partition.
	Series []LagSeries `json:"series"`
	// Totals has one entry per subscription: at each sampling round, the
	// sum of the latest sample of each of its partitions.
	Totals []LagSeries `json:"totals"`
	// DLQ has the depth of each subscription's dead-letter queue
	// (RabbitMQ), kept apart: a dead letter is not lag.
	DLQ []LagSeries `json:"dlq,omitempty"`
	// Failures counts the stretches during which the broker could not be
	// asked (lag fail ops, one per stretch and subscription).
	Failures int64 `json:"failures"`
	// Alert is the alert rule the check was given, if any, and Alerts
	// each interval it would have fired, by subscription then time.
	Alert  *LagAlert   `json:"alert,omitempty"`
	Alerts []LagFiring `json:"alerts,omitempty"`
}

// LagSeries is one lag curve.
type LagSeries struct {
	Subscription string `json:"subscription"`
	// Target is the consumer group (Kafka) or queue (RabbitMQ).
	Target string `json:"target"`
	// Topic and Partition say where on Kafka; both are omitted on
	// RabbitMQ and in totals.
	Topic     string `json:"topic,omitempty"`
	Partition *int64 `json:"partition,omitempty"`
	// Max is the highest sample, first reached at MaxNS.
	Max   int64 `json:"max"`
	MaxNS int64 `json:"max_ns"`
	// Samples are [t_ns, lag] pairs in time order: every sample up to
	// MaxLagSamples, beyond that the highest of each run of consecutive
	// samples, so a spike survives.
	Samples [][2]int64 `json:"samples"`
}

// LagFiring is one interval during which the lag alert would have fired
// on a subscription.
type LagFiring struct {
	Subscription string `json:"subscription"`
	Target       string `json:"target"`
	// PendingNS is the first sample over the threshold; FiredNS the
	// first at which every sample since PendingNS had been over it for
	// the alert's duration; ResolvedNS the first sample at or under it
	// again, 0 if the alert was still firing at the last sample.
	PendingNS  int64 `json:"pending_ns"`
	FiredNS    int64 `json:"fired_ns"`
	ResolvedNS int64 `json:"resolved_ns"`
	// Peak is the highest total from PendingNS to ResolvedNS.
	Peak int64 `json:"peak"`
}

// MaxLagSamples caps the samples kept per series.
const MaxLagSamples = 2000

// lagPoint is one lag op as shard 0 keeps it.
type lagPoint struct {
	sub, target, topic string
	partition          int64
	dlq                bool
	t, lag             int64
}

// lagAcc is what shard 0 keeps of the lag ops.
type lagAcc struct {
	points   []lagPoint
	failures int64
}

// op folds a lag op into shard 0's lag: an ok is a sample, a fail a
// stretch without one.
func (l *lagAcc) op(op *history.Op) {
	v := &op.Value
	switch op.Type {
	case history.OK:
		l.points = append(l.points, lagPoint{sub: v.Consumer, target: v.Target, topic: v.Topic, partition: v.Partition,
			dlq: v.Detail == history.DetailDLQ, t: op.Time, lag: v.Lag})
	case history.Fail, history.Info:
		l.failures++
	}
}

// lagSection builds r.Lag from shard 0's lag ops; nil when the history
// has none and no alert was asked for.
func (a *analyzer) lagSection(_ *view, r *Result) {
	acc, alert := &a.shards[0].lags, a.opts.LagAlert
	if len(acc.points) == 0 && acc.failures == 0 && alert == nil {
		return
	}
	l := &Lag{Failures: acc.failures}
	if alert != nil {
		rule := *alert // the result's own, not the caller's
		l.Alert = &rule
	}
	series, dlq := lagSeries(acc.points)
	l.Series, l.DLQ = nonNil(series), dlq
	l.Totals = lagTotals(acc.points)
	if alert != nil {
		for _, tot := range l.Totals {
			l.Alerts = append(l.Alerts, lagFirings(tot, alert.Threshold, int64(alert.For))...)
		}
	}
	for _, ss := range [][]LagSeries{l.Series, l.Totals, l.DLQ} {
		for i := range ss {
			ss[i].Samples = CapSamples(ss[i].Samples, MaxLagSamples)
		}
	}
	r.Lag = l
}

// LagAlert is an alert on a subscription's consumer lag, as Prometheus
// would evaluate `lag > Threshold for For` on the subscription's total.
type LagAlert struct {
	Threshold int64         `json:"threshold"`
	For       time.Duration `json:"for_ns"`
}

// ParseLagAlert parses "threshold/for", e.g. "100/1s" (check
// --lag-alert): the form Prometheus' `lag > 100 for 1s` takes here.
func ParseLagAlert(s string) (*LagAlert, error) {
	th, d, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return nil, fmt.Errorf("checker: lag alert %q: want threshold/for, e.g. 100/1s", s)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(th), 10, 64)
	if err != nil || n < 0 {
		return nil, fmt.Errorf("checker: lag alert %q: threshold must be a whole number ≥ 0", s)
	}
	f, err := time.ParseDuration(strings.TrimSpace(d))
	if err != nil || f < 0 {
		return nil, fmt.Errorf("checker: lag alert %q: for must be a duration ≥ 0, e.g. 1s", s)
	}
	return &LagAlert{Threshold: n, For: f}, nil
}

// lagKey names a series.
type lagKey struct {
	sub, target, topic string
	partition          int64
	dlq                bool
}

// lagSeries groups the samples into series, sorted by subscription,
// target, topic then partition: lag series, then dead-letter ones.
func lagSeries(points []lagPoint) (lag, dlq []LagSeries) {
	idx := map[lagKey]int{}
	var all []LagSeries
	var dlqs []bool
	for _, p := range points {
		k := lagKey{p.sub, p.target, p.topic, p.partition, p.dlq}
		i, ok := idx[k]
		if !ok {
			i = len(all)
			idx[k] = i
			s := LagSeries{Subscription: p.sub, Target: p.target, Topic: p.topic}
			if p.topic != "" {
				part := p.partition
				s.Partition = &part
			}
			all = append(all, s)
			dlqs = append(dlqs, p.dlq)
		}
		all[i].add(p.t, p.lag)
	}
	for i, s := range all {
		if dlqs[i] {
			dlq = append(dlq, s)
		} else {
			lag = append(lag, s)
		}
	}
	slices.SortStableFunc(lag, compareLagSeries)
	slices.SortStableFunc(dlq, compareLagSeries)
	return lag, dlq
}

func compareLagSeries(a, b LagSeries) int {
	return cmp.Or(cmp.Compare(a.Subscription, b.Subscription), cmp.Compare(a.Target, b.Target), cmp.Compare(a.Topic, b.Topic),
		cmp.Compare(partitionOf(a), partitionOf(b)))
}

func partitionOf(s LagSeries) int64 {
	if s.Partition == nil {
		return -1
	}
	return *s.Partition
}

// add appends a sample, keeping the peak.
func (s *LagSeries) add(t, lag int64) {
	if len(s.Samples) == 0 || lag > s.Max {
		s.Max, s.MaxNS = lag, t
	}
	s.Samples = append(s.Samples, [2]int64{t, lag})
}

// lagTotals sums each subscription's partitions at each sampling round.
// The sampler asks about every partition of a subscription at once and
// records them one after the other, so a round is a run of samples of
// the subscription in which no partition repeats; its total, at its last
// sample's time, adds the latest sample of every partition seen so far
// (one the round missed keeps its previous figure).
func lagTotals(points []lagPoint) []LagSeries {
	type acc struct {
		total  LagSeries
		latest map[string]int64 // by topic and partition
		round  map[string]bool
		last   int64
	}
	subs := map[string]*acc{}
	var order []string
	flush := func(a *acc) {
		if len(a.round) == 0 {
			return
		}
		var sum int64
		for _, v := range a.latest {
			sum += v
		}
		a.total.add(a.last, sum)
		clear(a.round)
	}
	for _, p := range points {
		if p.dlq {
			continue
		}
		a := subs[p.sub]
		if a == nil {
			a = &acc{total: LagSeries{Subscription: p.sub, Target: p.target}, latest: map[string]int64{}, round: map[string]bool{}}
			subs[p.sub] = a
			order = append(order, p.sub)
		}
		part := fmt.Sprintf("%s/%d", p.topic, p.partition)
		if a.round[part] {
			flush(a)
		}
		a.round[part], a.latest[part], a.last = true, p.lag, p.t
	}
	slices.Sort(order)
	out := make([]LagSeries, 0, len(order))
	for _, sub := range order {
		flush(subs[sub])
		out = append(out, subs[sub].total)
	}
	return out
}

// lagFirings evaluates a Prometheus alert `lag > threshold for forNS` on
// a total's samples, as Prometheus does at each evaluation: pending from
// the first sample over the threshold, firing once every sample since
// has been over it for forNS (at once when forNS is 0), resolved at the
// first sample at or under it.
func lagFirings(s LagSeries, threshold, forNS int64) []LagFiring {
	var out []LagFiring
	var cur *LagFiring
	pending := int64(-1)
	var peak int64
	for _, smp := range s.Samples {
		t, v := smp[0], smp[1]
		if v <= threshold {
			if cur != nil {
				cur.ResolvedNS, cur.Peak = t, peak
				out = append(out, *cur)
				cur = nil
			}
			pending = -1
			continue
		}
		if pending < 0 {
			pending, peak = t, v
		}
		peak = max(peak, v)
		if cur == nil && t-pending >= forNS {
			cur = &LagFiring{Subscription: s.Subscription, Target: s.Target, PendingNS: pending, FiredNS: t}
		}
	}
	if cur != nil {
		cur.Peak = peak
		out = append(out, *cur)
	}
	return out
}

// CapSamples keeps at most n of a series' [t, value] samples: beyond
// that, the highest (the first of equals) of each run of ceil(len/n)
// consecutive ones, so a spike survives. results.json's lag series and
// the report's lag charts are capped so.
func CapSamples(samples [][2]int64, n int) [][2]int64 {
	if len(samples) <= n {
		return samples
	}
	group := (len(samples) + n - 1) / n
	out := make([][2]int64, 0, n)
	for lo := 0; lo < len(samples); lo += group {
		best := samples[lo]
		for _, s := range samples[lo+1 : min(lo+group, len(samples))] {
			if s[1] > best[1] {
				best = s
			}
		}
		out = append(out, best)
	}
	return out
}

// String says the alert rule as Prometheus would write it: "lag > 100
// for 1s".
func (a LagAlert) String() string {
	return fmt.Sprintf("lag > %d for %s", a.Threshold, a.For)
}

// Describe says when the alert would have fired on one subscription,
// the wording the report and the command line use: "would have fired at
// 1.4s and resolved at 4.9s on inventory (peak 812)".
func (f LagFiring) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "would have fired at %s", fmtSeconds(f.FiredNS))
	if f.ResolvedNS > 0 {
		fmt.Fprintf(&b, " and resolved at %s", fmtSeconds(f.ResolvedNS))
	} else {
		b.WriteString(" and was still firing at the last sample")
	}
	fmt.Fprintf(&b, " on %s (peak %d)", f.Subscription, f.Peak)
	return b.String()
}

// AlertLines say the lag alert in words, one line per firing, the
// wording the report and the command line use: "The lag alert (lag >
// 100 for 1s, on each subscription's total) would have fired at 1.400s
// and resolved at 4.900s on inventory (peak 812)."; or that it never
// would have, or that none was declared.
func (l *Lag) AlertLines() []string {
	if l.Alert == nil {
		return []string{"No lag alert was declared (observability.lag_alert)."}
	}
	rule := "The lag alert (" + l.Alert.String() + ", on each subscription's total)"
	if len(l.Alerts) == 0 {
		peak, sub := int64(0), ""
		for _, t := range l.Totals {
			if t.Max > peak || sub == "" {
				peak, sub = t.Max, t.Subscription
			}
		}
		if sub == "" {
			return []string{rule + " could not have fired: no lag was sampled."}
		}
		return []string{fmt.Sprintf("%s would never have fired: the highest total was %d, on %s.", rule, peak, sub)}
	}
	out := make([]string, 0, len(l.Alerts))
	for _, f := range l.Alerts {
		out = append(out, rule+" "+f.Describe()+".")
	}
	return out
}

// PeakSummary says each subscription's highest total lag in one line,
// "email 177 (at 2.512s), inventory 208 (at 2.013s)", the wording the
// command line uses; "" when nothing was sampled.
func (l *Lag) PeakSummary() string {
	parts := make([]string, 0, len(l.Totals))
	for _, t := range l.Totals {
		parts = append(parts, fmt.Sprintf("%s %d (at %s)", t.Subscription, t.Max, fmtSeconds(t.MaxNS)))
	}
	return strings.Join(parts, ", ")
}
