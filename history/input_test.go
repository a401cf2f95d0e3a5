package history

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// TestBadInputInWords: a line that is not a history op is reported in
// words a person reads, naming the file and line (issue 19, "Bad input and
// messages").
func TestBadInputInWords(t *testing.T) {
	good := `{"index":0,"time":1,"process":"p","type":"ok","f":"commit","value":{"event":"e1"}}`
	tests := []struct {
		name    string
		content string
		want    []string // substrings of the error
	}{
		{"not JSON", "hello\n" + good + "\n", []string{"f.jsonl: line 1 is not JSON"}},
		{"byte-order mark", "\ufeff" + good + "\n" + good + "\n", []string{"line 1", "UTF-8 byte-order mark"}},
		{"no type", `{"index":0,"time":1,"process":"p","f":"apply","value":{"event":"e1"}}` + "\n", []string{"line 1", "has no type"}},
		{"unknown type", `{"type":"okay","f":"apply"}` + "\n" + good + "\n", []string{"line 1", `type "okay"`, "invoke, ok, fail or info"}},
		{"wrong field type", `{"type":"ok","f":"apply","value":{"version":"3"}}` + "\n" + good + "\n", []string{"line 1", "value.version", "string"}},
		{"not an object", "[1,2]\n" + good + "\n", []string{"line 1", "not an object"}},
		{"lone surrogate", `{"type":"ok","f":"apply","value":{"event":"\udbff"}}` + "\n", []string{"line 1", "event", "lone surrogate"}},
		{"invalid UTF-8 process", "{\"type\":\"ok\",\"process\":\"p\xfe\",\"f\":\"apply\"}\n", []string{"line 1", "process", "not valid UTF-8"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Read(strings.NewReader(tt.content), "f.jsonl")
			var le *LineError
			if !errors.As(err, &le) {
				t.Fatalf("err = %v, want a LineError", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "invalid character") && !strings.Contains(err.Error(), "not JSON") {
				t.Errorf("error %q is the decoder's, not in words", err)
			}
		})
	}
}

// TestTornLineIsCalledTorn: a cut says it is a torn line, and what was read
// before it is kept (a truncated history is read up to the cut).
func TestTornLineIsCalledTorn(t *testing.T) {
	good := `{"index":0,"time":1,"process":"p","type":"ok","f":"commit","value":{"event":"e1"}}`
	h, cuts, err := Read(strings.NewReader(good+"\n"+good[:30]), "f.jsonl")
	if err != nil || len(h) != 1 || len(cuts) != 1 {
		t.Fatalf("Read = %d ops, cuts %v, %v", len(h), cuts, err)
	}
	if s := cuts[0].String(); !strings.Contains(s, "torn") || !strings.Contains(s, "f.jsonl:2") {
		t.Errorf("cut %q does not call the line torn at f.jsonl:2", s)
	}
	if !strings.Contains(cuts[0].Reason, "torn") {
		t.Errorf("cut reason %q is not in words", cuts[0].Reason)
	}
}

// TestNewValueFieldsRoundTrip: evidence and commit_time (contract 19,
// items 1 and 3) survive AppendJSON and both decoders.
func TestNewValueFieldsRoundTrip(t *testing.T) {
	op := Op{Index: 1, Time: 2, Process: "harness", Type: OK, F: FinalRead,
		Value: Value{Table: TableEffects, Event: "e", Consumer: "c", CommitTime: 12345, Evidence: "relay-0 exited: signal: killed"}}
	line := op.AppendJSON(nil)
	if !strings.Contains(string(line), `"commit_time":12345`) || !strings.Contains(string(line), `"evidence":"relay-0 exited: signal: killed"`) {
		t.Fatalf("AppendJSON = %s", line)
	}
	var got Op
	if err := UnmarshalLine(line, &got); err != nil || !reflect.DeepEqual(got.Value, op.Value) {
		t.Fatalf("UnmarshalLine = %+v, %v", got, err)
	}
	d := decoder{b: line}
	var fast Op
	if err := d.op(&fast); err != nil {
		t.Fatalf("the fast path declined %s: %v", line, err)
	}
}

// TestDecodeSlotsStartZero: readers decode into slots without resetting
// them, so no field of a torn line, or of an op of an earlier chunk, may
// leak into the next op.
func TestDecodeSlotsStartZero(t *testing.T) {
	full := func(t int) string {
		return fmt.Sprintf(`{"index":0,"time":%d,"process":"p","type":"ok","f":"apply","value":{"event":"e1","key":"k","version":3,"consumer":"c","error":"x","detail":"d","subscriptions":["a"]}}`, t)
	}
	short := func(t int) string {
		return fmt.Sprintf(`{"index":1,"time":%d,"process":"p","type":"ok","f":"ack","value":{}}`, t)
	}
	var content string
	for i := range 50 {
		content += full(2*i) + "\n" + short(2*i+1) + "\n"
	}
	content += full(100)[:len(full(100))-30] + "\n" + short(101) + "\n"
	p := writeFile(t, "f.jsonl", content)
	for _, size := range []int{1 << 20, 300, 64} {
		old := chunkSize
		chunkSize = size
		var got History
		_, err := ScanFiles([]string{p}, func(b []Op) error { got = append(got, b...); return nil })
		chunkSize = old
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range got {
			if op.F == "ack" && !reflect.DeepEqual(op.Value, Value{}) {
				t.Fatalf("chunk %d: ack op carries leftover fields: %+v", size, op.Value)
			}
		}
	}
}
