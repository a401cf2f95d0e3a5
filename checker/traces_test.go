package checker

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/internal/trace"
)

// tracesRun commits e1..e5 to inventory, each event's ops carrying
// traces as its case says: e1 one trace throughout (propagated), e2 a
// publish in another trace (broken), e3 a delivery without one
// (dropped), e4 none at all (untraced), and e5 never committed (not
// counted).
func tracesRun() history.History {
	b := new(builder).setup([]string{"inventory"}, nil)
	type hop struct{ commit, publish, deliver string }
	t1, t2, t3 := trace.New(), trace.New(), trace.New()
	hops := map[string]hop{
		"e1": {t1, trace.Child(t1), trace.Child(t1)},
		"e2": {t2, trace.New(), trace.Child(t2)},
		"e3": {t3, trace.Child(t3), ""},
		"e4": {},
	}
	for i, id := range []string{"e1", "e2", "e3", "e4"} {
		h := hops[id]
		at := int64(i+1) * sec
		c := ev(id, "k"+id, 1)
		c.Trace = h.commit
		b.at(at, "producer-1", history.Invoke, history.Commit, c)
		b.at(at+1, "producer-1", history.OK, history.Commit, c)
		p := ev(id, "k"+id, 1)
		p.Trace = h.publish
		b.at(at+2, "relay-0", history.OK, history.Publish, p)
		d := kv(id, "inventory", "k"+id, 1)
		d.Trace = h.deliver
		b.at(at+3, "consumer-inventory-0", history.OK, history.Deliver, d)
		b.at(at+4, "consumer-inventory-0", history.OK, history.Apply, d)
	}
	f := ev("e5", "ke5", 1)
	f.Trace = trace.New()
	b.at(6*sec, "producer-1", history.Invoke, history.Commit, f)
	b.at(6*sec+1, "producer-1", history.Fail, history.Commit, f)
	b.at(7*sec, "harness", history.OK, history.Drain, history.Value{})
	return b.finalRead(effect("e1", "inventory"), effect("e2", "inventory"), effect("e3", "inventory"), effect("e4", "inventory")).h
}

func TestTraces(t *testing.T) {
	h := tracesRun()
	var want []byte
	for _, shards := range []int{1, 2, 3} {
		r := Check(h, Options{Shards: shards})
		if r.Valid != Valid {
			t.Fatalf("%d shards: %s %v", shards, r.Valid, r.Reasons)
		}
		tr := r.Traces
		if tr == nil {
			t.Fatalf("%d shards: no traces section", shards)
		}
		if tr.Events != 4 || tr.Propagated != 1 || tr.Broken != 1 || tr.Dropped != 1 || tr.Untraced != 1 {
			t.Errorf("%d shards: %+v", shards, *tr)
		}
		if !slices.Equal(tr.Examples, []string{"e2", "e3"}) {
			t.Errorf("%d shards: examples %v, want [e2 e3]", shards, tr.Examples)
		}
		got, _ := json.Marshal(tr)
		if want == nil {
			want = got
		} else if string(got) != string(want) {
			t.Errorf("%d shards: %s, want %s", shards, got, want)
		}
	}
}

// A history whose ops carry no trace has no traces section: older
// histories, and pipelines that do not record one, are not judged.
func TestTracesAbsent(t *testing.T) {
	b := new(builder).setup([]string{"inventory"}, nil).commit("e1", "k", 1, history.OK)
	b.at(sec, "consumer-inventory-0", history.OK, history.Deliver, kv("e1", "inventory", "k", 1))
	b.at(sec+1, "consumer-inventory-0", history.OK, history.Apply, kv("e1", "inventory", "k", 1))
	b.at(2*sec, "harness", history.OK, history.Drain, history.Value{})
	if r := Check(b.finalRead(effect("e1", "inventory")).h, Options{}); r.Traces != nil {
		t.Fatalf("traces %+v, want none", *r.Traces)
	}
}

// TestWriteTracesGolden writes testdata/traces.jsonl from tracesRun when
// DELIVERYCHECK_WRITE_GOLDEN is set, so TestGolden holds a history with
// traces to its results schema.
func TestWriteTracesGolden(t *testing.T) {
	if os.Getenv("DELIVERYCHECK_WRITE_GOLDEN") == "" {
		t.Skip("set DELIVERYCHECK_WRITE_GOLDEN to write testdata/traces.jsonl")
	}
	var b []byte
	for _, op := range tracesRun() {
		b = op.AppendJSON(b)
		b = append(b, '\n')
	}
	if err := os.WriteFile(filepath.Join("testdata", "traces.jsonl"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}
