package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/pipeline"
	"github.com/deliverycheck/deliverycheck/reports"
	"github.com/deliverycheck/deliverycheck/runner"
	"github.com/deliverycheck/deliverycheck/scenarios"
)

// TestUsageErrorsExitBadInput: every usage mistake exits 3, as --help
// says, never 4 (a harness error), and names what was wrong.
func TestUsageErrorsExitBadInput(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--bogus", "x"}, "unknown flag: --bogus"},
		{[]string{"suite", "--seed", "nope", "x"}, "invalid argument"},
		{[]string{"bogus"}, `unknown command "bogus"`},
		{[]string{"run"}, "accepts 1 arg"},
		{[]string{"check", "--nope"}, "unknown flag: --nope"},
		{[]string{"report", "a", "b"}, "name one run folder"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			root := newRootCmd()
			var out, stderr bytes.Buffer
			root.SetOut(&out)
			root.SetErr(&out)
			root.SetArgs(tt.args)
			code := exitCode(root.ExecuteContext(context.Background()), &stderr)
			if code != exitBadInput {
				t.Errorf("exit %d, want %d; stderr %q", code, exitBadInput, stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("stderr %q does not say %q", stderr.String(), tt.want)
			}
		})
	}
}

// The printed line, the exit code and a suite row read the run's one
// verdict: a checker result that is valid, from a run whose harness
// failed, is UNKNOWN and exits 2 everywhere, as results.json says
// (they used to print VALID and exit 0).
func TestOutcomeSaysTheVerdict(t *testing.T) {
	res := &checker.Result{Valid: checker.Valid, Facts: checker.Facts{Drain: "complete", FinalRead: "complete"}}
	run := reports.Record{Scenario: "s", HarnessError: "finish: stop workers: timeout"}
	o := &runner.Outcome{Result: res, Run: run, Verdict: reports.Judge(run, res), Dir: "runs/s/1"}
	var out bytes.Buffer
	printOutcome(&out, scenarios.Scenario{Name: "s"}, o)
	if !strings.Contains(out.String(), "s: UNKNOWN (harness error: finish: stop workers: timeout)") {
		t.Errorf("printed %q", out.String())
	}
	if o.ExitCode() != exitUnknown {
		t.Errorf("exit %d, want %d", o.ExitCode(), exitUnknown)
	}
	if got := reports.NewResults(run, res).Verdict; got != o.Verdict.Validity {
		t.Errorf("results.json says %s, the outcome %s", got, o.Verdict.Validity)
	}
}

// A mistake in the scenario's system section that only the database finds
// prints as the decoder's own errors do, file:line: field: message,
// without the harness's stages around it.
func TestOutcomeBadInputSaysWhere(t *testing.T) {
	cause := &pipeline.ContractError{At: "shop.yaml:7", Field: "system.transaction[1]", Err: errors.New("PostgreSQL cannot tell the type of :event_id here")}
	o := &runner.Outcome{HarnessErr: fmt.Errorf("start pipeline: %w", cause), Dir: "runs/s/1"}
	var out bytes.Buffer
	printOutcome(&out, scenarios.Scenario{Name: "s"}, o)
	if want := "s: bad input: shop.yaml:7: system.transaction[1]: PostgreSQL cannot tell the type of :event_id here\n"; !strings.HasPrefix(out.String(), want) {
		t.Errorf("printed %q, want it to start %q", out.String(), want)
	}
	if got := badInput(o.HarnessErr); got != error(cause) {
		t.Errorf("badInput = %v, want the contract error alone", got)
	}
	if got := badInput(errors.New("provision: no docker")); got != nil {
		t.Errorf("a harness failure is bad input: %v", got)
	}
}

// Text from hostile messages (an event id, a harness error quoting a
// broker's) reaches the terminal with no control left to act on: an
// escape sequence that would set the window title or clear the screen,
// a carriage return that would overwrite the verdict, prints as control
// pictures, and bytes that are not UTF-8 as U+FFFD.
func TestPrintedHostileTextInert(t *testing.T) {
	hostile := "e1\x1b]0;pwned\x07\x1b[2J\rVALID\xff"
	res := &checker.Result{Valid: checker.Invalid, Reasons: []string{"1 lost in inventory"},
		Anomalies: []checker.Anomaly{{Kind: checker.Lost, Subscription: "inventory", Fatal: true, Count: 1, Events: []string{hostile}}}}
	run := reports.Record{Scenario: "s", HarnessError: "broker: " + hostile}
	o := &runner.Outcome{Result: res, Run: run, Verdict: reports.Judge(run, res), Dir: "runs/s/1"}
	var out bytes.Buffer
	printOutcome(&out, scenarios.Scenario{Name: "s"}, o)
	printSummary(&out, res, nil, "-")
	want := "e1␛]0;pwned␇␛[2J␍VALID\ufffd"
	if strings.Count(out.String(), want) != 2 {
		t.Errorf("the hostile text is not shown inert in the reasons and the anomaly:\n%s", out.String())
	}
	for i, r := range out.String() {
		if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f || r == utf8.RuneError && !strings.HasPrefix(out.String()[i:], "\ufffd") {
			t.Fatalf("control %U or a byte that is not UTF-8 printed at %d: %q", r, i, out.String())
		}
	}
}
