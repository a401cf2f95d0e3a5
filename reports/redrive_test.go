package reports

import (
	"bytes"
	"encoding/xml"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deliverycheck/deliverycheck/checker"
)

// checkGolden checks one of the checker's golden redrive histories.
func checkGolden(t *testing.T, name string) *checker.Result {
	t.Helper()
	g, err := checker.ParseGuarantees("effectively-once,subscriptions=email")
	if err != nil {
		t.Fatal(err)
	}
	res, err := checker.CheckFiles([]string{filepath.Join("..", "checker", "testdata", name+".jsonl")}, checker.Options{Guarantees: g})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A redrive reaches every output: the report's table (a bad row where it
// left dead letters behind or went over its rate), a junit testcase per
// redriven subscription for each of its two guarantees, with the
// finding in words, and results.json (valid against the schema). A run
// without a redrive has neither testcase.
func TestRedriveReported(t *testing.T) {
	sch := compileSchema(t)
	for _, tc := range []struct {
		name, class string
		junit       map[string]string
		message     string
	}{
		{"redrive-recovered", "", map[string]string{"email: dead letters recovered by redrive": "pass", "email: redrive within its rate": "pass"}, ""},
		{"redrive-unrecovered", "bad", map[string]string{"email: dead letters recovered by redrive": "failure", "email: redrive within its rate": "pass"}, "2 unrecovered"},
		{"redrive-rate", "bad", map[string]string{"email: dead letters recovered by redrive": "pass", "email: redrive within its rate": "failure"}, "3 redrives in the 1s from"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := checkGolden(t, tc.name)
			run := Record{Scenario: tc.name, Guarantees: res.Guarantees}
			v := newView(run, res)
			if len(v.Redrive) != 1 || v.Redrive[0].Class != tc.class {
				t.Errorf("redrive rows %+v, want one of class %q", v.Redrive, tc.class)
			}
			var page bytes.Buffer
			if err := HTML(&page, run, res); err != nil {
				t.Fatal(err)
			}
			if _, section, ok := strings.Cut(page.String(), `<h2 id="redrive">Dead-letter redrive</h2>`); !ok {
				t.Error("the page has no Dead-letter redrive section")
			} else if section, _, _ = strings.Cut(section, "<h2"); !strings.Contains(section, "<td>email</td>") {
				t.Errorf("the section lacks email's row:\n%s", section)
			}
			var j bytes.Buffer
			if err := JUnit(&j, run, res); err != nil {
				t.Fatal(err)
			}
			var suites xSuites
			if err := xml.Unmarshal(j.Bytes(), &suites); err != nil {
				t.Fatal(err)
			}
			for _, c := range suites.Suites[0].Cases {
				want, ok := tc.junit[c.Name]
				if !ok {
					continue
				}
				if o := outcome(c); o != want {
					t.Errorf("%s: %s, want %s", c.Name, o, want)
				}
				if want == "failure" && !strings.Contains(c.Failure.Message, tc.message) {
					t.Errorf("%s: failure %q, want it to say %q", c.Name, c.Failure.Message, tc.message)
				}
				delete(tc.junit, c.Name)
			}
			if len(tc.junit) > 0 {
				t.Errorf("no testcases %v", tc.junit)
			}
			var b bytes.Buffer
			if err := WriteResultsJSON(&b, run, res); err != nil {
				t.Fatal(err)
			}
			validate(t, sch, b.Bytes())
		})
	}
	for _, c := range Checks(Record{}, checkGolden(t, "broker-dlq-lost")) {
		if c.Kind == checker.Unrecovered || c.Kind == checker.RedriveRate {
			t.Errorf("a run without a redrive has the check %q", c.Guarantee)
		}
	}
}
