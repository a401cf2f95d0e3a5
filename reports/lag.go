package reports

// The report's "Consumer lag" section, its charts and the JUnit
// property of the lag alert (checker/lag.go measures; docs/results.md
// "Lag" says what).

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/deliverycheck/deliverycheck/checker"
)

// lagView is the "Consumer lag" section: the alert in words, and a row
// per series with its peak. The charts are among the plots (lagPlots).
type lagView struct {
	// Alert says the alert rule and when it would have fired, one line
	// per firing, or that it never did, or that none was declared.
	Alert []string
	// Fired is true when the alert would have fired at least once.
	Fired    bool
	Rows     []lagRow
	Failures int64
}

type lagRow struct {
	Subscription, Kind, Target, Partition string
	Max                                   int64
	At                                    string
	Samples                               int
	Chart                                 string // the id of its subscription's chart, "" for none
}

// newLagView lays out res's lag; nil when the history has none.
func newLagView(res *checker.Result) *lagView {
	if res == nil || res.Lag == nil {
		return nil
	}
	l := res.Lag
	v := &lagView{Alert: l.AlertLines(), Fired: len(l.Alerts) > 0, Failures: l.Failures}
	charts := map[string]string{}
	for i, t := range l.Totals {
		charts[t.Subscription] = lagChartID(i)
	}
	for _, s := range l.Series {
		v.Rows = append(v.Rows, newLagRow(s, "lag", charts))
	}
	for _, s := range l.DLQ {
		v.Rows = append(v.Rows, newLagRow(s, "dead-letter queue", charts))
	}
	return v
}

func newLagRow(s checker.LagSeries, kind string, charts map[string]string) lagRow {
	r := lagRow{Subscription: s.Subscription, Kind: kind, Target: s.Target, Max: s.Max, At: fmtNs(s.MaxNS), Samples: len(s.Samples), Chart: charts[s.Subscription]}
	if s.Partition != nil {
		r.Partition = strconv.FormatInt(*s.Partition, 10)
	}
	return r
}

// lagChartID is the id of the lag chart of the i-th subscription of
// Lag.Totals: a subscription's name is not trusted into an attribute.
func lagChartID(i int) string { return "lag-" + strconv.Itoa(i) }

// lagPlots lays out a chart per subscription: its total, each of its
// partitions when it has several, its dead-letter queue's depth
// (RabbitMQ: a redrive or a purge shows there), the alert's threshold, the intervals
// the alert would have fired, and the fault windows; on the time axis of
// the other plots.
func lagPlots(run Record, res *checker.Result) []plotView {
	if res == nil || res.Lag == nil {
		return nil
	}
	l := res.Lag
	tmax := int64(max(res.Series.Buckets, 1)) * max(res.Series.BucketNanos, 1)
	for _, ss := range [][]checker.LagSeries{l.Series, l.Totals} {
		for _, s := range ss {
			if n := len(s.Samples); n > 0 {
				tmax = max(tmax, s.Samples[n-1][0])
			}
		}
	}
	out := make([]plotView, 0, len(l.Totals))
	for i, tot := range l.Totals {
		lines := []timedLine{{name: "total", samples: tot.Samples}}
		var parts []checker.LagSeries
		for _, s := range l.Series {
			if s.Subscription == tot.Subscription && s.Partition != nil {
				parts = append(parts, s)
			}
		}
		if len(parts) > 1 {
			for _, s := range parts {
				lines = append(lines, timedLine{name: "partition " + strconv.FormatInt(*s.Partition, 10), samples: s.Samples, dash: "3 2"})
			}
		}
		ymax := float64(tot.Max)
		for _, d := range l.DLQ {
			if d.Subscription == tot.Subscription {
				lines = append(lines, timedLine{name: "dead-letter queue", samples: d.Samples, dash: "1 3"})
				ymax = max(ymax, float64(d.Max))
			}
		}
		if l.Alert != nil {
			lines = append(lines, timedLine{name: fmt.Sprintf("alert threshold (> %d)", l.Alert.Threshold), samples: [][2]int64{{0, l.Alert.Threshold}, {tmax, l.Alert.Threshold}}, dash: "6 4"})
			ymax = max(ymax, float64(l.Alert.Threshold)*1.1)
		}
		a := newAxis(tmax)
		a.ymax = niceCeil(ymax)
		p := a.view(lagChartID(i), "Consumer lag of "+tot.Subscription+" ("+tot.Target+")", "records or messages")
		p.Label = "Consumer lag"
		p.XTicks, p.YTicks = timeTicks(a), valueTicks(a)
		p.Bands, p.Marks = bands(a, run.Faults), marks(a, run.Marks)
		for i, tl := range lines {
			if lv, ok := tl.layout(a, palette[i%len(palette)]); ok {
				p.Lines = append(p.Lines, lv)
			}
		}
		for _, f := range l.Alerts {
			if f.Subscription != tot.Subscription {
				continue
			}
			end := f.ResolvedNS
			if end == 0 {
				end = tmax
			}
			x0, x1 := a.x(f.FiredNS), a.x(end)
			p.Alerts = append(p.Alerts, bandView{X: x0, W: max(x1-x0, 1), Label: "alert", Title: "the lag alert " + f.Describe()})
		}
		if len(tot.Samples) == 0 {
			p.Empty = "no lag sampled"
		}
		out = append(out, p)
	}
	return out
}

// timedLine is a line of samples at their own times, not per bucket.
type timedLine struct {
	name, dash string
	samples    [][2]int64
}

// layout draws the line, at most maxPoints points (the highest of each
// run of consecutive samples beyond that).
func (tl timedLine) layout(a axis, color string) (lineView, bool) {
	pts := checker.CapSamples(tl.samples, maxPoints)
	if len(pts) == 0 {
		return lineView{}, false
	}
	var b strings.Builder
	for j, s := range pts {
		if j > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.FormatFloat(a.x(s[0]), 'f', 1, 64))
		b.WriteByte(',')
		b.WriteString(strconv.FormatFloat(a.y(float64(s[1])), 'f', 1, 64))
	}
	return lineView{Name: tl.name, Color: color, Dash: tl.dash, Points: svgPoints(b.String()), N: len(pts)}, true
}

// lagProperties is the JUnit suite's property for the lag alert: how
// many times it would have fired (not a testcase: the alert is an
// observation, not a guarantee).
func lagProperties(res *checker.Result) []junitProperty {
	if res == nil || res.Lag == nil || res.Lag.Alert == nil {
		return nil
	}
	return []junitProperty{{"lag_alert_fired", strconv.Itoa(len(res.Lag.Alerts))}}
}
