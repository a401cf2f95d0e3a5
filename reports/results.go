package reports

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/verdict"
)

// SchemaVersion is the version of the results.json envelope
// (docs/results.schema.json). It changes only when a field is removed,
// renamed or changes meaning; new optional fields keep the version, so a
// dashboard that reads version 1 keeps working.
const SchemaVersion = 1

// Results is results.json in a run folder: the checker's own result,
// unchanged (docs/results.md), wrapped with what a dashboard needs beside
// it: a schema version, the top-level verdict, the run record, and one
// check per promised guarantee per subscription.
type Results struct {
	SchemaVersion int `json:"schema_version"`
	// Verdict is the run's verdict ([verdict.Of]): the checker's, except
	// that a harness error or another problem of the run turns valid into
	// unknown (a run that broke down proves nothing held, but an anomaly
	// it found is still real).
	Verdict checker.Validity `json:"verdict"`
	// Reasons say why the verdict is not valid: the checker's, then the
	// run's problems.
	Reasons []string `json:"reasons"`
	// Expected is the scenario's expectation, when it states one, and
	// ExpectationMet whether the run met it.
	Expected       *verdict.Expectation `json:"expected,omitempty"`
	ExpectationMet *bool                `json:"expectation_met,omitempty"`
	// Summary is the verdict banner's sentence: what held and what did not.
	Summary string  `json:"summary"`
	Run     *Record `json:"run"`
	// Checks has every guarantee per subscription, promised or not, in the
	// order of the report's guarantees table.
	Checks []Check `json:"checks"`
	// Result is the checker's result; null when the harness failed before
	// there was a history to check.
	Result *checker.Result `json:"result"`
}

// Status is what a run observed of one guarantee in one subscription.
type Status string

// The statuses.
const (
	Held    Status = "held"    // no finding, and the facts were established
	Broken  Status = "broken"  // promised, and findings prove it was broken
	Allowed Status = "allowed" // not promised; findings are only reported
	// NotEstablished: no finding, but the drain or final read did not
	// complete (or the harness failed), so the guarantee is not proven.
	NotEstablished Status = "unknown"
)

// Check is one guarantee as observed in one subscription.
type Check struct {
	Subscription string       `json:"subscription"`
	Guarantee    string       `json:"guarantee"` // "no loss", "no duplicate effects", ...
	Kind         checker.Kind `json:"kind"`      // the anomaly kind that breaks it
	Promised     bool         `json:"promised"`
	Status       Status       `json:"status"`
	Count        int          `json:"count"`            // findings of Kind in this subscription
	Events       []string     `json:"events,omitempty"` // up to 10 example event ids
}

// guarantees maps each anomaly kind to the guarantee it breaks, in the
// order reports show them.
var guarantees = []struct {
	kind checker.Kind
	name string
}{
	{checker.Lost, "no loss"},
	{checker.DuplicateEffect, "no duplicate effects"},
	{checker.OrderRegression, "per-key order"},
	{checker.Gap, "no gaps"},
	{checker.Unexpected, "no phantom effects"},
	{checker.UnauthorizedEffect, "no unauthorized effects"},
	{checker.DLQUnaccounted, "poison dead-lettered"},
	{checker.WronglyDeadLettered, "only poison dead-lettered"},
	{checker.PoisonApplied, "poison never applied"},
	{checker.InboxMismatch, "inbox and effects agree"},
	{checker.Unrecovered, "dead letters recovered by redrive"},
	{checker.RedriveRate, "redrive within its rate"},
	{checker.OverRetried, "permanent errors not retried past the limit"},
	{checker.Stall, stallGuarantee},
	{checker.BacklogAge, backlogGuarantee},
}

