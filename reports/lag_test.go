package reports

import (
	"bytes"
	"encoding/xml"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/checker"
)

// A subscription's lag chart has its total, each partition, the
// threshold and a band where the alert fired; the section says it in
// words; junit.xml counts the firings in a suite property.
func TestLagReport(t *testing.T) {
	ms := int64(time.Millisecond)
	res := lagResult()
	l := res.Lag
	l.Totals = []checker.LagSeries{{Subscription: "inventory", Target: "run.inventory", Max: 20, MaxNS: 500 * ms,
		Samples: [][2]int64{{ms, 7}, {501 * ms, 20}, {1001 * ms, 0}}}}
	l.Series[0].Subscription, l.Series[1].Subscription = "inventory", "inventory"
	l.Alert = &checker.LagAlert{Threshold: 10}
	l.Alerts = []checker.LagFiring{{Subscription: "inventory", Target: "run.inventory", PendingNS: 501 * ms, FiredNS: 501 * ms, ResolvedNS: 1001 * ms, Peak: 20}}
	run := Record{Scenario: "lagging", LagAlert: l.Alert}

	ps := lagPlots(run, res)
	if len(ps) != 1 {
		t.Fatalf("%d lag plots, want 1", len(ps))
	}
	p := ps[0]
	var names []string
	for _, ln := range p.Lines {
		names = append(names, ln.Name)
	}
	if want := []string{"total", "partition 0", "partition 1", "alert threshold (> 10)"}; !slices.Equal(names, want) {
		t.Errorf("lines %q, want %q", names, want)
	}
	if len(p.Alerts) != 1 || p.ID != "lag-0" || p.Label != "Consumer lag" {
		t.Errorf("plot %s (%s): alerts %+v", p.ID, p.Label, p.Alerts)
	}
	l.DLQ[0].Subscription = "inventory"
	if ln := lagPlots(run, res)[0].Lines; len(ln) != 5 || ln[3].Name != "dead-letter queue" {
		t.Errorf("with inventory's dead-letter queue: lines %+v", ln)
	}
	l.DLQ[0].Subscription = "email"

	v := newLagView(res)
	if !v.Fired || len(v.Alert) != 1 || !strings.Contains(v.Alert[0], "would have fired at 0.501s and resolved at 1.001s on inventory (peak 20)") {
		t.Errorf("alert lines %q", v.Alert)
	}
	if len(v.Rows) != 3 || v.Rows[0].Chart != "lag-0" || v.Rows[2].Kind != "dead-letter queue" || v.Rows[2].Chart != "" {
		t.Errorf("rows %+v", v.Rows)
	}

	var b bytes.Buffer
	if err := JUnit(&b, run, res); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Suites []struct {
			Properties []struct {
				Name  string `xml:"name,attr"`
				Value string `xml:"value,attr"`
			} `xml:"properties>property"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	fired := ""
	for _, p := range doc.Suites[0].Properties {
		if p.Name == "lag_alert_fired" {
			fired = p.Value
		}
	}
	if fired != "1" {
		t.Errorf("lag_alert_fired %q, want 1:\n%s", fired, b.String())
	}

	// Without an alert: no property, and the section says none was
	// declared.
	l.Alert, l.Alerts = nil, nil
	if props := lagProperties(res); props != nil {
		t.Errorf("properties without an alert: %v", props)
	}
	if v := newLagView(res); v.Fired || !strings.HasPrefix(v.Alert[0], "No lag alert was declared") {
		t.Errorf("without an alert: %+v", v)
	}
}
