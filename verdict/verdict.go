// Package verdict is the one place a run's verdict is decided. The
// checker judges a history; a run adds what the history cannot say (the
// harness failed, a component crash-looped) and what the scenario
// expected. Every output of a run (the exit code, the printed line, a
// suite row, results.json, junit.xml, report.html) reads one [Verdict],
// so none of them can disagree with another.
package verdict

import (
	"fmt"

	"github.com/deliverycheck/deliverycheck/checker"
)

// Expectation is what a scenario expects of its own run: a correct
// pipeline valid, a known-bad one invalid with its anomaly fatal.
type Expectation struct {
	// Verdict is checker.Valid or checker.Invalid; "" means valid.
	Verdict checker.Validity `json:"verdict" yaml:"verdict"`
	// Anomaly is the fatal anomaly an invalid run must show; "" states
	// none.
	Anomaly checker.Kind `json:"anomaly,omitempty" yaml:"anomaly,omitempty"`
}

// Want is the verdict expected, "" read as valid.
func (e Expectation) Want() checker.Validity {
	if e.Verdict == "" {
		return checker.Valid
	}
	return e.Verdict
}

// String reads "invalid with duplicate-effect", or "valid".
func (e Expectation) String() string {
	if e.Anomaly == "" {
		return string(e.Want())
	}
	return string(e.Want()) + " with " + string(e.Anomaly)
}

// Label is the expectation as the catalogue lists it: "invalid (lost)",
// "valid", or "" when the scenario states none.
func (e Expectation) Label() string {
	if e.Anomaly == "" {
		return string(e.Verdict)
	}
	return string(e.Verdict) + " (" + string(e.Anomaly) + ")"
}

// Verdict is a run's verdict and everything it rests on.
type Verdict struct {
	// Validity is the run's verdict: the checker's, except that anything
	// the run itself knows went wrong (Problems) turns valid into
	// unknown. An anomaly the checker found stays invalid: it is real
	// whatever else happened.
	Validity checker.Validity `json:"verdict"`
	// Reasons say why the verdict is not valid: the checker's reasons,
	// then the run's problems.
	Reasons []string `json:"reasons,omitempty"`
	// Checked says a history was checked. Without one the run is a
	// harness error (exit code 4), whatever it expected.
	Checked bool `json:"checked"`
	// Established says the checker established the facts (drain and final
	// read complete, something exercised) and the run had no problem: an
	// absence of findings then proves the guarantee held.
	Established bool `json:"established"`
	// Expected is the scenario's expectation, nil when it states none.
	Expected *Expectation `json:"expected,omitempty"`
	// Met says the run produced what Expected asks (false without an
	// expectation).
	Met bool `json:"met"`
	// Unmet says why Met is false, for a reader.
	Unmet string `json:"unmet,omitempty"`
}

// Of decides the verdict of a run: res is the checker's result (nil when
// there was no history to check); problems are what the run itself saw go
// wrong (a harness error), each of which keeps the verdict from being
// valid; explanations say what may lie behind a verdict that is not valid
// (a crash-looping component) and are among its reasons only then;
// expected is the scenario's expectation (nil: none).
func Of(res *checker.Result, problems, explanations []string, expected *Expectation) Verdict {
	v := Verdict{Validity: checker.Unknown, Expected: expected}
	if res != nil {
		v.Checked = true
		v.Validity = res.Valid
		v.Reasons = append(v.Reasons, res.Reasons...)
		v.Established = res.Valid != checker.Unknown && factsEstablished(res)
	}
	if len(problems) > 0 {
		v.Established = false
		if v.Validity == checker.Valid {
			v.Validity = checker.Unknown
		}
		v.Reasons = append(v.Reasons, problems...)
	}
	if v.Validity != checker.Valid {
		v.Reasons = append(v.Reasons, explanations...)
	}
	if res == nil && len(v.Reasons) == 0 {
		v.Reasons = []string{"no history was checked"}
	}
	if expected != nil {
		v.Met, v.Unmet = expected.met(v, res)
	}
	return v
}

// factsEstablished reports whether the checker could establish the facts
// an absence of findings rests on.
func factsEstablished(res *checker.Result) bool {
	return res.Facts.Drain == "complete" && res.Facts.FinalRead == "complete"
}

// met reports whether v is what e expects, and why not.
func (e Expectation) met(v Verdict, res *checker.Result) (bool, string) {
	if v.Validity != e.Want() {
		return false, fmt.Sprintf("verdict %s, want %s", v.Validity, e.Want())
	}
	if e.Anomaly == "" {
		return true, ""
	}
	if res != nil {
		for _, a := range res.Anomalies {
			if a.Kind == e.Anomaly && a.Fatal && a.Count > 0 {
				return true, ""
			}
		}
	}
	return false, fmt.Sprintf("invalid, but without a fatal %s", e.Anomaly)
}

// ExitHarness is the exit code of a run that checked nothing.
const ExitHarness = 4

// ExitCode is the process exit code of the verdict: 0 valid, 1 invalid,
// 2 unknown, 4 when nothing was checked (the harness failed first).
func (v Verdict) ExitCode() int {
	if !v.Checked {
		return ExitHarness
	}
	return v.Validity.ExitCode()
}
