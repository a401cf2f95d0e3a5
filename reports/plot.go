package reports

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/history"
)

// Plot geometry, in SVG user units; the SVG scales to the page width.
const (
	plotW      = 1100
	plotH      = 230
	padLeft    = 64
	padRight   = 16
	padTop     = 24
	padBottom  = 30
	maxPoints  = 600 // points per line: one per pixel column or so, never one per op
	maxBands   = 120 // fault windows drawn; more are merged into their union
	maxMarks   = 240 // crash/restart lines drawn; more are merged per pixel column
	logFloorMs = 0.01
)

// plotView is one SVG plot, fully laid out: the template only places what
// is here, so the view-model tests see exactly what is drawn.
type plotView struct {
	ID, Title, Unit string
	// Label names the plot for a screen reader, when its Title holds
	// untrusted text (a subscription's name) an attribute must not.
	Label string
	W, H  int
	// The plot area.
	X0, X1, Y0, Y1 float64
	Lines          []lineView
	Bands          []bandView
	// Recoveries span each fault's heal to its throughput's recovery,
	// or to where the search for one stopped (throughput plot only).
	Recoveries []bandView
	// Alerts span the intervals the lag alert would have fired (lag
	// plots only).
	Alerts         []bandView
	Marks          []markView
	XTicks, YTicks []tickView
	// Y2Ticks label a second scale, drawn at the right edge, for a plot
	// whose second kind of line is drawn scaled to the first's.
	Y2Ticks []tickView
	// Empty, when set, is drawn instead of lines: why there is nothing.
	Empty string
}

type lineView struct {
	Name   string
	Color  string
	Dash   string    // stroke-dasharray, empty for solid
	Points svgPoints // "x,y x,y ..." at most maxPoints pairs
	N      int       // points in Points
}

// svgPoints is a polyline's points: the report's own numbers, longer than
// maxShownText, so not a string [inert] cuts.
type svgPoints string

type bandView struct {
	X, W  float64
	Label string // short, drawn on the band
	Title string // hover text
}

type markView struct {
	X     float64
	Kind  string // crash or restart
	Title string
}

type tickView struct {
	Pos   float64
	Label string
}

// palette is colour-blind friendly (Okabe–Ito).
var palette = []string{"#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"}

// axis maps run time (ns) and values onto the plot area.
type axis struct {
	tmax     int64   // ns at the right edge
	ymax     float64 // value at the top (linear) or its log10 (log)
	ymin     float64
	log      bool
	x0, x1   float64
	y0, y1   float64 // y0 top, y1 bottom
	bucketNs int64
}

func newAxis(tmax int64) axis {
	return axis{tmax: max(tmax, 1), x0: padLeft, x1: plotW - padRight, y0: padTop, y1: plotH - padBottom}
}

func (a axis) x(t int64) float64 {
	return a.x0 + (a.x1-a.x0)*float64(min(max(t, 0), a.tmax))/float64(a.tmax)
}

func (a axis) y(v float64) float64 {
	if a.log {
		v = math.Log10(max(v, logFloorMs))
	}
	if a.ymax <= a.ymin {
		return a.y1
	}
	f := (v - a.ymin) / (a.ymax - a.ymin)
	return a.y1 - (a.y1-a.y0)*min(max(f, 0), 1)
}

func (a axis) view(id, title, unit string) plotView {
	return plotView{ID: id, Title: title, Unit: unit, W: plotW, H: plotH, X0: a.x0, X1: a.x1, Y0: a.y0, Y1: a.y1}
}

// series is one line before layout: a value per bucket; NaN means no data
// (the line breaks there is not needed; it is skipped).
type series struct {
	name   string
	values []float64
	dash   string
}

