package reports

import (
	"cmp"
	"encoding/xml"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/deliverycheck/deliverycheck/checker"
)

// The JUnit XML written by [JUnit], in the subset GitHub Actions test
// reporters, GitLab and Jenkins all read: testsuites > testsuite >
// testcase > failure | error | skipped.
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Time     string       `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name       string          `xml:"name,attr"`
	Tests      int             `xml:"tests,attr"`
	Failures   int             `xml:"failures,attr"`
	Errors     int             `xml:"errors,attr"`
	Skipped    int             `xml:"skipped,attr"`
	Time       string          `xml:"time,attr"`
	Timestamp  string          `xml:"timestamp,attr,omitempty"`
	Properties []junitProperty `xml:"properties>property"`
	Cases      []junitCase     `xml:"testcase"`
	SystemOut  string          `xml:"system-out,omitempty"`
}

type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitProblem `xml:"failure,omitempty"`
	Error     *junitProblem `xml:"error,omitempty"`
	Skipped   *junitProblem `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitProblem struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr,omitempty"`
	Body    string `xml:",chardata"`
}

// JUnit writes junit.xml for CI: one testsuite for the scenario and one
// testcase per promised guarantee per subscription, named
// "<subscription>: <guarantee>" (e.g. "inventory: no loss").
//
//   - A broken guarantee is a <failure> whose message is the anomaly
//     summary and whose body lists example event ids and the first
//     example's lineage.
//   - A guarantee the run could not establish (verdict unknown: drain or
//     final read incomplete) is <skipped> with a message starting
//     "unknown:", so CI shows it as not tested rather than passed; the exit
//     code (2) is what fails the job.
//   - A harness error is one extra testcase "harness" with an <error>,
//     never a <failure>: the pipeline did not break a promise, the test
//     rig broke. Guarantees it left unproven are skipped.
//   - A run with no subscription to judge gets one testcase "verdict" that
//     carries the verdict the same way.
//
// Guarantees not promised are not testcases; their findings are listed in
// the suite's system-out.
func JUnit(w io.Writer, run Record, res *checker.Result) error {
	b, err := xml.MarshalIndent(junitReport(run, res), "", "  ")
	if err != nil {
		return fmt.Errorf("reports: junit: %w", err)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

func junitReport(run Record, res *checker.Result) junitSuites {
	name := run.Scenario
	if name == "" {
		name = "deliverycheck"
	}
	secs := "0"
	if !run.Started.IsZero() && run.Finished.After(run.Started) {
		secs = strconv.FormatFloat(run.Finished.Sub(run.Started).Seconds(), 'f', 3, 64)
	}
	s := junitSuite{Name: name, Time: secs}
	if !run.Started.IsZero() {
		s.Timestamp = run.Started.UTC().Format("2006-01-02T15:04:05")
	}
	judged := Judge(run, res)
	verdict := judged.Validity
	s.Properties = []junitProperty{{"verdict", string(verdict)}, {"seed", strconv.FormatInt(run.Seed, 10)}}
	if run.Command != "" {
		s.Properties = append(s.Properties, junitProperty{"command", run.Command})
	}
	if run.Environment.Runtime != "" {
		s.Properties = append(s.Properties, junitProperty{"runtime", run.Environment.Runtime})
	}
	for _, k := range slices.Sorted(maps.Keys(run.Environment.Servers)) {
		s.Properties = append(s.Properties, junitProperty{"server." + k, run.Environment.Servers[k]})
	}

	why := "the facts were not established"
	if len(judged.Reasons) > 0 {
		why = strings.Join(judged.Reasons, "; ")
	}
	anomalies := map[[2]string]*checker.Anomaly{}
	if res != nil {
		for i := range res.Anomalies {
			a := &res.Anomalies[i]
			// A memory finding's check is named after its process, a
			// retry storm's after every consumer (retries.go).
			anomalies[[2]string{string(a.Kind), cmp.Or(a.Subscription, a.Process, runWideCheck(a.Kind))}] = a
		}
	}
	var out []string
	checks := Checks(run, res)
	for _, c := range checks {
		if !c.Promised {
			if c.Count > 0 {
				out = append(out, fmt.Sprintf("allowed (not promised): %d %s in %s, e.g. %s", c.Count, c.Kind, c.Subscription, strings.Join(c.Events, ", ")))
			}
			continue
		}
		tc := junitCase{Name: c.Subscription + ": " + c.Guarantee, Classname: name, Time: "0"}
		switch c.Status {
		case Broken:
			tc.Failure = &junitProblem{Type: string(c.Kind), Message: failureMessage(c, anomalies[[2]string{string(c.Kind), c.Subscription}]), Body: failureBody(c, anomalies[[2]string{string(c.Kind), c.Subscription}])}
		case NotEstablished:
			tc.Skipped = &junitProblem{Message: "unknown: " + why}
		}
		s.Cases = append(s.Cases, tc)
	}
	if run.HarnessError != "" {
		s.Cases = append(s.Cases, junitCase{Name: "harness", Classname: name, Time: "0",
			Error: &junitProblem{Type: "harness-error", Message: oneLine(run.HarnessError), Body: run.HarnessError}})
	} else if len(s.Cases) == 0 {
		tc := junitCase{Name: "verdict", Classname: name, Time: "0"}
		switch verdict {
		case checker.Invalid:
			tc.Failure = &junitProblem{Type: "invalid", Message: "invalid: " + why}
		case checker.Unknown:
			tc.Skipped = &junitProblem{Message: "unknown: " + why}
		}
		s.Cases = append(s.Cases, tc)
	}
	for _, tc := range s.Cases {
		s.Tests++
		switch {
		case tc.Failure != nil:
			s.Failures++
		case tc.Error != nil:
			s.Errors++
		case tc.Skipped != nil:
			s.Skipped++
		}
	}
	if res != nil {
		out = append(out, summary(run, res, checks))
	}
	s.SystemOut = strings.Join(out, "\n")
	return junitSuites{Name: "deliverycheck", Tests: s.Tests, Failures: s.Failures, Errors: s.Errors, Skipped: s.Skipped, Time: s.Time, Suites: []junitSuite{s}}
}

func failureMessage(c Check, a *checker.Anomaly) string {
	msg := fmt.Sprintf("%s broken in %s: %d %s", c.Guarantee, c.Subscription, c.Count, c.Kind)
	if a != nil && len(a.Boundaries) > 0 {
		var bs []string
		for _, b := range a.Boundaries {
			bs = append(bs, fmt.Sprintf("%d after %s", b.Count, b.Boundary))
		}
		msg += " (" + strings.Join(bs, ", ") + ")"
	}
	if len(c.Events) > 0 {
		msg += ", e.g. " + strings.Join(c.Events[:min(len(c.Events), 3)], ", ")
	}
	if a != nil {
		if st := a.StageSummary(); st != "" {
			msg += "; where lost: " + st
		}
		if d := resourceDetails(a); len(d) > 0 && eventless(a.Kind) {
			msg += ": " + d[0]
		}
	}
	return msg
}

// failureBody lists the example events and the first example's lineage,
// one op per line, so a CI log is enough to start debugging.
func failureBody(c Check, a *checker.Anomaly) string {
	var b strings.Builder
	if a != nil && eventless(a.Kind) {
		// No event to trace: each finding in words.
		for _, d := range resourceDetails(a) {
			fmt.Fprintf(&b, "%s\n", d)
		}
		return b.String()
	}
	fmt.Fprintf(&b, "events: %s\n", strings.Join(c.Events, ", "))
	if a == nil || len(a.Examples) == 0 {
		return b.String()
	}
	ex := newExampleView(a.Examples[0], a.Subscription)
	fmt.Fprintf(&b, "lineage of %s (key %s v%d):\n", ex.Event, ex.Key, ex.Version)
	for _, st := range ex.Steps {
		fmt.Fprintf(&b, "  %s %-12s %-6s %s", st.Time, st.Stage, st.Type, st.Process)
		for _, x := range []string{st.Consumer, st.Where} {
			if x != "" {
				b.WriteString(" " + x)
			}
		}
		if st.Attempt != "" {
			b.WriteString(" attempt " + st.Attempt)
		}
		if st.Note != "" {
			b.WriteString(" (" + st.Note + ")")
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// JUnitFile writes junit.xml to path (through a temporary file).
func JUnitFile(path string, run Record, res *checker.Result) error {
	if err := writeFile(path, func(w io.Writer) error { return JUnit(w, run, res) }); err != nil {
		return fmt.Errorf("reports: %w", err)
	}
	return nil
}
