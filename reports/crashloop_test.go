package reports

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/history"
)

// A component that keeps exiting on its own is named, with the last
// lines of its log, among the reasons of a verdict that is not valid;
// kills by the nemesis and failpoint crashes do not count towards it.
func TestCrashLoopExplainsTheVerdict(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{HistoryDir, LogsDir} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var b []byte
	tm := int64(0)
	add := func(process string, typ history.Type, f history.F, v history.Value) {
		tm += 1000
		b = append(history.Op{Time: tm, Process: process, Type: typ, F: f, Value: v}.AppendJSON(b), '\n')
	}
	for range CrashLoopAfter + 1 {
		add("harness", history.Info, history.Crash, history.Value{Target: "consumer-inv-0", Detail: "exit status 1"})
		add("harness", history.OK, history.Restart, history.Value{Target: "consumer-inv-0"})
	}
	// relay-0 crashed as often, but every time by a fault or a failpoint.
	for i := range CrashLoopAfter + 1 {
		v := history.Value{Target: "relay-0", Fault: "kill", Detail: "kill -9 by the nemesis"}
		if i%2 == 1 {
			v = history.Value{Target: "relay-0", Detail: "failpoint relay.before-publish"}
		}
		add("harness", history.Info, history.Crash, v)
	}
	if err := os.WriteFile(filepath.Join(dir, HistoryDir, "harness.jsonl"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	logLines := "starting\nconnected\ndeclare queue inv: PRECONDITION_FAILED - inequivalent arg 'x-queue-type'\n"
	if err := os.WriteFile(filepath.Join(dir, LogsDir, "consumer-inv-0.log"), []byte(logLines), 0o644); err != nil {
		t.Fatal(err)
	}
	var run Record
	if err := run.Complete(dir, nil); err != nil {
		t.Fatal(err)
	}
	if len(run.CrashLoops) != 1 {
		t.Fatalf("crash loops %q, want one (consumer-inv-0)", run.CrashLoops)
	}
	msg := run.CrashLoops[0]
	for _, want := range []string{"consumer-inv-0 crash-looped", "exited on its own 4 times", "exit status 1", "PRECONDITION_FAILED"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q does not say %q", msg, want)
		}
	}

	unknown := &checker.Result{Valid: checker.Unknown, Reasons: []string{"drain timed out"}}
	if v := Judge(run, unknown); len(v.Reasons) != 2 || v.Reasons[1] != msg {
		t.Errorf("unknown verdict's reasons %q, want the drain and then the crash loop", v.Reasons)
	}
	valid := &checker.Result{Valid: checker.Valid, Facts: checker.Facts{Drain: "complete", FinalRead: "complete"}}
	if v := Judge(run, valid); v.Validity != checker.Valid || len(v.Reasons) != 0 {
		t.Errorf("a valid run with a crash loop: %s %q, want valid with no reasons", v.Validity, v.Reasons)
	}
}
