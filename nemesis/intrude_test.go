package nemesis

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/pipeline/intruder"
)

// TestIntrudeEvidence: the fault bit when the broker accepted or refused
// a message, and says which; a broker that answered none never bit, and
// a run without an intruder cannot inject it.
func TestIntrudeEvidence(t *testing.T) {
	msg := func(o intruder.Outcome, err error) intruder.Message {
		return intruder.Message{Kind: intruder.Type, Outcome: o, Err: err}
	}
	refusal := errors.New("Exception (403) Reason: \"ACCESS_REFUSED - write access to exchange 'run.events' refused for user 'run-intruder'\"")
	for _, tc := range []struct {
		name    string
		res     intruder.Result
		want    history.Type
		wantMsg string
	}{
		{"accepted", intruder.Result{Messages: []intruder.Message{msg(intruder.Accepted, nil), msg(intruder.Accepted, nil)}}, history.OK, "broker accepted 2 of 2 intruder messages"},
		{"refused", intruder.Result{Messages: []intruder.Message{msg(intruder.Refused, refusal), msg(intruder.Refused, refusal)}}, history.OK, "broker refused 2 of 2 intruder messages: Exception (403)"},
		{"unanswered", intruder.Result{Messages: []intruder.Message{msg(intruder.Unknown, broker.ErrUnconfirmed)}}, history.Fail, "neither accepted nor refused"},
		{"nothing", intruder.Result{}, history.Fail, "sent nothing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "harness.jsonl")
			rec, err := history.NewRecorder(path, "harness", time.Now())
			if err != nil {
				t.Fatal(err)
			}
			env := &Env{Recorder: rec, Intrude: func(context.Context) (intruder.Result, error) { return tc.res, nil }}
			st, err := ParseStep("at 0s: intrude")
			if err != nil {
				t.Fatal(err)
			}
			if err := (Schedule{Steps: []Step{st}}).Run(context.Background(), env); err != nil {
				t.Fatal(err)
			}
			rec.Close()
			h, _, err := history.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var got *history.Op
			for i, op := range h {
				if op.F == history.Fault && op.Value.Fault == string(Intrude) && op.Type != history.Invoke {
					got = &h[i]
				}
			}
			if got == nil {
				t.Fatalf("no intrude fault completion in %v", h)
			}
			text := got.Value.Evidence + got.Value.Error
			if got.Type != tc.want || !strings.Contains(text, tc.wantMsg) {
				t.Errorf("completion %s %q, want %s containing %q", got.Type, text, tc.want, tc.wantMsg)
			}
		})
	}
	if _, err := (Fault{Kind: Intrude}).Inject(context.Background(), &Env{}); err == nil || !strings.Contains(err.Error(), "no intruder") {
		t.Errorf("inject without an intruder: %v", err)
	}
}

// TestIntrudeOutlastsTheWorkload: an intrusion still running when the
// schedule's deadline (the end of the workload) passes runs to its end;
// one interrupted is cut short, and what the broker said to the messages
// sent before still counts.
func TestIntrudeOutlastsTheWorkload(t *testing.T) {
	slow := func(n int) func(context.Context) (intruder.Result, error) {
		return func(ctx context.Context) (intruder.Result, error) {
			var res intruder.Result
			for range n {
				select {
				case <-time.After(50 * time.Millisecond):
					res.Messages = append(res.Messages, intruder.Message{Kind: intruder.Type, Outcome: intruder.Refused, Err: errors.New("403")})
				case <-ctx.Done():
					return res, ctx.Err()
				}
			}
			return res, nil
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	env := &Env{Intrude: slow(4)}
	a, err := env.inject(ctx, Fault{Kind: Intrude}, "at 0s: intrude", "")
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := a.bit(); err != nil || ev != "broker refused 4 of 4 intruder messages: 403" {
		t.Errorf("past the deadline: %q %v", ev, err)
	}

	// Interrupted (ctx cancelled, not timed out) after two messages.
	ctx, cancel = context.WithCancel(context.Background())
	env.Intrude = func(ictx context.Context) (intruder.Result, error) {
		res, _ := slow(2)(ictx)
		cancel()
		<-ictx.Done()
		return res, ictx.Err()
	}
	a, err = env.inject(ctx, Fault{Kind: Intrude}, "at 0s: intrude", "")
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := a.bit(); err != nil || !strings.Contains(ev, "cut short after 2 messages") {
		t.Errorf("interrupted: %q %v", ev, err)
	}
}
