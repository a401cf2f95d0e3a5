package history

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func sampleOps() History {
	return History{
		{Index: 0, Time: 0, Process: "harness", Type: OK, F: Setup, Value: Value{Subscriptions: []string{"billing", "inventory"}}},
		{Index: 1, Time: 10, Process: "producer-1", Type: Invoke, F: Commit, Value: Value{Event: "e1", Key: "k1", Version: 1}},
		{Index: 2, Time: 20, Process: "producer-1", Type: OK, F: Commit, Value: Value{Event: "e1", Key: "k1", Version: 1, Poison: true}},
		{Index: 3, Time: 30, Process: "relay-0", Type: OK, F: Publish, Value: Value{Event: "e1", Partition: 3, Offset: 99, Attempt: 1}},
		{Index: 4, Time: 40, Process: "consumer-billing-1", Type: OK, F: Deliver, Value: Value{Event: "e1", Consumer: "billing", Tag: 7, Attempt: 2}},
		{Index: 5, Time: 50, Process: "nemesis", Type: Invoke, F: Fault, Value: Value{Fault: "kill", Target: "relay-0", Detail: "weird \"quote\" \\ é \x01 \u2028"}},
		{Index: 6, Time: 60, Process: "harness", Type: OK, F: FinalRead, Value: Value{Table: TableOutbox, Event: "e1", Key: "k1", Version: 1, Published: true}},
		{Index: 7, Time: -5, Process: "x", Type: Info, F: "custom", Value: Value{Error: "timeout", Reason: "r", Source: "s"}},
		{Index: 8, Time: 70, Process: "harness", Type: OK, F: Resources, Value: Value{Target: "consumer-inventory-0", RSS: 268435456}},
	}
}