// downsample cuts values to at most n points, each the max of its group,
// so a spike survives (a brief stall matters more than the average).
// It returns the kept points as (bucket index at group middle, value).
func downsample(values []float64, n int) (idx []float64, out []float64) {
	if len(values) <= n {
		for i, v := range values {
			if !math.IsNaN(v) {
				idx = append(idx, float64(i))
				out = append(out, v)
			}
		}
		return idx, out
	}
	group := float64(len(values)) / float64(n)
	for g := range n {
		lo, hi := int(float64(g)*group), int(float64(g+1)*group)
		best := math.NaN()
		for _, v := range values[lo:min(hi, len(values))] {
			if !math.IsNaN(v) && (math.IsNaN(best) || v > best) {
				best = v
			}
		}
		if !math.IsNaN(best) {
			idx = append(idx, (float64(lo)+float64(hi-1))/2)
			out = append(out, best)
		}
	}
	return idx, out
}

// layout lays out the lines, ticks, bands and marks of one plot.
func layout(id, title, unit string, a axis, ss []series, run Record) plotView {
	ymax := 0.0
	for _, s := range ss {
		for _, v := range s.values {
			if !math.IsNaN(v) {
				ymax = max(ymax, v)
			}
		}
	}
	if a.log {
		a.ymin = math.Floor(math.Log10(logFloorMs * 10))
		a.ymax = math.Ceil(math.Log10(max(ymax, 1)))
		if a.ymax <= a.ymin {
			a.ymax = a.ymin + 1
		}
	} else {
		a.ymax = niceCeil(ymax)
	}
	p := a.view(id, title, unit)
	p.XTicks = timeTicks(a)
	p.YTicks = valueTicks(a)
	p.Bands = bands(a, run.Faults)
	p.Marks = marks(a, run.Marks)
	for i, s := range ss {
		idx, vals := downsample(s.values, maxPoints)
		if len(vals) == 0 {
			continue
		}
		var b strings.Builder
		for j, v := range vals {
			if j > 0 {
				b.WriteByte(' ')
			}
			t := int64((idx[j] + 0.5) * float64(a.bucketNs))
			b.WriteString(strconv.FormatFloat(a.x(t), 'f', 1, 64))
			b.WriteByte(',')
			b.WriteString(strconv.FormatFloat(a.y(v), 'f', 1, 64))
		}
		p.Lines = append(p.Lines, lineView{Name: s.name, Color: palette[i%len(palette)], Dash: s.dash, Points: svgPoints(b.String()), N: len(vals)})
	}
	if len(p.Lines) == 0 {
		p.Empty = "no data"
	}
	return p
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*e {
			return m * e
		}
	}
	return 10 * e
}

func valueTicks(a axis) []tickView {
	var out []tickView
	if a.log {
		for e := a.ymin; e <= a.ymax; e++ {
			out = append(out, tickView{Pos: a.y(math.Pow(10, e)), Label: fmtNum(math.Pow(10, e))})
		}
		return out
	}
	for i := range 5 {
		v := a.ymax * float64(i) / 4
		out = append(out, tickView{Pos: a.y(v), Label: fmtNum(v)})
	}
	return out
}

func fmtNum(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 3, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'g', 3, 64) + "k"
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// timeTicks puts about eight ticks on the time axis at round seconds.
func timeTicks(a axis) []tickView {
	secs := float64(a.tmax) / 1e9
	step := niceCeil(secs / 8)
	var out []tickView
	minutes := secs > 1200 // one unit per axis
	if minutes {
		step = 60 * niceCeil(secs/60/8)
	}
	for s := 0.0; s <= secs+1e-9; s += step {
		label := strconv.FormatFloat(s, 'g', 4, 64) + "s"
		if minutes {
			label = strconv.FormatFloat(s/60, 'g', 4, 64) + "m"
		}
		out = append(out, tickView{Pos: a.x(int64(s * 1e9)), Label: label})
	}
	return out
}

