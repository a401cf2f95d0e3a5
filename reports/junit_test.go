package reports

import (
	"bytes"
	"encoding/xml"
	"strconv"
	"strings"
	"testing"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/history"
)

// The JUnit elements CI tools read (the Ant/Jenkins XSD subset that GitHub
// test reporters and GitLab parse), declared here independently of the
// writer's types so the test reads the XML as a consumer would.
type (
	xSuites struct {
		XMLName  xml.Name `xml:"testsuites"`
		Tests    int      `xml:"tests,attr"`
		Failures int      `xml:"failures,attr"`
		Errors   int      `xml:"errors,attr"`
		Skipped  int      `xml:"skipped,attr"`
		Suites   []xSuite `xml:"testsuite"`
	}
	xSuite struct {
		Name      string  `xml:"name,attr"`
		Tests     string  `xml:"tests,attr"`
		Failures  string  `xml:"failures,attr"`
		Errors    string  `xml:"errors,attr"`
		Skipped   string  `xml:"skipped,attr"`
		Time      string  `xml:"time,attr"`
		Timestamp string  `xml:"timestamp,attr"`
		Cases     []xCase `xml:"testcase"`
	}
	xCase struct {
		Name      string    `xml:"name,attr"`
		Classname string    `xml:"classname,attr"`
		Time      string    `xml:"time,attr"`
		Failure   *xProblem `xml:"failure"`
		Error     *xProblem `xml:"error"`
		Skipped   *xProblem `xml:"skipped"`
	}
	xProblem struct {
		Message string `xml:"message,attr"`
		Type    string `xml:"type,attr"`
		Body    string `xml:",chardata"`
	}
)

func outcome(c xCase) string {
	switch {
	case c.Failure != nil:
		return "failure"
	case c.Error != nil:
		return "error"
	case c.Skipped != nil:
		return "skipped"
	}
	return "pass"
}

