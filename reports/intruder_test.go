package reports

import (
	"bytes"
	"encoding/xml"
	"strings"
	"testing"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/history"
)

// The intruder's messages reach every output: the report's Intruder
// section, the unauthorized effect as an anomaly and a junit failure,
// results.json's intruder section (valid against the schema); and a run
// whose subscriptions reject them all is valid.
func TestIntruderReported(t *testing.T) {
	sch := compileSchema(t)
	tests := []struct {
		name    string
		f       fixture
		verdict checker.Validity
		rows    []intruderSubRow
		junit   string // outcome of "email: no unauthorized effects"
		anomaly bool   // unauthorized-effect in email
	}{
		{
			// Not clean: e3 twice and e4 lost too; only the intruder's part is asserted.
			name: "email applies the accepted message", f: fixture{drain: history.OK, intruder: true}, verdict: checker.Invalid,
			rows: []intruderSubRow{
				{Kind: "type", Subscription: "email", Applied: 1, Class: "bad"},
				{Kind: "type", Subscription: "inventory", Rejected: 1, Reasons: `source "/orders" may not emit "AdminGranted"`},
			},
			junit: "failure", anomaly: true,
		},
		{
			name: "both reject it", f: fixture{drain: history.OK, clean: true, intruder: true}, verdict: checker.Valid,
			rows: []intruderSubRow{
				{Kind: "type", Subscription: "email", Rejected: 1, Reasons: `source "/orders" may not emit "AdminGranted"`},
				{Kind: "type", Subscription: "inventory", Rejected: 1, Reasons: `source "/orders" may not emit "AdminGranted"`},
			},
			junit: "pass",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			run, res := tc.f.run(), tc.f.result()
			if res.Valid != tc.verdict {
				t.Fatalf("verdict %s (%q), want %s", res.Valid, res.Reasons, tc.verdict)
			}
			v := newView(run, res)
			if v.Intruder == nil {
				t.Fatal("no Intruder section")
			}
			if k := v.Intruder.Kinds; len(k) != 1 || k[0].Sent != 2 || k[0].Refused != 1 || k[0].Accepted != 1 || k[0].Refusals != "ACCESS_REFUSED" {
				t.Errorf("kinds %+v", k)
			}
			if len(v.Intruder.Subscriptions) != len(tc.rows) {
				t.Fatalf("rows %+v, want %+v", v.Intruder.Subscriptions, tc.rows)
			}
			for i, row := range v.Intruder.Subscriptions {
				if row != tc.rows[i] {
					t.Errorf("row %d = %+v, want %+v", i, row, tc.rows[i])
				}
			}
			found := false
			for _, a := range v.Anomalies {
				if a.Kind == string(checker.UnauthorizedEffect) && a.Subscription == "email" && a.Fatal {
					found = true
					if len(a.Examples) == 0 || len(a.Examples[0].Chain) == 0 || a.Examples[0].Chain[0].Stage != "intrude" {
						t.Errorf("the example's lineage does not begin with the intrude op: %+v", a.Examples)
					}
				}
			}
			if found != tc.anomaly {
				t.Errorf("unauthorized-effect in email shown: %v, want %v", found, tc.anomaly)
			}
			var page bytes.Buffer
			if err := HTML(&page, run, res); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(page.String(), `<h2 id="intruder">Intruder</h2>`) {
				t.Error("the page has no Intruder section")
			}
			var j bytes.Buffer
			if err := JUnit(&j, run, res); err != nil {
				t.Fatal(err)
			}
			var suites xSuites
			if err := xml.Unmarshal(j.Bytes(), &suites); err != nil {
				t.Fatal(err)
			}
			got := ""
			for _, c := range suites.Suites[0].Cases {
				if c.Name == "email: no unauthorized effects" {
					got = outcome(c)
					if c.Failure != nil && (c.Failure.Type != string(checker.UnauthorizedEffect) || !strings.Contains(c.Failure.Body, "intrude")) {
						t.Errorf("failure %+v", c.Failure)
					}
				}
			}
			if got != tc.junit {
				t.Errorf("email: no unauthorized effects: %q, want %q", got, tc.junit)
			}
			var b bytes.Buffer
			if err := WriteResultsJSON(&b, run, res); err != nil {
				t.Fatal(err)
			}
			validate(t, sch, b.Bytes())
			if !strings.Contains(b.String(), `"intruder": {`) {
				t.Error("results.json has no intruder section")
			}
		})
	}
}

// The hostile fixture's intruder strings (its event id, kind, refusal
// and rejection reason) are shown in the Intruder section, escaped, and
// inert in junit.xml.
func TestIntruderHostileEscaped(t *testing.T) {
	f := fixture{drain: history.OK, hostile: true}
	run, res := f.run(), f.result()
	if res.Intruder == nil || len(res.Intruder.Kinds) != 1 || res.Intruder.Kinds[0].Kind != xssAttr {
		t.Fatalf("the hostile fixture has no hostile intruder: %+v", res.Intruder)
	}
	var b bytes.Buffer
	if err := HTML(&b, run, res); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	_, section, ok := strings.Cut(page, `<h2 id="intruder">Intruder</h2>`)
	if !ok {
		t.Fatal("no Intruder section")
	}
	section, _, _ = strings.Cut(section, "<h2")
	for _, s := range []string{
		"&#34;&gt;&lt;img src=x onerror=alert(1)&gt;",                    // the kind, and the refusal
		"&lt;script&gt;alert(&#34;script&#34;)&lt;/script&gt;email&#39;", // the reason, and the subscription
	} {
		if !strings.Contains(section, s) {
			t.Errorf("the Intruder section does not show %q escaped:\n%s", s, section)
		}
	}
	for _, re := range []interface{ FindString(string) string }{rawScript, rawHandler, rawImgOrSVG} {
		if m := re.FindString(page); m != "" {
			t.Errorf("raw %q in the page", m)
		}
	}
	if !strings.Contains(page, "intruder-&lt;script&gt;") {
		t.Error("the unauthorized effect's hostile event id is not shown escaped")
	}
	var j bytes.Buffer
	if err := JUnit(&j, run, res); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(j.String(), "<script") {
		t.Error("raw <script in junit.xml")
	}
	var suites xSuites
	if err := xml.Unmarshal(j.Bytes(), &suites); err != nil {
		t.Fatalf("junit.xml does not parse: %v", err)
	}
}
