package reports

import (
	"bytes"
	"encoding/xml"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/checker"
)

// The backlog reaches every output: the report's section (table, the
// consumers' window, a plot with the rate timeline shaded), a junit
// testcase when max-backlog-age is promised, and results.json (valid
// against the schema).
func TestBacklogReported(t *testing.T) {
	sch := compileSchema(t)
	h := resourcesHistory(xssScript) // e2, e3 committed at 2s, 3s wait until 9s
	for _, tc := range []struct {
		name, guarantees, junit string
		verdict                 checker.Validity
	}{
		{"not promised", "effectively-once", "", checker.Valid},
		{"promised and broken", "effectively-once,max-backlog-age=5s", "failure", checker.Invalid},
		{"promised and held", "effectively-once,max-backlog-age=10s", "pass", checker.Valid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := checker.ParseGuarantees(tc.guarantees)
			if err != nil {
				t.Fatal(err)
			}
			res := checker.Check(h, checker.Options{Guarantees: g})
			if res.Valid != tc.verdict {
				t.Fatalf("verdict %s %q, want %s", res.Valid, res.Reasons, tc.verdict)
			}
			run := Record{Scenario: "backlog", Guarantees: g, Prefetch: 32, ConsumerBatch: 1,
				Load: []LoadStep{{AtNS: int64(1500 * time.Millisecond), Rate: 150, ForNS: int64(2 * time.Second)}}}
			v := newView(run, res)
			b := v.Backlog
			if b == nil || len(b.Rows) != 1 || b.Rows[0].MaxAge != "7s" || b.Rows[0].MaxAgeAt != "9.000s" || b.Rows[0].MaxPending != 2 || b.Load != "150/s from 1.500s to 3.500s" {
				t.Fatalf("backlog %+v", b)
			}
			if len(b.Plots) != 1 || len(b.Plots[0].Y2Ticks) == 0 || !bandLabelled(b.Plots[0], "load 150/s") {
				t.Errorf("plots %+v", b.Plots)
			}
			var page bytes.Buffer
			if err := HTML(&page, run, res); err != nil {
				t.Fatal(err)
			}
			_, section, ok := strings.Cut(page.String(), `<h2 id="backlog">Backlog</h2>`)
			if !ok {
				t.Fatal("the page has no Backlog section")
			}
			section, _, _ = strings.Cut(section, "<h2")
			for _, s := range []string{"7s", "150/s from 1.500s to 3.500s", `<figure id="backlog-0">`} {
				if !strings.Contains(section, s) {
					t.Errorf("the section lacks %q:\n%s", s, section)
				}
			}
			var j bytes.Buffer
			if err := JUnit(&j, run, res); err != nil {
				t.Fatal(err)
			}
			var suites xSuites
			if err := xml.Unmarshal(j.Bytes(), &suites); err != nil {
				t.Fatal(err)
			}
			var found *xCase
			for i, c := range suites.Suites[0].Cases {
				if c.Name == "inventory: "+backlogGuarantee {
					found = &suites.Suites[0].Cases[i]
				}
			}
			switch {
			case tc.junit == "" && found != nil:
				t.Errorf("a testcase for max-backlog-age, not promised: %+v", found)
			case tc.junit != "" && found == nil:
				t.Errorf("no testcase for max-backlog-age")
			case found != nil && outcome(*found) != tc.junit:
				t.Errorf("testcase %s, want %s", outcome(*found), tc.junit)
			case found != nil && found.Failure != nil && !strings.Contains(found.Failure.Message, "oldest unapplied event waited 7s"):
				t.Errorf("failure %+v", found.Failure)
			}
			var out bytes.Buffer
			if err := WriteResultsJSON(&out, run, res); err != nil {
				t.Fatal(err)
			}
			validate(t, sch, out.Bytes())
			for _, s := range []string{`"backlog": [`, `"oldest_age": [`, `"load": [`} {
				if !strings.Contains(out.String(), s) {
					t.Errorf("results.json lacks %s", s)
				}
			}
		})
	}
}

func bandLabelled(p plotView, label string) bool {
	for _, b := range p.Bands {
		if b.Label == label {
			return true
		}
	}
	return false
}
