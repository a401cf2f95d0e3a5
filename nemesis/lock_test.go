package nemesis_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/nemesis"
)

// A step whose time comes within the run's window while an earlier fault
// still holds its server (a restart, slow on a loaded machine, healing a
// kill) waits for it, past the window, and is carried out late: seen in
// CI, where the second of two broker kills waited for the first's
// restart until the window's end and vanished from the history. One the
// server is held from for longer than a heal may take is recorded as not
// injected, so the checker cannot call the run valid on a schedule it
// did not carry out.
func TestStepWaitsForItsServerPastTheWindow(t *testing.T) {
	for _, tc := range []struct {
		name    string
		release time.Duration // when the earlier fault lets go; 0: never
		want    string        // in the kill's fail error
	}{
		// No cluster here: once begun, the kill fails on the missing
		// server, which shows it began.
		{"carried out late", 300 * time.Millisecond, "no service kafka"},
		{"held past the heal timeout", 0, "not injected: waiting for another fault on kafka"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf := &syncBuffer{}
			env := &nemesis.Env{Log: slog.New(slog.DiscardHandler), Recorder: history.NewWriterRecorder(buf, "nemesis", time.Now()), HealTimeout: time.Second}
			unlock, err := env.LockService(context.Background(), "kafka") // the slow restart
			if err != nil {
				t.Fatal(err)
			}
			if tc.release > 0 {
				time.AfterFunc(tc.release, unlock)
			} else {
				defer unlock()
			}
			st, err := nemesis.ParseStep("at 0s: kill kafka for 1s")
			if err != nil {
				t.Fatal(err)
			}
			if err := nemesis.Fixed(st).RunWithin(context.Background(), env, 100*time.Millisecond); err == nil {
				t.Error("the kill failed, and Run returned no error")
			}
			var got []string
			for _, op := range buf.history(t) {
				if op.F != history.Fault || op.Value.Fault != "kill" {
					continue
				}
				got = append(got, op.Type.String())
				if op.Value.Detail != st.String() {
					t.Errorf("detail = %q, want the step %q", op.Value.Detail, st)
				}
				// Op times count from the recorder's start, before the lock.
				if at := time.Duration(op.Time); op.Type == history.Invoke && tc.release > 0 && at < tc.release {
					t.Errorf("the kill began %s in, before its server was let go at %s", at, tc.release)
				}
				if op.Type == history.Fail && !strings.Contains(op.Value.Error, tc.want) {
					t.Errorf("fail's error = %q, want %q in it", op.Value.Error, tc.want)
				}
			}
			if strings.Join(got, ",") != "invoke,fail" {
				t.Fatalf("kill ops = %v, want an invoke and its fail", got)
			}
		})
	}
}
