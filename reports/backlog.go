package reports

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/deliverycheck/deliverycheck/checker"
)

// backlogGuarantee is the JUnit name of max-backlog-age.
const backlogGuarantee = "backlog age within max-backlog-age"

// backlogView is the report's "Backlog" section (checker/backlog.go): per
// subscription its size and age, the waits, and each consumer's deliveries
// in flight beside the window it may hold.
type backlogView struct {
	// Limit is max-backlog-age, "" when not promised; Load the rate
	// timeline in words, "" without one.
	Limit, Load string
	Rows        []backlogRow
	Consumers   []flightRow
	Plots       []plotView
}

// backlogRow is one subscription's backlog. Class is bad when it was
// over max-backlog-age.
type backlogRow struct {
	Subscription                                         string
	Measured                                             bool
	MaxPending                                           int64
	MaxPendingAt, MaxAge, MaxAgeAt, P50, P99, Max, Class string
	Waits                                                int64
	Over                                                 int
}

// flightRow is one consumer process's most deliveries in flight, and
// the window its broker and batch let it hold.
type flightRow struct {
	Process, Subscription, Window string
	MaxInFlight                   int64
}

// newBacklogView lays out the backlog, nil when the result has none.
func newBacklogView(run Record, res *checker.Result) *backlogView {
	if len(res.Backlog) == 0 {
		return nil
	}
	v := &backlogView{Load: loadWords(run.Load)}
	if l := res.Guarantees.MaxBacklogAge; l > 0 {
		v.Limit = l.String()
	}
	for _, b := range res.Backlog {
		row := backlogRow{Subscription: b.Subscription, Measured: b.Measured, MaxPending: b.MaxPending, Waits: b.Waits, Over: b.Over,
			MaxPendingAt: fmtNs(b.MaxPendingNS), MaxAge: dur(b.MaxAgeNS), MaxAgeAt: fmtNs(b.MaxAgeAtNS),
			P50: dur(b.WaitP50NS), P99: dur(b.WaitP99NS), Max: dur(b.WaitMaxNS)}
		if b.Over > 0 {
			row.Class = "bad"
		}
		v.Rows = append(v.Rows, row)
	}
	window := flightWindow(run)
	for _, c := range res.BacklogConsumers {
		v.Consumers = append(v.Consumers, flightRow{Process: c.Process, Subscription: c.Subscription, MaxInFlight: c.MaxInFlight, Window: window})
	}
	v.Plots = backlogPlots(run, res)
	return v
}

func dur(ns int64) string { return time.Duration(ns).Round(time.Millisecond).String() }

// loadWords says a rate timeline as the scenario wrote it, on the run's
// clock: "150/s from 1.400s to 3.400s".
func loadWords(steps []LoadStep) string {
	var parts []string
	for _, s := range steps {
		p := fmt.Sprintf("%s/s from %s", strconv.FormatFloat(s.Rate, 'g', -1, 64), fmtNs(s.AtNS))
		if s.ForNS > 0 {
			p += " to " + fmtNs(s.AtNS+s.ForNS)
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ")
}

// flightWindow is what a consumer process may hold: its batch and, on
// RabbitMQ, its prefetch window.
func flightWindow(run Record) string {
	var parts []string
	if run.ConsumerBatch > 0 {
		parts = append(parts, fmt.Sprintf("batch %d", run.ConsumerBatch))
	}
	if run.Prefetch > 0 {
		parts = append(parts, fmt.Sprintf("prefetch %d", run.Prefetch))
	}
	return strings.Join(parts, ", ")
}

// backlogPlots lays out one plot per measured subscription: its pending
// events (Series.Unseen) on the left scale and the age of its oldest
// pending event on the right one (drawn scaled to the left), the
// max-backlog-age line, and the rate timeline's steps shaded with the
// fault windows.
func backlogPlots(run Record, res *checker.Result) []plotView {
	s := res.Series
	bucketNs := max(s.BucketNanos, 1)
	a := newAxis(int64(max(s.Buckets, 1)) * bucketNs)
	a.bucketNs = bucketNs
	shaded := run
	shaded.Faults = slices.Clone(run.Faults)
	for _, l := range run.Load {
		end := l.AtNS + l.ForNS
		if l.ForNS <= 0 {
			end = 0
		}
		shaded.Faults = append(shaded.Faults, FaultWindow{Name: "load", Target: strconv.FormatFloat(l.Rate, 'g', -1, 64) + "/s", Start: l.AtNS, End: end})
	}
	slices.SortStableFunc(shaded.Faults, func(x, y FaultWindow) int { return cmp.Compare(x.Start, y.Start) })
	limit := float64(res.Guarantees.MaxBacklogAge) / 1e9
	var out []plotView
	for i, b := range res.Backlog {
		if !b.Measured {
			continue
		}
		pending := curveOf(s.Unseen, b.Subscription)
		age := curveOf(s.OldestAge, b.Subscription)
		var top, ageTop float64
		for _, x := range pending {
			top = max(top, float64(x))
		}
		for _, x := range age {
			ageTop = max(ageTop, float64(x)/1e9)
		}
		top, ageTop = niceCeil(top), niceCeil(max(ageTop, limit))
		scale := top / ageTop
		// The subscription's name is the scenario's text: in the lines'
		// names (text), never in the plot's title (an attribute too).
		ss := []series{{name: b.Subscription + ": pending (events, left scale)", values: floats(pending, 1)},
			{name: b.Subscription + ": oldest unapplied age (s, right scale)", values: floats(age, scale/1e9)}}
		if limit > 0 {
			line := make([]float64, len(age))
			for i := range line {
				line[i] = limit * scale
			}
			ss = append(ss, series{name: "max-backlog-age " + res.Guarantees.MaxBacklogAge.String(), values: line, dash: "6 3"})
		}
		p := layout(fmt.Sprintf("backlog-%d", i),
			fmt.Sprintf("Backlog, subscription %d of %d", i+1, len(res.Backlog)), "events · s", a, ss, shaded)
		for _, t := range p.YTicks {
			frac := (a.y1 - t.Pos) / (a.y1 - a.y0)
			p.Y2Ticks = append(p.Y2Ticks, tickView{Pos: t.Pos, Label: fmtNum(frac*ageTop) + "s"})
		}
		out = append(out, p)
	}
	return out
}

// curveOf is the values of sub's curve, nil if it has none.
func curveOf(cs []checker.Curve, sub string) []int64 {
	for _, c := range cs {
		if c.Subscription == sub && c.Process == "" {
			return c.Values
		}
	}
	return nil
}

func floats(xs []int64, scale float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(x) * scale
	}
	return out
}