func TestJUnit(t *testing.T) {
	tests := []struct {
		name    string
		run     func() (Record, *checker.Result)
		cases   map[string]string // testcase → outcome; every testcase must be listed
		message map[string]string // testcase → substring of its problem message
		body    map[string]string // testcase → substring of its problem body
		counts  [4]int            // failures, errors, skipped, tests
	}{
		{
			name: "invalid",
			run:  func() (Record, *checker.Result) { f := fixture{drain: history.OK}; return f.run(), f.result() },
			cases: map[string]string{
				"email: no loss": "failure", "email: no duplicate effects": "pass", "email: per-key order": "pass", "email: no gaps": "pass",
				"email: no phantom effects": "pass", "email: no unauthorized effects": "pass", "email: poison dead-lettered": "pass", "email: only poison dead-lettered": "pass",
				"email: poison never applied": "pass", "email: inbox and effects agree": "pass",
				"inventory: no loss": "pass", "inventory: no duplicate effects": "failure", "inventory: per-key order": "pass", "inventory: no gaps": "pass",
				"inventory: no phantom effects": "pass", "inventory: no unauthorized effects": "pass", "inventory: poison dead-lettered": "pass", "inventory: only poison dead-lettered": "pass",
				"inventory: poison never applied": "pass", "inventory: inbox and effects agree": "pass",
			},
			message: map[string]string{"email: no loss": "no loss broken in email: 1 lost (1 after published), e.g. e4; where lost: 1 in the broker, never delivered to email",
				"inventory: no duplicate effects": "1 duplicate-effect (1 after acked), e.g. e3"},
			body:   map[string]string{"inventory: no duplicate effects": "deliver"},
			counts: [4]int{2, 0, 0, 20},
		},
		{
			name: "unknown verdict: guarantees skipped, not passed",
			run: func() (Record, *checker.Result) {
				f := fixture{drain: history.Info, clean: true}
				r := f.run()
				r.Guarantees, _ = checker.ParseGuarantees("at-least-once")
				g := r.Guarantees
				return r, checker.Check(f.ops(), checker.Options{Guarantees: g})
			},
			cases: map[string]string{
				"email: no loss": "skipped", "email: no phantom effects": "skipped", "email: no unauthorized effects": "skipped", "email: poison dead-lettered": "skipped", "email: only poison dead-lettered": "skipped",
				"email: poison never applied": "skipped", "email: inbox and effects agree": "skipped",
				"inventory: no loss": "skipped", "inventory: no phantom effects": "skipped", "inventory: no unauthorized effects": "skipped", "inventory: poison dead-lettered": "skipped", "inventory: only poison dead-lettered": "skipped",
				"inventory: poison never applied": "skipped", "inventory: inbox and effects agree": "skipped",
			},
			message: map[string]string{"inventory: no loss": "unknown: drain"},
			counts:  [4]int{0, 0, 14, 14},
		},
		{
			name: "harness error is an error, not a failure",
			run: func() (Record, *checker.Result) {
				r := fixture{}.run()
				r.HarnessError = "kafka did not start: " + xssScript
				r.Guarantees, _ = checker.ParseGuarantees("at-most-once,subscriptions=inventory")
				return r, nil
			},
			cases: map[string]string{"inventory: no duplicate effects": "skipped", "inventory: no phantom effects": "skipped", "inventory: no unauthorized effects": "skipped", "inventory: poison dead-lettered": "skipped", "inventory: only poison dead-lettered": "skipped",
				"inventory: poison never applied": "skipped", "inventory: inbox and effects agree": "skipped", "harness": "error"},
			message: map[string]string{"harness": "kafka did not start: <script>", "inventory: no duplicate effects": "unknown: harness error"},
			counts:  [4]int{0, 1, 7, 8},
		},
		{
			name: "no subscription: one verdict testcase",
			run: func() (Record, *checker.Result) {
				h := history.History{
					{Process: "producer-0", Type: history.OK, F: history.Commit, Value: history.Value{Event: "e1", Key: "k", Version: 1}},
					{Time: 1, Process: "harness", Type: history.OK, F: history.Drain},
				}
				return Record{Scenario: "bare"}, checker.Check(h, checker.Options{})
			},
			cases:   map[string]string{"verdict": "skipped"},
			message: map[string]string{"verdict": "unknown: "},
			counts:  [4]int{0, 0, 1, 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run, res := tt.run()
			var b bytes.Buffer
			if err := JUnit(&b, run, res); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(b.String(), `<?xml version="1.0" encoding="UTF-8"?>`) {
				t.Errorf("no XML declaration")
			}
			var doc xSuites
			if err := xml.Unmarshal(b.Bytes(), &doc); err != nil {
				t.Fatalf("junit.xml does not parse: %v\n%s", err, b.String())
			}
			if len(doc.Suites) != 1 {
				t.Fatalf("%d testsuites, want 1 per scenario", len(doc.Suites))
			}
			s := doc.Suites[0]
			if s.Name != run.Scenario || s.Time == "" {
				t.Errorf("suite name %q time %q", s.Name, s.Time)
			}
			got := map[string]string{}
			for _, c := range s.Cases {
				if c.Classname != run.Scenario || c.Time == "" || c.Name == "" {
					t.Errorf("testcase %+v lacks name, classname or time", c)
				}
				got[c.Name] = outcome(c)
				p := c.Failure
				if p == nil {
					p = c.Error
				}
				if p == nil {
					p = c.Skipped
				}
				if want, ok := tt.message[c.Name]; ok && (p == nil || !strings.Contains(p.Message, want)) {
					t.Errorf("%s: message %+v, want it to contain %q", c.Name, p, want)
				}
				if want, ok := tt.body[c.Name]; ok && (p == nil || !strings.Contains(p.Body, want)) {
					t.Errorf("%s: body %+v, want it to contain %q", c.Name, p, want)
				}
			}
			for name, want := range tt.cases {
				if got[name] != want {
					t.Errorf("%s: %q, want %q", name, got[name], want)
				}
			}
			if len(got) != len(tt.cases) {
				t.Errorf("testcases %v, want exactly %v", got, tt.cases)
			}
			counts := [4]int{doc.Failures, doc.Errors, doc.Skipped, doc.Tests}
			if counts != tt.counts {
				t.Errorf("testsuites failures/errors/skipped/tests %v, want %v", counts, tt.counts)
			}
			if s.Failures != itoa(tt.counts[0]) || s.Errors != itoa(tt.counts[1]) || s.Skipped != itoa(tt.counts[2]) || s.Tests != itoa(tt.counts[3]) {
				t.Errorf("testsuite counts %s/%s/%s/%s, want %v", s.Failures, s.Errors, s.Skipped, s.Tests, tt.counts)
			}
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