// bands shades fault windows; past maxBands they are merged into their
// union so a long random schedule stays a handful of nodes.
func bands(a axis, faults []FaultWindow) []bandView {
	type iv struct {
		s, e  int64
		n     int
		label string
		title string
	}
	var ivs []iv
	for _, f := range faults {
		e := f.End
		if e <= 0 {
			e = a.tmax
		}
		label := f.Name
		if f.Target != "" {
			label += " " + f.Target
		}
		ivs = append(ivs, iv{f.Start, e, 1, label, fmt.Sprintf("%s: %s → %s %s", label, fmtNs(f.Start), fmtNs(e), f.Detail)})
	}
	// Past maxBands, merge windows closer than a gap that doubles until
	// few enough remain: a dense schedule becomes a few shaded stretches
	// labelled with how many faults they hold, none dropped.
	for gap := int64(0); len(ivs) > maxBands; gap = max(2*gap, a.tmax/maxBands) {
		var merged []iv
		for _, v := range ivs { // faults are in start order
			if n := len(merged); n > 0 && v.s <= merged[n-1].e+gap {
				m := &merged[n-1]
				m.e = max(m.e, v.e)
				m.n += v.n
				continue
			}
			merged = append(merged, v)
		}
		ivs = merged
	}
	for i := range ivs {
		if m := &ivs[i]; m.n > 1 {
			m.label = fmt.Sprintf("%d faults", m.n)
			m.title = fmt.Sprintf("%d faults between %s and %s", m.n, fmtNs(m.s), fmtNs(m.e))
		}
	}
	out := make([]bandView, 0, len(ivs))
	for _, v := range ivs {
		x0, x1 := a.x(v.s), a.x(v.e)
		out = append(out, bandView{X: x0, W: max(x1-x0, 1), Label: v.label, Title: v.title})
	}
	return out
}

// marks draws crashes and restarts; past maxMarks those of one kind in
// one pixel column become one line.
func marks(a axis, ms []Mark) []markView {
	out := make([]markView, 0, min(len(ms), maxMarks))
	if len(ms) <= maxMarks {
		for _, m := range ms {
			out = append(out, markView{X: a.x(m.Time), Kind: m.Kind, Title: fmt.Sprintf("%s %s at %s %s", m.Kind, m.Target, fmtNs(m.Time), m.Detail)})
		}
		return out
	}
	// Too many to draw one by one: one line per kind per column of
	// maxMarks columns, titled with how many it stands for.
	type col struct {
		c    int
		kind string
	}
	width := (a.x1 - a.x0) / maxMarks
	counts := map[col]int{}
	var order []col
	for _, m := range ms {
		c := col{int((a.x(m.Time) - a.x0) / width), m.Kind}
		if counts[c] == 0 {
			order = append(order, c)
		}
		counts[c]++
	}
	for _, c := range order {
		x := a.x0 + (float64(c.c)+0.5)*width
		out = append(out, markView{X: x, Kind: c.kind, Title: fmt.Sprintf("%d × %s", counts[c], c.kind)})
	}
	return out
}

// fmtNs formats a run time as seconds with millisecond precision.
func fmtNs(ns int64) string {
	return strconv.FormatFloat(float64(ns)/1e9, 'f', 3, 64) + "s"
}

