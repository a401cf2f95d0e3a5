package nemesis

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/history"
)

// A step that waits for an earlier fault on its server (a slow restart)
// until the run's window ends never begins, and is recorded as a fault
// that did not take effect, so that the checker cannot call the run
// valid on a schedule it did not carry out. Seen in CI: a broker's
// restart outlasted the window, and the second of two kills vanished
// from the history.
func TestStepOutrunByItsServerRecorded(t *testing.T) {
	var mu sync.Mutex
	var buf bytes.Buffer
	env := &Env{Log: slog.New(slog.DiscardHandler), Recorder: history.NewWriterRecorder(lockedWriter{&mu, &buf}, "nemesis", time.Now()), HealTimeout: time.Second}
	unlock, err := env.lockService(context.Background(), "kafka") // the slow restart
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	st, err := ParseStep("at 0s: kill kafka for 1s")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := Fixed(st).Run(ctx, env); err != nil {
		t.Logf("run: %v", err) // the window's end: not the schedule's error
	}
	mu.Lock()
	h, _, err := history.Read(bytes.NewReader(buf.Bytes()), "nemesis")
	mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, op := range h {
		if op.F == history.Fault && op.Value.Fault == "kill" {
			got = append(got, op.Type.String())
			if op.Type == history.Fail && !strings.Contains(op.Value.Error, "not injected") {
				t.Errorf("fail's error = %q, want it to say the step was not injected", op.Value.Error)
			}
			if op.Value.Detail != st.String() {
				t.Errorf("detail = %q, want the step %q", op.Value.Detail, st)
			}
		}
	}
	if strings.Join(got, ",") != "invoke,fail" {
		t.Fatalf("kill ops = %v, want an invoke and its fail", got)
	}
}

// lockedWriter lets the recorder write while the test reads.
type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