func TestAppendJSONMatchesEncodingJSON(t *testing.T) {
	for _, op := range sampleOps() {
		line := op.AppendJSON(nil)
		var fast, slow Op
		if err := UnmarshalLine(line, &fast); err != nil {
			t.Fatalf("UnmarshalLine(%s): %v", line, err)
		}
		if err := json.Unmarshal(line, &slow); err != nil {
			t.Fatalf("json.Unmarshal(%s): %v", line, err)
		}
		if !reflect.DeepEqual(fast, op) || !reflect.DeepEqual(slow, op) {
			t.Errorf("round trip of %s:\n got fast %+v\n got slow %+v\nwant      %+v", line, fast, slow, op)
		}
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func lines(h History) string {
	var b []byte
	for _, op := range h {
		b = append(op.AppendJSON(b), '\n')
	}
	return string(b)
}

func TestReadTornLines(t *testing.T) {
	full := lines(sampleOps()[:4])
	last := sampleOps()[4].String()
	tests := []struct {
		name     string
		content  string
		wantOps  int
		wantCuts []int64 // line numbers
		wantErr  bool
	}{
		{name: "empty", content: "", wantOps: 0},
		{name: "clean", content: full, wantOps: 4},
		{name: "no final newline", content: full + last, wantOps: 5},
		{name: "cut mid-line", content: full + last[:25], wantOps: 4, wantCuts: []int64{5}},
		{name: "cut then blank lines", content: full + last[:25] + "\n\n  \n", wantOps: 4, wantCuts: []int64{5}},
		{name: "cut mid-file then restarted", content: full + last[:25] + "\n" + last + "\n", wantOps: 5, wantCuts: []int64{5}},
		{name: "zeros from a crash", content: full + "\x00\x00\x00\x00\n" + last + "\n", wantOps: 5, wantCuts: []int64{5}},
		{name: "garbage last line", content: full + "not json", wantOps: 4, wantCuts: []int64{5}},
		{name: "garbage mid-file", content: full + "not json\n" + last + "\n", wantErr: true},
		{name: "wrong type mid-file", content: strings.Replace(full, `"ok"`, `"okay"`, 1) + last + "\n", wantErr: true},
		{name: "crlf", content: strings.ReplaceAll(full, "\n", "\r\n"), wantOps: 4},
		// A complete object is never torn, even as the last line: a line
		// without a type is bad input, not an ok (issue 19, rule 7).
		{name: "no type mid-file", content: full + `{"index":9,"time":99,"process":"c","f":"apply","value":{"event":"e1"}}` + "\n" + last + "\n", wantErr: true},
		{name: "no type last line", content: full + `{"index":9,"time":99,"process":"c","f":"apply","value":{"event":"e1"}}` + "\n", wantErr: true},
		{name: "null type", content: full + `{"index":9,"time":99,"process":"c","type":null,"f":"apply","value":{"event":"e1"}}` + "\n", wantErr: true},
		// Identities are compared exactly: ids that would decode to U+FFFD
		// are refused, never merged into one event (rule 8).
		{name: "lone surrogate id", content: full + `{"index":9,"time":99,"process":"c","type":"ok","f":"apply","value":{"event":"\ud800"}}` + "\n", wantErr: true},
		{name: "invalid UTF-8 id", content: full + "{\"index\":9,\"time\":99,\"process\":\"c\",\"type\":\"ok\",\"f\":\"apply\",\"value\":{\"event\":\"a\xff\"}}\n", wantErr: true},
		{name: "invalid UTF-8 consumer", content: full + "{\"index\":9,\"time\":99,\"process\":\"c\",\"type\":\"ok\",\"f\":\"apply\",\"value\":{\"event\":\"a\",\"consumer\":\"\xc3\"}}\n", wantErr: true},
		{name: "invalid UTF-8 in free text is kept", content: full + "{\"index\":9,\"time\":99,\"process\":\"c\",\"type\":\"fail\",\"f\":\"apply\",\"value\":{\"event\":\"a\",\"error\":\"\xff\"}}\n", wantOps: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, cuts, err := Read(strings.NewReader(tt.content), "f.jsonl")
			check := func(how string, h History, cuts []Cut, err error) {
				t.Helper()
				if tt.wantErr {
					var le *LineError
					if !errors.As(err, &le) {
						t.Fatalf("%s: err = %v, want a LineError", how, err)
					}
					return
				}
				if err != nil {
					t.Fatalf("%s: %v", how, err)
				}
				if len(h) != tt.wantOps {
					t.Errorf("%s: got %d ops, want %d", how, len(h), tt.wantOps)
				}
				var got []int64
				for _, c := range cuts {
					got = append(got, c.Line)
				}
				if !reflect.DeepEqual(got, tt.wantCuts) {
					t.Errorf("%s: cuts at lines %v, want %v (%v)", how, got, tt.wantCuts, cuts)
				}
			}
			check("Read", h, cuts, err)
			// ScanFiles must agree, also with chunks of a few bytes.
			p := writeFile(t, "f.jsonl", tt.content)
			for _, size := range []int{1 << 20, 64, 7} {
				old := chunkSize
				chunkSize = size
				var got History
				rep, err := ScanFiles([]string{p}, func(b []Op) error { got = append(got, b...); return nil })
				chunkSize = old
				check("ScanFiles", got, rep.Cuts(), err)
			}
		})
	}
}

func TestMergeOrder(t *testing.T) {
	a := History{{Time: 1, Process: "b", Type: OK}, {Time: 5, Process: "b", Type: OK}, {Time: 5, Process: "b", Type: OK, F: "second"}}
	b := History{{Time: 0, Process: "a", Type: OK}, {Time: 5, Process: "a", Type: OK}, {Time: 9, Process: "a", Type: OK}}
	got := Merge(a, b)
	want := []struct {
		t int64
		p string
		f F
	}{{0, "a", ""}, {1, "b", ""}, {5, "a", ""}, {5, "b", ""}, {5, "b", "second"}, {9, "a", ""}}
	for i, op := range got {
		if op.Index != int64(i) || op.Time != want[i].t || op.Process != want[i].p || op.F != want[i].f {
			t.Errorf("op %d = %+v, want %+v", i, op, want[i])
		}
	}
	// Streaming merge of the same files gives the same history.
	pa, pb := writeFile(t, "a.jsonl", lines(a)), writeFile(t, "b.jsonl", lines(b))
	var streamed History
	if _, err := ScanFiles([]string{pa, pb}, func(b []Op) error { streamed = append(streamed, b...); return nil }); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(streamed, got) {
		t.Errorf("ScanFiles merge:\n%v\nwant\n%v", streamed, got)
	}
	fromFiles, _, err := ReadFiles(pa, pb)
	if err != nil || !reflect.DeepEqual(fromFiles, got) {
		t.Errorf("ReadFiles = %v, %v", fromFiles, err)
	}
}

func TestScanFilesUnordered(t *testing.T) {
	p := writeFile(t, "u.jsonl", lines(History{{Time: 5, Process: "a", Type: OK}, {Time: 4, Process: "a", Type: OK}}))
	_, err := ScanFiles([]string{p}, func([]Op) error { return nil })
	if !errors.Is(err, ErrUnordered) {
		t.Fatalf("err = %v, want ErrUnordered", err)
	}
}

// TestScanFilesOrSort: ordered files stream as ScanFiles does; an unordered
// one, after part of it streamed, is read whole and sorted, once restart
// has been called; the cuts are reported either way.
func TestScanFilesOrSort(t *testing.T) {
	defer func(n int) { chunkSize = n }(chunkSize)
	chunkSize = 7 // a chunk a line: the first lines stream before the scan finds the disorder
	ordered := History{{Time: 1, Process: "a", Type: OK}, {Time: 2, Process: "a", Type: OK}}
	unordered := History{{Time: 1, Process: "a", Type: OK}, {Time: 5, Process: "a", Type: OK}, {Time: 4, Process: "a", Type: OK}}
	torn := `{"time":9,"process":"a","ty`
	for _, tc := range []struct {
		name     string
		h        History
		restarts int
	}{{"ordered", ordered, 0}, {"unordered", unordered, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, "h.jsonl", lines(tc.h)+torn)
			var got History
			restarts, before := 0, 0
			cuts, err := ScanFilesOrSort([]string{p}, func() { restarts, before, got = restarts+1, len(got), nil }, func(b []Op) error {
				got = append(got, b...)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if want := Merge(tc.h); restarts != tc.restarts || !reflect.DeepEqual(got, want) {
				t.Errorf("%d restarts, ops %v; want %d, %v", restarts, got, tc.restarts, want)
			}
			if tc.restarts > 0 && before == 0 {
				t.Error("nothing streamed before the restart: the test does not show that restart is needed")
			}
			if len(cuts) != 1 || cuts[0].Line != int64(len(tc.h)+1) {
				t.Errorf("cuts = %v, want the torn last line", cuts)
			}
		})
	}
	stop := errors.New("stop")
	if _, err := ScanFilesOrSort([]string{writeFile(t, "u.jsonl", lines(unordered))}, func() {}, func([]Op) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("err = %v, want fn's", err)
	}
}

func TestRecorder(t *testing.T) {
	p := filepath.Join(t.TempDir(), "consumer-1.jsonl")
	base := time.Now()
	r, err := NewRecorder(p, "consumer-1", base)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Record(OK, Deliver, Value{Event: "e1", Consumer: "c"}); err != nil {
		t.Fatal(err)
	}
	r.Close()
	// A torn line from a killed incarnation, then a new incarnation.
	f, _ := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"index":1,"time":`)
	f.Close()
	r, err = NewRecorder(p, "consumer-1", base)
	if err != nil {
		t.Fatal(err)
	}
	op, err := r.Record(OK, Apply, Value{Event: "e1", Consumer: "c"})
	if err != nil || op.Index != 0 || op.Process != "consumer-1" {
		t.Fatalf("Record = %+v, %v", op, err)
	}
	r.Close()
	if _, err := r.Record(OK, Ack, Value{}); err == nil {
		t.Error("Record after Close succeeded")
	}
	h, cuts, err := ReadFile(p)
	if err != nil || len(h) != 2 || len(cuts) != 1 || cuts[0].Line != 2 {
		t.Fatalf("ReadFile = %v, %v, %v", h, cuts, err)
	}
	if h[0].F != Deliver || h[1].F != Apply || h[1].Time < h[0].Time {
		t.Errorf("ops = %v", h)
	}
}

func TestRecorderOneWritePerOp(t *testing.T) {
	var w countingWriter
	r := NewWriterRecorder(&w, "p", time.Now())
	for range 3 {
		r.Record(Invoke, Commit, Value{Event: "e"})
	}
	if w.writes != 3 || bytes.Count(w.buf.Bytes(), []byte("\n")) != 3 {
		t.Errorf("writes = %d, content %q", w.writes, w.buf.String())
	}
}

type countingWriter struct {
	buf    bytes.Buffer
	writes int
}

func (w *countingWriter) Write(b []byte) (int, error) { w.writes++; return w.buf.Write(b) }
