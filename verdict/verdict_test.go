package verdict

import (
	"testing"

	"github.com/deliverycheck/deliverycheck/checker"
)

func TestOf(t *testing.T) {
	complete := checker.Facts{Drain: "complete", FinalRead: "complete"}
	valid := &checker.Result{Valid: checker.Valid, Facts: complete}
	invalid := &checker.Result{Valid: checker.Invalid, Facts: complete, Reasons: []string{"1 lost in inv"},
		Anomalies: []checker.Anomaly{{Kind: checker.Lost, Fatal: true, Count: 1}}}
	unknown := &checker.Result{Valid: checker.Unknown, Facts: checker.Facts{Drain: "timed out"}, Reasons: []string{"drain timed out"}}
	bad := &Expectation{Verdict: checker.Invalid, Anomaly: checker.Lost}
	good := &Expectation{}
	for _, tt := range []struct {
		name         string
		res          *checker.Result
		problems     []string
		explanations []string
		expected     *Expectation
		want         checker.Validity
		established  bool
		met          bool
		exit         int
		reasons      int
	}{
		{"valid", valid, nil, nil, good, checker.Valid, true, true, 0, 0},
		{"harness error turns valid into unknown", valid, []string{"harness error: boom"}, nil, good, checker.Unknown, false, false, 2, 1},
		{"harness error keeps invalid", invalid, []string{"harness error: boom"}, nil, bad, checker.Invalid, false, true, 1, 2},
		{"invalid caught as expected", invalid, nil, nil, bad, checker.Invalid, true, true, 1, 1},
		{"invalid, other anomaly expected", invalid, nil, nil, &Expectation{Verdict: checker.Invalid, Anomaly: checker.Gap}, checker.Invalid, true, false, 1, 1},
		{"invalid where valid expected", invalid, nil, nil, good, checker.Invalid, true, false, 1, 1},
		{"unknown", unknown, nil, nil, good, checker.Unknown, false, false, 2, 1},
		{"explanation joins an unknown's reasons", unknown, nil, []string{"relay-0 crash-looped"}, good, checker.Unknown, false, false, 2, 2},
		{"explanation leaves a valid run alone", valid, nil, []string{"relay-0 crash-looped"}, good, checker.Valid, true, true, 0, 0},
		{"nothing checked", nil, []string{"harness error: no servers"}, nil, good, checker.Unknown, false, false, ExitHarness, 1},
		{"no expectation", valid, nil, nil, nil, checker.Valid, true, false, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := Of(tt.res, tt.problems, tt.explanations, tt.expected)
			if v.Validity != tt.want || v.Established != tt.established || v.Met != tt.met || v.ExitCode() != tt.exit || len(v.Reasons) != tt.reasons {
				t.Errorf("got %s established=%v met=%v (%s) exit %d reasons %q; want %s %v %v exit %d, %d reasons",
					v.Validity, v.Established, v.Met, v.Unmet, v.ExitCode(), v.Reasons, tt.want, tt.established, tt.met, tt.exit, tt.reasons)
			}
		})
	}
}
