package reports

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/deliverycheck/deliverycheck/checker"
)

// The guarantees of the resources a run's processes used (issue 24's
// hostile-payload facts, checker/stall.go and checker/resources.go):
// a stall per subscription, the memory of each process.
const (
	stallGuarantee  = "no stall over max-stall"
	memoryGuarantee = "peak memory within max-rss"
	// allProcesses names the memory check when max-rss is promised and
	// no process was measured.
	allProcesses = "every process"
)

// memoryChecks is the memory guarantee per measured process (the check's
// Subscription is the process), or one for allProcesses when max-rss is
// promised and nothing was measured.
func memoryChecks(res *checker.Result, established bool) []Check {
	promised := res.Guarantees.Fatal(checker.Memory)
	var out []Check
	for _, p := range res.Resources {
		c := Check{Subscription: p.Process, Guarantee: memoryGuarantee, Kind: checker.Memory, Promised: promised}
		if a := memoryAnomaly(res, p.Process); a != nil {
			c.Count = a.Count
		}
		c.Status = c.status(established)
		out = append(out, c)
	}
	if len(out) == 0 && promised {
		c := Check{Subscription: allProcesses, Guarantee: memoryGuarantee, Kind: checker.Memory, Promised: true}
		c.Status = c.status(false)
		out = append(out, c)
	}
	return out
}

// memoryAnomaly is the memory finding of process, nil if none.
func memoryAnomaly(res *checker.Result, process string) *checker.Anomaly {
	i := slices.IndexFunc(res.Anomalies, func(a checker.Anomaly) bool { return a.Kind == checker.Memory && a.Process == process })
	if i < 0 {
		return nil
	}
	return &res.Anomalies[i]
}

// stallRow is one subscription's longest stall in the report. Class is
// bad when it is over max-stall.
type stallRow struct {
	Subscription, Longest, Span, Faults, Class string
	Pending                                    int64
	Measured, Open                             bool
	Over                                       int
}

// resourceRow is one process's peak in the report. Class is bad when it
// is over max-rss.
type resourceRow struct {
	Process, Peak, At, Class string
	Ops                      int64
}

// newStallRows lays out the longest stall of each subscription.
func newStallRows(res *checker.Result) []stallRow {
	var out []stallRow
	for _, s := range res.Stalls {
		row := stallRow{Subscription: s.Subscription, Measured: s.Measured, Over: s.Over}
		if l := s.Longest; l != nil {
			row.Longest = time.Duration(l.DurationNS).Round(time.Millisecond).String()
			row.Span = fmtNs(l.StartNS) + " – " + fmtNs(l.EndNS)
			row.Pending, row.Open = l.Pending, l.Open
			row.Faults = strings.Join(l.Faults, "; ")
		}
		if s.Over > 0 {
			row.Class = "bad"
		}
		out = append(out, row)
	}
	return out
}

// newResourceRows lays out each process's peak.
func newResourceRows(res *checker.Result) []resourceRow {
	var out []resourceRow
	for _, p := range res.Resources {
		row := resourceRow{Process: p.Process, Peak: checker.HumanSize(p.PeakRSS), At: fmtNs(p.PeakNS), Ops: p.Ops}
		if a := memoryAnomaly(res, p.Process); a != nil && a.Fatal {
			row.Class = "bad"
		}
		out = append(out, row)
	}
	return out
}

// limits are the promised max-stall and max-rss, for the promised line.
func limits(g checker.Guarantees) []kv {
	var out []kv
	if g.MaxStall > 0 {
		out = append(out, kv{"max stall", g.MaxStall.String()})
	}
	if g.MaxRSS > 0 {
		out = append(out, kv{"max rss", checker.FormatSize(g.MaxRSS) + " (" + strconv.FormatInt(g.MaxRSS, 10) + " bytes)"})
	}
	return out
}

// resourceDetails are the details of a stall or memory finding, one per
// example: what its failure says, there being no event to trace.
func resourceDetails(a *checker.Anomaly) []string {
	var out []string
	for _, ex := range a.Examples {
		out = append(out, ex.Detail)
	}
	return out
}
