package checker

import (
	"cmp"
	"slices"

	"github.com/deliverycheck/deliverycheck/history"
)

// Series are the time series of a run for the report, in buckets of
// BucketNanos from time 0 (at most MaxBuckets of them; one second unless
// the run is longer than MaxBuckets seconds).
type Series struct {
	BucketNanos int64 `json:"bucket_ns"`
	Buckets     int   `json:"buckets"`
	// Throughput counts ops per bucket by f and type, sorted by f then type.
	Throughput []Rate `json:"throughput"`
	// Latency is commit→first-apply latency of the buckets where an event was
	// first applied (all subscriptions together).
	Latency []LatencyPoint `json:"latency"`
	// Unseen is, per subscription, the committed events not yet applied,
	// skipped or dead-lettered at the end of each bucket: a curve that
	// returns to 0 means late, one that stays up means lost.
	Unseen []Curve `json:"unseen"`
	// Retries is, per subscription, the consumers' transient retries per
	// bucket (retries.go).
	Retries []Curve `json:"retries,omitempty"`
	// OldestAge is, per subscription, the age in ns of its oldest
	// unapplied event at the end of each bucket (backlog.go).
	OldestAge []Curve `json:"oldest_age,omitempty"`
	// InFlight is, per consumer process, the most deliveries it held at
	// once in each bucket (backlog.go).
	InFlight []Curve `json:"in_flight,omitempty"`
}

// MaxBuckets bounds the length of every series.
const MaxBuckets = 600

// Rate is the op count per bucket of one f and type.
type Rate struct {
	F      history.F    `json:"f"`
	Type   history.Type `json:"type"`
	Counts []int64      `json:"counts"`
}

// LatencyPoint summarises the latencies of one bucket, in nanoseconds.
type LatencyPoint struct {
	Bucket int   `json:"bucket"`
	Count  int   `json:"count"`
	P50    int64 `json:"p50"`
	P95    int64 `json:"p95"`
	P99    int64 `json:"p99"`
	Max    int64 `json:"max"`
}

// Curve is one value per bucket for one subscription.
type Curve struct {
	Subscription string `json:"subscription"`
	// Process is the consumer process of a per-process curve.
	Process string  `json:"process,omitempty"`
	Values  []int64 `json:"values"`
}

const (
	second      = int64(1e9)
	maxSeconds  = 1 << 17 // times beyond ~36h land in the last second bucket
	maxFs       = 32      // distinct f values counted; others count as "other"
	otherF      = history.F("other")
	typesPerRow = 4
)

// seriesAcc accumulates per-second counts while the history streams by.
type seriesAcc struct {
	fs     []history.F
	perSec [][maxFs * typesPerRow]int64
	lat    [][]int64 // per second of apply time
	// commits and applies count commit and apply ok ops per tick, for
	// the availability of each fault window (availability.go).
	commits, applies rateAcc
	// flight keeps the ops that open or end a delivery in a consumer
	// process (inflight.go).
	flight flightAcc
}

func secondOf(t int64) int {
	if t < 0 {
		return 0
	}
	return int(min(t/second, maxSeconds-1))
}

// vocabulary has fixed rows in the per-second counts; other f values get
// rows as they come.
var vocabulary = []history.F{history.Commit, history.Publish, history.Deliver, history.Apply, history.Ack,
	history.SkipStale, history.DLQ, history.FinalRead, history.Fault, history.Crash, history.Restart,
	history.Drain, history.Setup}

func (s *seriesAcc) fIndex(f history.F) int {
	if s.fs == nil {
		s.fs = slices.Clone(vocabulary)
	}
	switch f {
	case history.Commit:
		return 0
	case history.Publish:
		return 1
	case history.Deliver:
		return 2
	case history.Apply:
		return 3
	case history.Ack:
		return 4
	}
	for i, g := range s.fs {
		if g == f {
			return i
		}
	}
	if len(s.fs) < maxFs-1 {
		s.fs = append(s.fs, f)
		return len(s.fs) - 1
	}
	return maxFs - 1
}

