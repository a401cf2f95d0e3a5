package nemesis

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/history"
)

// TestOperationEvidence: a redrive, deploy-fix or purge-dlq step runs its
// deployment hook with its subscription (and rate), not cut short by the
// schedule's end; what the hook did is the fault's evidence, and one
// that did nothing is a fault not injected (its error on the fail op).
func TestOperationEvidence(t *testing.T) {
	noDeadLetters := errors.New("email's dead-letter queue is empty: nothing to redrive")
	for _, tc := range []struct {
		step     string
		err      error
		want     history.Type
		evidence string
	}{
		{"at 0s: redrive email at 50/s", nil, history.OK, "redrive email 50"},
		{"at 0s: redrive email at 50/s", noDeadLetters, history.Fail, noDeadLetters.Error()},
		{"at 0s: deploy-fix email", nil, history.OK, "deploy-fix email"},
		{"at 0s: purge-dlq email", nil, history.OK, "purge-dlq email"},
	} {
		t.Run(tc.step+"/"+string(tc.want), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "harness.jsonl")
			rec, err := history.NewRecorder(path, "harness", time.Now())
			if err != nil {
				t.Fatal(err)
			}
			// The schedule's context ends before the hook returns: the
			// operation must outlive the workload's end.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			hook := func(hctx context.Context, what string) (string, error) {
				select {
				case <-time.After(50 * time.Millisecond):
				case <-hctx.Done():
					return "", hctx.Err()
				}
				return what, tc.err
			}
			env := &Env{Recorder: rec,
				Redrive: func(ctx context.Context, sub string, rate int64) (string, error) {
					return hook(ctx, "redrive "+sub+" "+strconv.FormatInt(rate, 10))
				},
				DeployFix: func(ctx context.Context, sub string) (string, error) { return hook(ctx, "deploy-fix "+sub) },
				PurgeDLQ:  func(ctx context.Context, sub string) (string, error) { return hook(ctx, "purge-dlq "+sub) },
			}
			st, err := ParseStep(tc.step)
			if err != nil {
				t.Fatal(err)
			}
			_ = (Schedule{Steps: []Step{st}}).Run(ctx, env)
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
				t.Fatalf("no completion of the step in %v", h)
			}
			text := got.Value.Evidence
			if got.Type == history.Fail {
				text = got.Value.Error
			}
			if got.Type != tc.want || !strings.Contains(text, tc.evidence) {
				t.Errorf("%s %q (error %q), want %s %q", got.Type, got.Value.Evidence, got.Value.Error, tc.want, tc.evidence)
			}
		})
	}
}