// plots lays out the three time-series plots of a result.
func plots(run Record, res *checker.Result) []plotView {
	s := res.Series
	bucketNs := max(s.BucketNanos, 1)
	tmax := int64(max(s.Buckets, 1)) * bucketNs
	a := newAxis(tmax)
	a.bucketNs = bucketNs
	perSec := 1e9 / float64(bucketNs)

	// Throughput: completed ops per second of each pipeline stage, and every
	// fail or info together (Jepsen's perf plot colours by outcome).
	var tp []series
	okRows := map[history.F][]int64{}
	bad := make([]float64, s.Buckets)
	anyBad := false
	for _, r := range s.Throughput {
		switch r.Type {
		case history.OK:
			okRows[r.F] = r.Counts
		case history.Fail, history.Info:
			if r.F == history.Crash || r.F == history.Fault {
				continue
			}
			for i, c := range r.Counts {
				if i < len(bad) {
					bad[i] += float64(c) * perSec
					anyBad = anyBad || c > 0
				}
			}
		}
	}
	for _, f := range []history.F{history.Commit, history.Publish, history.Deliver, history.Apply, history.Ack, history.DLQ} {
		if c, ok := okRows[f]; ok {
			v := make([]float64, len(c))
			for i, x := range c {
				v[i] = float64(x) * perSec
			}
			tp = append(tp, series{name: string(f) + " ok", values: v})
		}
	}
	if anyBad {
		tp = append(tp, series{name: "fail/info", values: bad, dash: "4 3"})
	}

	// Latency, log scale in ms.
	var p50, p95, p99, pmax []float64
	for range s.Buckets {
		p50, p95, p99, pmax = append(p50, math.NaN()), append(p95, math.NaN()), append(p99, math.NaN()), append(pmax, math.NaN())
	}
	for _, l := range s.Latency {
		if l.Bucket < 0 || l.Bucket >= s.Buckets {
			continue
		}
		p50[l.Bucket], p95[l.Bucket], p99[l.Bucket], pmax[l.Bucket] = float64(l.P50)/1e6, float64(l.P95)/1e6, float64(l.P99)/1e6, float64(l.Max)/1e6
	}
	lat := []series{{name: "p50", values: p50}, {name: "p95", values: p95}, {name: "p99", values: p99}, {name: "max", values: pmax, dash: "2 3"}}
	if len(s.Latency) == 0 {
		lat = nil
	}

	var unseen []series
	for _, c := range s.Unseen {
		v := make([]float64, len(c.Values))
		for i, x := range c.Values {
			v[i] = float64(x)
		}
		unseen = append(unseen, series{name: c.Subscription, values: v})
	}

	la := a
	la.log = true
	through := layout("throughput", "Throughput", "ops/s", a, tp, run)
	through.Recoveries = recoveries(a, res)
	return []plotView{
		through,
		layout("latency", "Commit → apply latency", "ms (log)", la, lat, run),
		layout("unseen", "Unseen: committed, not yet applied", "events", a, unseen, run),
	}
}

// maxRecoveries caps the recovery bands drawn; the table and results.json
// have every window.
const maxRecoveries = maxBands

// recoveries lays out, for each fault window with a baseline, a band from
// its heal to the later of its commits' and applies' recoveries (or to
// where the search stopped, for a rate that did not recover).
func recoveries(a axis, res *checker.Result) []bandView {
	var out []bandView
	for _, w := range res.Availability.Windows {
		if len(out) == maxRecoveries || w.Fault < 0 || w.Fault >= len(res.Faults) {
			break
		}
		f := res.Faults[w.Fault]
		end, back := f.EndNS, true
		for _, c := range []checker.RateChange{w.Commits, w.Applies} {
			switch c.Recovery {
			case checker.RecoveryRecovered:
				end = max(end, f.EndNS+*c.RecoveryNS)
			case checker.RecoveryNotRecovered:
				end, back = max(end, *c.SearchedToNS), false
			}
		}
		if w.Commits.Recovery == checker.RecoveryNoBaseline && w.Applies.Recovery == checker.RecoveryNoBaseline {
			continue
		}
		label := "back in " + fmtDuration(end-f.EndNS)
		if !back {
			label = "not back"
		}
		title := fmt.Sprintf("after %s %s healed at %s: commits %s; applies %s", f.Kind, f.Target, fmtNs(f.EndNS), w.Commits.Back(&res.Availability, f.EndNS), w.Applies.Back(&res.Availability, f.EndNS))
		x0, x1 := a.x(f.EndNS), a.x(end)
		out = append(out, bandView{X: x0, W: max(x1-x0, 1), Label: label, Title: title})
	}
	return out
}

// fmtDuration formats a duration in ns as 0.8s, 12.3s.
func fmtDuration(ns int64) string {
	return strconv.FormatFloat(float64(ns)/1e9, 'f', 1, 64) + "s"
}
