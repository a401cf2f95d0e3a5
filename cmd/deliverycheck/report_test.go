package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deliverycheck/deliverycheck/history"
)

// report re-renders a run folder: without results.json it checks the
// history again and writes all three files; the exit code is the verdict.
func TestReportCmd(t *testing.T) {
	op := func(p string, typ history.Type, f history.F, v history.Value) history.Op {
		return history.Op{Process: p, Type: typ, F: f, Value: v}
	}
	runDir := func(t *testing.T, ops ...history.Op) string {
		dir := t.TempDir()
		src := writeHistory(t, ops...)
		os.MkdirAll(filepath.Join(dir, "history"), 0o755)
		b, _ := os.ReadFile(src)
		os.WriteFile(filepath.Join(dir, "history", "harness.jsonl"), b, 0o644)
		return dir
	}
	commit := op("producer-1", history.OK, history.Commit, history.Value{Event: "e1", Key: "k", Version: 1})
	setup := op("harness", history.OK, history.Setup, history.Value{Subscriptions: []string{"inv"}})
	apply := op("consumer-inv-1", history.OK, history.Apply, history.Value{Event: "e1", Consumer: "inv"})
	drain := op("harness", history.OK, history.Drain, history.Value{})
	readStart := op("harness", history.Invoke, history.FinalRead, history.Value{})
	readDone := op("harness", history.OK, history.FinalRead, history.Value{})
	// The effects ledger is authoritative: an apply is lasting only with
	// its effect row.
	effect := op("harness", history.OK, history.FinalRead, history.Value{Table: history.TableEffects, Event: "e1", Consumer: "inv", Key: "k", Version: 1})
	tests := []struct {
		name string
		dir  func(t *testing.T) string
		code int
	}{
		{"valid", func(t *testing.T) string { return runDir(t, setup, commit, apply, drain, readStart, effect, readDone) }, exitValid},
		{"invalid", func(t *testing.T) string { return runDir(t, setup, commit, drain, readStart, readDone) }, exitInvalid},
		{"unknown", func(t *testing.T) string { return runDir(t, setup, commit, apply) }, exitUnknown},
		{"not a run folder", func(t *testing.T) string { return t.TempDir() }, exitBadInput},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := tt.dir(t)
			cmd := newReportCmd()
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			cmd.SetArgs([]string{dir})
			err := cmd.Execute()
			code := exitValid
			var ec *exitCodeError
			if errors.As(err, &ec) {
				code = ec.ExitCode()
			} else if err != nil {
				t.Fatalf("error without exit code: %v", err)
			}
			if code != tt.code {
				t.Fatalf("exit %d, want %d (err %v)\n%s", code, tt.code, err, out.String())
			}
			if code == exitBadInput {
				return
			}
			for _, f := range []string{"results.json", "report.html", "junit.xml"} {
				if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
					t.Errorf("%s not written: %v", f, err)
				}
			}
			if !strings.Contains(out.String(), "report.html") {
				t.Errorf("output does not name the report:\n%s", out.String())
			}
		})
	}
}
