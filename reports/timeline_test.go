package reports

import (
	"bytes"
	"strings"
	"testing"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/history"
)

// The node time line has a row per checker.Node in its order, each span
// drawn by its state (down, leader, no-leader, fault), the leader changes
// on the service's row; a hostile detail is escaped, and a history
// without server nodes has no time line at all.
func TestNodeTimelineView(t *testing.T) {
	res := fixture{drain: history.OK, clean: true}.result()
	if v := newView(fixture{drain: history.OK, clean: true}.run(), res); v.Timeline != nil {
		t.Fatalf("a time line without nodes: %+v", v.Timeline)
	}
	zero := 0
	res.Nodes = []checker.Node{
		{Name: "kafka", Service: "kafka", LeaderChanges: 2, Spans: []checker.NodeSpan{
			{State: checker.NodeNoLeader, StartNS: 2e9, EndNS: 3e9, Detail: "timeout"}}},
		{Name: "kafka-1", Service: "kafka", Spans: []checker.NodeSpan{
			{State: checker.NodeLeader, StartNS: 0, EndNS: 2e9},
			{State: "kill", StartNS: 1e9, EndNS: 4e9, Detail: "at 1s: kill broker:leader " + xssScript, Fault: &zero},
			{State: checker.NodeDown, StartNS: 1.05e9, EndNS: 4e9}}},
	}
	v := newView(fixture{drain: history.OK, clean: true}.run(), res)
	tl := v.Timeline
	if tl == nil || len(tl.Rows) != 2 {
		t.Fatalf("time line %+v, want 2 rows", tl)
	}
	if tl.Rows[0].Label != "kafka (2 leader changes)" || tl.Rows[1].Label != "kafka-1" || !tl.Rows[1].Leader || tl.Rows[0].Leader {
		t.Errorf("rows %q %v, %q %v", tl.Rows[0].Label, tl.Rows[0].Leader, tl.Rows[1].Label, tl.Rows[1].Leader)
	}
	var classes []string
	for _, r := range tl.Rows {
		for _, s := range r.Spans {
			classes = append(classes, s.Class)
			if s.X < tl.X0 || s.X+s.W > tl.X1+1.5 || s.Y < r.Y || s.Y+s.H > r.Y+rowH {
				t.Errorf("span %+v outside its row at %v", s, r.Y)
			}
		}
	}
	if got := strings.Join(classes, " "); got != "no-leader leader fault down" {
		t.Errorf("span classes %q", got)
	}
	var b bytes.Buffer
	if err := HTML(&b, fixture{drain: history.OK, clean: true}.run(), res); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if m := rawScript.FindString(page); m != "" {
		t.Errorf("raw %q in the page", m)
	}
	if !strings.Contains(page, "<h2>Nodes</h2>") || !strings.Contains(page, "kill broker:leader &lt;script&gt;alert(") {
		t.Errorf("node time line missing or not escaped:\n%s", grepLines(page, "kill broker"))
	}
}
