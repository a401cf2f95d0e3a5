package history

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// FuzzReadLine checks that the fast decoder agrees with encoding/json on
// every input, that UnmarshalLine is encoding/json then [CheckOp], and
// that Read never panics and never loses a readable line.
func FuzzReadLine(f *testing.F) {
	for _, op := range sampleOps() {
		f.Add(op.String())
	}
	f.Add(`{"index":1,"time":2,"process":"p","type":"ok","f":"apply","value":{"event":"e\u0041","version":1.0}}`)
	f.Add(`{"Index":1,"TYPE":"ok","value":{"Event":"x","subscriptions":null}}`)
	f.Add(`{"index":01}`)
	f.Add(`{"index":-0,"value":{"poison":true,"published":false,"subscriptions":[]}} x`)
	f.Fuzz(func(t *testing.T, line string) {
		var fast Op
		d := decoder{b: []byte(line)}
		fastErr := d.op(&fast)
		var slow Op
		slowErr := json.Unmarshal([]byte(line), &slow)
		if fastErr == nil {
			if slowErr != nil {
				t.Fatalf("fast path accepted what encoding/json rejects (%v): %q", slowErr, line)
			}
			if !reflect.DeepEqual(fast, slow) {
				t.Fatalf("disagree on %q:\nfast %#v\njson %#v", line, fast, slow)
			}
		}
		if slowErr == nil {
			slowErr = CheckOp(&slow)
		}
		var got Op
		err := UnmarshalLine([]byte(line), &got)
		if (err == nil) != (slowErr == nil) || (err == nil && !reflect.DeepEqual(got, slow)) {
			t.Fatalf("UnmarshalLine(%q) = %#v, %v; json %#v, %v", line, got, err, slow, slowErr)
		}
		// As a file: the line twice, then the line as a torn tail.
		if strings.ContainsAny(line, "\n") {
			return
		}
		h, cuts, rerr := Read(strings.NewReader(line+"\n"+line), "fuzz")
		if slowErr == nil {
			if rerr != nil || len(h) != 2 || len(cuts) != 0 {
				t.Fatalf("Read of a good line twice: %d ops, cuts %v, %v", len(h), cuts, rerr)
			}
		} else if rerr == nil && len(h)+len(cuts) < 2 && !isBlank([]byte(line)) {
			t.Fatalf("Read dropped a line silently: %d ops, %v", len(h), cuts)
		}
	})
}
