package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
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
