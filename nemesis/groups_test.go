package nemesis

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/history"
)

// TestGroupSteps: join and leave call their Env hooks with the step's
// target and record what they did as the fault's evidence; a hook's
// error, or a run without the hook, is a step not injected.
func TestGroupSteps(t *testing.T) {
	join := func(_ context.Context, sub string) (string, error) { return "consumer-" + sub + "-2", nil }
	leave := func(_ context.Context, w string) (string, error) { return w + " left analytics (exit status 0)", nil }
	refuse := func(_ context.Context, w string) (string, error) { return "", errors.New("killed after 30s") }
	for _, tc := range []struct {
		name, step string
		join       func(context.Context, string) (string, error)
		leave      func(context.Context, string) (string, error)
		want       history.Type
		text       string
	}{
		{"join", "at 0s: join analytics", join, nil, history.OK, "consumer-analytics-2 joined analytics"},
		{"leave", "at 0s: leave consumer-analytics-1", nil, leave, history.OK, "consumer-analytics-1 left analytics (exit status 0)"},
		{"leave refused", "at 0s: leave consumer-analytics-1", nil, refuse, history.Fail, "leave: killed after 30s"},
		{"no join hook", "at 0s: join analytics", nil, nil, history.Fail, "join: this run cannot start consumers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "harness.jsonl")
			rec, err := history.NewRecorder(path, "harness", time.Now())
			if err != nil {
				t.Fatal(err)
			}
			env := &Env{Recorder: rec, Join: tc.join, Leave: tc.leave}
			st, err := ParseStep(tc.step)
			if err != nil {
				t.Fatal(err)
			}
			_ = (Schedule{Steps: []Step{st}}).Run(context.Background(), env)
			rec.Close()
			h, _, err := history.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var got *history.Op
			for i, op := range h {
				if op.F == history.Fault && op.Value.Fault == string(st.Fault.Kind) && op.Type != history.Invoke {
					got = &h[i]
				}
			}
			if got == nil {
				t.Fatalf("no completed %s fault op in %v", st.Fault.Kind, h)
			}
			if text := got.Value.Evidence + got.Value.Error; got.Type != tc.want || !strings.Contains(text, tc.text) {
				t.Fatalf("%s %q, want %s with %q", got.Type, text, tc.want, tc.text)
			}
		})
	}
}
