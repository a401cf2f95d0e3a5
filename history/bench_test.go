package history_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/history/historytest"
)

// BenchmarkScanFiles measures decoding alone: the baseline the checker's
// overhead is measured against.
func BenchmarkScanFiles(b *testing.B) {
	path, _ := historytest.File(b, historytest.BenchOps(b))
	st, _ := os.Stat(path)
	b.SetBytes(st.Size())
	var ops int64
	cpu := historytest.CPUTime()
	for b.Loop() {
		rep, err := history.ScanFiles([]string{path}, func([]history.Op) error { return nil })
		if err != nil {
			b.Fatal(err)
		}
		ops = rep.Ops
	}
	b.ReportMetric(float64(historytest.CPUTime()-cpu)/float64(ops)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(ops)*float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkEncodingJSON decodes the same lines with encoding/json on one
// core, for scale.
func BenchmarkEncodingJSON(b *testing.B) {
	path, _ := historytest.File(b, min(historytest.BenchOps(b), 200000))
	h, _, err := history.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	lines := make([][]byte, len(h))
	for i, op := range h {
		lines[i] = op.AppendJSON(nil)
	}
	b.ResetTimer()
	var op history.Op
	for b.Loop() {
		for _, l := range lines {
			op = history.Op{}
			if err := json.Unmarshal(l, &op); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(len(lines))*float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkUnmarshalLine is the fast decoder on one core.
func BenchmarkUnmarshalLine(b *testing.B) {
	path, _ := historytest.File(b, min(historytest.BenchOps(b), 200000))
	h, _, err := history.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	lines := make([][]byte, len(h))
	for i, op := range h {
		lines[i] = op.AppendJSON(nil)
	}
	b.ResetTimer()
	var op history.Op
	for b.Loop() {
		for _, l := range lines {
			if err := history.UnmarshalLine(l, &op); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(len(lines))*float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}