// Checks lists every guarantee per subscription with what the run
// observed. The subscriptions are the checker's (declared and seen), or
// the declared ones when there is no result.
func Checks(run Record, res *checker.Result) []Check {
	g := run.Guarantees
	var subs []string
	if res != nil {
		g = res.Guarantees
		for _, s := range res.Subscriptions {
			subs = append(subs, s.Name)
		}
	}
	if len(subs) == 0 {
		subs = g.Normalize().Subscriptions
	}
	found := map[[2]string]*checker.Anomaly{}
	if res != nil {
		for i := range res.Anomalies {
			a := &res.Anomalies[i]
			found[[2]string{string(a.Kind), a.Subscription}] = a
		}
	}
	established := Judge(run, res).Established
	out := []Check{}
	for _, sub := range subs {
		for _, gu := range guarantees {
			if !judgedIn(res, gu.kind, sub) {
				continue
			}
			c := Check{Subscription: sub, Guarantee: gu.name, Kind: gu.kind, Promised: g.Fatal(gu.kind)}
			if a := found[[2]string{string(gu.kind), sub}]; a != nil {
				c.Count = a.Count
				c.Events = a.Events[:min(len(a.Events), 10)]
			}
			c.Status = c.status(established)
			out = append(out, c)
		}
	}
	if res != nil && res.TxnStage != nil {
		out = append(out, txnStageChecks(res, established)...)
	}
	if res != nil {
		out = append(out, memoryChecks(res, established)...)
		out = append(out, retryChecks(res, established)...)
	}
	return out
}

// judgedIn reports whether the guarantee kind breaks is judged in
// subscription sub: the redrive ones only where a redrive op names it,
// over-retried only where its consumers retried or refused something
// (checker/redrive.go, checker/retries.go); every other one always.
func judgedIn(res *checker.Result, kind checker.Kind, sub string) bool {
	switch kind {
	case checker.Unrecovered, checker.RedriveRate:
		return res != nil && slices.ContainsFunc(res.Redrive, func(rd checker.SubscriptionRedrive) bool { return rd.Subscription == sub })
	case checker.OverRetried:
		return res != nil && res.Retries != nil &&
			slices.ContainsFunc(res.Retries.Subscriptions, func(sr checker.SubscriptionRetries) bool { return sr.Subscription == sub })
	}
	return true
}

// status is what c's findings and the facts say of its guarantee.
func (c Check) status(established bool) Status {
	switch {
	case c.Count > 0 && c.Promised:
		return Broken
	case c.Count > 0:
		return Allowed
	case !established:
		return NotEstablished
	case c.Promised:
		return Held
	}
	return Allowed
}

// Judge is the run's verdict: the checker's result with the run's own
// problems (its harness error, crash-looping components) and the
// scenario's expectation. Everything a run folder says about the verdict
// reads it.
func Judge(run Record, res *checker.Result) verdict.Verdict {
	var problems []string
	if run.HarnessError != "" {
		problems = append(problems, "harness error: "+oneLine(run.HarnessError))
	}
	return verdict.Of(res, problems, run.CrashLoops, run.Expect)
}

// NewResults builds the results.json envelope.
func NewResults(run Record, res *checker.Result) Results {
	run = run.normalized()
	v := Judge(run, res)
	checks := Checks(run, res)
	r := Results{
		SchemaVersion: SchemaVersion,
		Verdict:       v.Validity,
		Reasons:       nonNil(v.Reasons),
		Expected:      v.Expected,
		Summary:       summary(run, res, checks),
		Run:           &run,
		Checks:        checks,
		Result:        res,
	}
	if v.Expected != nil {
		r.ExpectationMet = &v.Met
	}
	return r
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// WriteResultsJSON writes the results.json envelope, indented. The output
// depends only on its inputs, byte for byte.
func WriteResultsJSON(w io.Writer, run Record, res *checker.Result) error {
	b, err := json.MarshalIndent(NewResults(run, res), "", "  ")
	if err != nil {
		return fmt.Errorf("reports: results.json: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// WriteAll writes results.json, report.html and junit.xml into the run
// folder dir, each through a temporary file renamed into place, so a
// reader never sees half a file. It writes all three even when one fails,
// and returns every failure.
func WriteAll(dir string, run Record, res *checker.Result) error {
	var errs []string
	for _, f := range []struct {
		name  string
		write func(io.Writer) error
	}{
		{ResultsFile, func(w io.Writer) error { return WriteResultsJSON(w, run, res) }},
		{HTMLName, func(w io.Writer) error { return HTML(w, run, res) }},
		{JUnitName, func(w io.Writer) error { return JUnit(w, run, res) }},
		{LagFile, func(w io.Writer) error { return WriteOpenMetrics(w, run, res) }},
	} {
		if err := writeFile(filepath.Join(dir, f.name), f.write); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("reports: write %s: %s", dir, strings.Join(errs, "; "))
	}
	return nil
}

// writeFile writes path through path.tmp and a rename.
func writeFile(path string, write func(io.Writer) error) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return nil
}