func (s *seriesAcc) op(op *history.Op) {
	s.flight.op(op)
	sec := secondOf(op.Time)
	for sec >= len(s.perSec) {
		s.perSec = append(s.perSec, [maxFs * typesPerRow]int64{})
	}
	t := int(op.Type) - 1
	if t < 0 || t >= typesPerRow {
		return
	}
	switch op.F {
	case history.Commit:
		s.commits.op(op)
	case history.Apply:
		s.applies.op(op)
	}
	s.perSec[sec][s.fIndex(op.F)*typesPerRow+t]++
}

func (s *seriesAcc) latency(t, d int64) {
	sec := secondOf(t)
	for sec >= len(s.lat) {
		s.lat = append(s.lat, nil)
	}
	s.lat[sec] = append(s.lat[sec], d)
}

// buildSeries merges the shards' accumulators into the report series.
func buildSeries(shards []*shard, v *view) Series {
	// Merge per-second counts by f name.
	var fs []history.F
	fIdx := map[history.F]int{}
	seconds := 0
	for _, sh := range shards {
		for _, f := range sh.series.fs {
			if _, ok := fIdx[f]; !ok {
				fIdx[f] = len(fs)
				fs = append(fs, f)
			}
		}
		seconds = max(seconds, len(sh.series.perSec), len(sh.series.lat))
	}
	for i := range v.events {
		e := &v.events[i]
		if e.flags&cTimeSet != 0 {
			seconds = max(seconds, secondOf(e.commitTime)+1)
		}
	}
	seconds = max(seconds, 1)
	width := (seconds + MaxBuckets - 1) / MaxBuckets
	n := (seconds + width - 1) / width
	out := Series{BucketNanos: int64(width) * second, Buckets: n, Throughput: []Rate{}, Latency: []LatencyPoint{}, Unseen: []Curve{}}
	bucket := func(t int64) int { return secondOf(t) / width }

	type row struct {
		f history.F
		t history.Type
	}
	counts := map[row][]int64{}
	lat := make([][]int64, n)
	for _, sh := range shards {
		acc := &sh.series
		for fi := range maxFs {
			f := otherF
			if fi < len(acc.fs) {
				f = acc.fs[fi]
			} else if fi != maxFs-1 {
				continue
			}
			for t := range typesPerRow {
				for sec := range acc.perSec {
					c := acc.perSec[sec][fi*typesPerRow+t]
					if c == 0 {
						continue
					}
					k := row{f, history.Type(t + 1)}
					if counts[k] == nil {
						counts[k] = make([]int64, n)
					}
					counts[k][sec/width] += c
				}
			}
		}
		for sec, ls := range acc.lat {
			lat[sec/width] = append(lat[sec/width], ls...)
		}
	}
	for k, c := range counts {
		out.Throughput = append(out.Throughput, Rate{F: k.f, Type: k.t, Counts: c})
	}
	slices.SortFunc(out.Throughput, func(x, y Rate) int {
		if c := cmp.Compare(string(x.F), string(y.F)); c != 0 {
			return c
		}
		return int(x.Type) - int(y.Type)
	})

	// Latency percentiles.
	for b, ls := range lat {
		if len(ls) == 0 {
			continue
		}
		slices.Sort(ls)
		q := func(p float64) int64 { return ls[min(len(ls)-1, int(p*float64(len(ls))))] }
		out.Latency = append(out.Latency, LatencyPoint{Bucket: b, Count: len(ls), P50: q(0.50), P95: q(0.95), P99: q(0.99), Max: ls[len(ls)-1]})
	}

	// Unseen: committed by the end of the bucket minus resolved by then.
	committed := make([]int64, n)
	for i := range v.events {
		e := &v.events[i]
		if e.committed() && e.flags&cTimeSet != 0 {
			committed[bucket(e.commitTime)]++
		}
	}
	for _, sub := range v.subs {
		resolved := make([]int64, n)
		for i := range v.events {
			e := &v.events[i]
			se := v.se(sub, i)
			if se.flags&sResolved != 0 && e.committed() && e.flags&cTimeSet != 0 {
				resolved[min(n-1, max(bucket(se.resolved), bucket(e.commitTime)))]++
			}
		}
		values := make([]int64, n)
		var c, r int64
		for b := range n {
			c += committed[b]
			r += resolved[b]
			values[b] = c - r
		}
		out.Unseen = append(out.Unseen, Curve{Subscription: sub.name, Values: values})
	}
	return out
}
