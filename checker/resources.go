package checker

// This file is the memory of the processes the harness runs (issue 24,
// "Hostile payloads and headers": a consumer that holds what it is sent
// grows until the kernel kills it). The supervisor writes a resources op
// (history.Resources) whenever a process's peak resident set grew, and
// when it exits; the guarantee max-rss bounds it (Guarantees.MaxRSS):
//
//   - [Result.Resources] has each process's peak and when it was first
//     reported, promised or not.
//   - With MaxRSS, a process whose resources op exceeds it is one
//     [Memory] finding, naming the process, its peak and when it first
//     went over. A history with no resources op cannot say: with MaxRSS
//     that makes the run Unknown.

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/deliverycheck/deliverycheck/history"
)

// ProcessResources is the peak resident set of one process the harness
// measured, over all its restarts.
type ProcessResources struct {
	Process string `json:"process"`
	// PeakRSS is its highest resident set, in bytes, and PeakNS when a
	// resources op first reported it (ns since the run started).
	PeakRSS int64 `json:"peak_rss"`
	PeakNS  int64 `json:"peak_ns"`
	// Ops counts its resources ops.
	Ops int64 `json:"ops"`
}

// peakAcc is what shard 0 keeps of one process's resources ops.
type peakAcc struct {
	process string
	peak    history.Op // the first op with the highest rss
	over    history.Op // the first op over max-rss, Time -1 if none
	ops     int64
}

// resource folds a resources op into shard 0's peaks.
func (s *shard) resource(op *history.Op) {
	if op.Type != history.OK || op.Value.Target == "" {
		return
	}
	i := slices.IndexFunc(s.peaks, func(p peakAcc) bool { return p.process == op.Value.Target })
	if i < 0 {
		s.peaks = append(s.peaks, peakAcc{process: op.Value.Target, over: history.Op{Time: -1}})
		i = len(s.peaks) - 1
	}
	p := &s.peaks[i]
	p.ops++
	if p.ops == 1 || op.Value.RSS > p.peak.Value.RSS {
		p.peak = *op
	}
	if limit := s.maxRSS; limit > 0 && op.Value.RSS > limit && p.over.Time < 0 {
		p.over = *op
	}
}

// resources builds the Resources section, sorted by process, and the
// Memory anomalies, one per process over max-rss; with max-rss and no
// resources op at all it says in v.resourceReasons that memory was not
// measured.
func (v *view) resources(r *Result, peaks []peakAcc) {
	g := r.Guarantees
	slices.SortFunc(peaks, func(x, y peakAcc) int { return cmp.Compare(x.process, y.process) })
	for _, p := range peaks {
		r.Resources = append(r.Resources, ProcessResources{Process: p.process, PeakRSS: p.peak.Value.RSS, PeakNS: p.peak.Time, Ops: p.ops})
	}
	if g.MaxRSS > 0 && len(peaks) == 0 {
		v.resourceReasons = append(v.resourceReasons, "memory not measured: max-rss is promised and the history has no resources op")
	}
	for _, p := range peaks {
		if p.over.Time < 0 {
			continue
		}
		ops := []history.Op{p.over}
		if p.peak.Index != p.over.Index || p.peak.Time != p.over.Time {
			ops = append(ops, p.peak)
		}
		an := Anomaly{Kind: Memory, Process: p.process, Fatal: g.Fatal(Memory), Count: 1, Events: []string{},
			Examples: []Example{{Detail: memoryDetail(p, g.MaxRSS), Ops: ops}}}
		r.Anomalies = append(r.Anomalies, an)
	}
}

// memoryDetail says a process's excess in words.
func memoryDetail(p peakAcc, limit int64) string {
	return fmt.Sprintf("%s peaked at %s (at %s), over max-rss %s: first over at %s with %s",
		p.process, HumanSize(p.peak.Value.RSS), fmtSeconds(p.peak.Time), FormatSize(limit), fmtSeconds(p.over.Time), HumanSize(p.over.Value.RSS))
}

// HumanSize writes n bytes for a person, in MiB with one decimal
// ("300.2 MiB"), or in KiB below one MiB: what the report shows.
func HumanSize(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// ResourcesSummary says each measured process's peak in one line,
// "consumer-inventory-0 400.0 MiB, relay-0 12.0 MiB", the wording the
// command line uses; "" when none was measured.
func ResourcesSummary(rs []ProcessResources) string {
	parts := make([]string, 0, len(rs))
	for _, p := range rs {
		parts = append(parts, p.Process+" "+HumanSize(p.PeakRSS))
	}
	return strings.Join(parts, ", ")
}
