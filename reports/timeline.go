package reports

import (
	"fmt"
	"strconv"

	"github.com/deliverycheck/deliverycheck/checker"
)

// Node time line geometry: one row per checker.Node, over the plots'
// time span, with room on the left for the rows' names.
const (
	rowH         = 24
	labelW       = 200
	maxNodeSpans = 400 // spans drawn per row; results.json has every one
)

// timelineView is the per-node time line, fully laid out.
type timelineView struct {
	W, H   int
	X0, X1 float64
	Y1     float64 // the bottom of the last row, where the time axis is
	Rows   []timelineRow
	XTicks []tickView
	// Note says what was left out, when something was.
	Note string
}

type timelineRow struct {
	Label  string // node name, and the leader changes on a service's row
	Y      float64
	Spans  []spanView
	Leader bool // the row's node led at some point
}

type spanView struct {
	X, Y, W, H float64
	Class      string // down, leader, no-leader, fault
	Title      string // hover text
}

// nodeTimeline lays out res's node time line, nil when the history names no
// server node.
func nodeTimeline(res *checker.Result) *timelineView {
	if len(res.Nodes) == 0 {
		return nil
	}
	bucketNs := max(res.Series.BucketNanos, 1)
	a := newAxis(int64(max(res.Series.Buckets, 1)) * bucketNs)
	a.x0 = labelW
	tv := &timelineView{W: plotW, X0: a.x0, X1: a.x1}
	y := float64(padTop)
	cut := 0
	for _, n := range res.Nodes {
		row := timelineRow{Label: n.Name, Y: y}
		if n.LeaderChanges > 0 {
			row.Label += " (" + strconv.Itoa(n.LeaderChanges) + " leader change"
			if n.LeaderChanges > 1 {
				row.Label += "s"
			}
			row.Label += ")"
		}
		for i, s := range n.Spans {
			if i == maxNodeSpans {
				cut += len(n.Spans) - i
				break
			}
			x0, x1 := a.x(s.StartNS), a.x(s.EndNS)
			sv := spanView{X: x0, W: max(x1-x0, 1.5)}
			what := s.State
			switch s.State {
			case checker.NodeDown:
				sv.Class, sv.Y, sv.H = "down", y+5, 10
			case checker.NodeLeader:
				sv.Class, sv.Y, sv.H = "leader", y+16, 4
				row.Leader = true
				what = "leader"
			case checker.NodeNoLeader:
				sv.Class, sv.Y, sv.H = "no-leader", y+16, 4
				what = "no leader"
			default:
				sv.Class, sv.Y, sv.H = "fault", y+2, 16
				what = "fault " + s.State
			}
			sv.Title = fmt.Sprintf("%s %s: %s → %s", n.Name, what, fmtNs(s.StartNS), fmtNs(s.EndNS))
			if s.Detail != "" {
				sv.Title += " " + s.Detail
			}
			row.Spans = append(row.Spans, sv)
		}
		tv.Rows = append(tv.Rows, row)
		y += rowH
	}
	tv.H = int(y) + padBottom
	tv.Y1 = y
	tv.XTicks = timeTicks(a)
	if cut > 0 {
		tv.Note = fmt.Sprintf("%d spans not drawn (results.json has every one).", cut)
	}
	return tv
}
