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

func writeHistory(t *testing.T, ops ...history.Op) string {
	t.Helper()
	var b []byte
	for i, op := range ops {
		op.Index, op.Time = int64(i), int64(i)*1000
		b = append(op.AppendJSON(b), '\n')
	}
	p := filepath.Join(t.TempDir(), "history.jsonl")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckCmdExitCodes(t *testing.T) {
	op := func(p string, typ history.Type, f history.F, v history.Value) history.Op {
		return history.Op{Process: p, Type: typ, F: f, Value: v}
	}
	commit := op("producer-1", history.OK, history.Commit, history.Value{Event: "e1", Key: "k", Version: 1})
	apply := op("consumer-inv-1", history.OK, history.Apply, history.Value{Event: "e1", Consumer: "inv"})
	drain := op("harness", history.OK, history.Drain, history.Value{})
	readDone := op("harness", history.OK, history.FinalRead, history.Value{})
	// The effects ledger is authoritative: an apply is lasting only with
	// its effect row.
	effect := op("harness", history.OK, history.FinalRead, history.Value{Table: history.TableEffects, Event: "e1", Consumer: "inv", Key: "k", Version: 1})
	tests := []struct {
		name string
		args func(t *testing.T) []string
		code int
		out  string
	}{
		{"valid", func(t *testing.T) []string {
			return []string{writeHistory(t, commit, apply, drain, effect, readDone), "--subscription", "inv"}
		}, exitValid, "VALID"},
		{"invalid", func(t *testing.T) []string {
			return []string{writeHistory(t, commit, drain, readDone), "--subscription", "inv"}
		}, exitInvalid, "FATAL   lost in inv: 1 (1 after committed), e.g. e1"},
		{"unknown", func(t *testing.T) []string {
			return []string{writeHistory(t, commit, apply), "-g", "at-least-once"}
		}, exitUnknown, "UNKNOWN"},
		{"bad guarantees", func(t *testing.T) []string {
			return []string{writeHistory(t, commit), "-g", "exactly-twice"}
		}, exitBadInput, ""},
		{"missing file", func(t *testing.T) []string { return []string{"/nonexistent/h.jsonl"} }, exitBadInput, ""},
		{"no args", func(t *testing.T) []string { return nil }, exitBadInput, ""},
		{"not a history", func(t *testing.T) []string {
			p := filepath.Join(t.TempDir(), "h.jsonl")
			os.WriteFile(p, []byte("hello\nworld\n"), 0o644)
			return []string{p}
		}, exitBadInput, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := newCheckCmd()
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			cmd.SetArgs(tt.args(t))
			err := cmd.Execute()
			code := exitValid
			var ec *exitCodeError
			if errors.As(err, &ec) {
				code = ec.ExitCode()
			} else if err != nil {
				t.Fatalf("error without exit code: %v", err)
			}
			if code != tt.code {
				t.Errorf("exit %d, want %d (err %v)\n%s", code, tt.code, err, out.String())
			}
			if !strings.Contains(out.String(), tt.out) {
				t.Errorf("output lacks %q:\n%s", tt.out, out.String())
			}
		})
	}
}
