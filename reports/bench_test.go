package reports

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/history/historytest"
)

// BenchmarkHTML renders the report of a generated history of
// historytest.BenchOps ops (DELIVERYCHECK_BENCH_OPS=1000000 for the 1M-op
// figure), its clock stretched so the run lasts about 12 minutes per
// million ops (every series is then full: 600 buckets), with a dense fault
// schedule: one fault window and one crash and restart every second. It
// reports the page size; the time per op is the render time (checking is
// not timed). $DELIVERYCHECK_BENCH_HTML names a file to keep the page in.
func BenchmarkHTML(b *testing.B) {
	path := stretchedHistory(b, historytest.BenchOps(b), 1000)
	res, err := checker.CheckFiles([]string{path}, checker.Options{})
	if err != nil {
		b.Fatal(err)
	}
	run := Record{Scenario: "bench", Command: "deliverycheck run bench --seed 1"}
	if err := run.FillFromHistory([]string{path}); err != nil {
		b.Fatal(err)
	}
	span := int64(res.Series.Buckets) * res.Series.BucketNanos
	for t := int64(0); t < span; t += int64(time.Second) {
		run.Faults = append(run.Faults, FaultWindow{Name: "partition", Target: "relay-0→broker", Start: t, End: t + int64(400*time.Millisecond)})
		run.Marks = append(run.Marks, Mark{Time: t + int64(500*time.Millisecond), Kind: MarkCrash, Target: "consumer-inventory-0"},
			Mark{Time: t + int64(700*time.Millisecond), Kind: MarkRestart, Target: "consumer-inventory-0"})
	}
	var buf bytes.Buffer
	if err := HTML(&buf, run, res); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := HTML(io.Discard, run, res); err != nil {
			b.Fatal(err)
		}
	}
	if keep := os.Getenv("DELIVERYCHECK_BENCH_HTML"); keep != "" {
		if err := os.WriteFile(keep, buf.Bytes(), 0o644); err != nil {
			b.Error(err)
		}
	}
	b.ReportMetric(float64(buf.Len()), "html-bytes")
	b.ReportMetric(float64(res.Counts.Ops), "history-ops")
}

// The page of a long run stays small however many ops it had: the series
// are per bucket and every plot is capped in points, bands and marks.
func TestHTMLSizeBounded(t *testing.T) {
	f := fixture{drain: history.OK}
	res := f.result()
	const buckets = checker.MaxBuckets
	s := &res.Series
	s.Buckets, s.BucketNanos = buckets, int64(time.Minute)
	for i := range s.Throughput {
		s.Throughput[i].Counts = make([]int64, buckets)
		for j := range buckets {
			s.Throughput[i].Counts[j] = int64(1000000 + j)
		}
	}
	s.Latency = nil
	for j := range buckets {
		s.Latency = append(s.Latency, checker.LatencyPoint{Bucket: j, Count: 100, P50: 1e7, P95: 5e7, P99: 9e7, Max: 2e9})
	}
	run := f.run()
	for j := range 10000 {
		at := int64(j) * int64(3*time.Second)
		run.Faults = append(run.Faults, FaultWindow{Name: "kill", Target: "relay-0", Start: at, End: at + int64(time.Second)})
		run.Marks = append(run.Marks, Mark{Time: at, Kind: MarkCrash, Target: "relay-0"})
	}
	var b bytes.Buffer
	if err := HTML(&b, run, res); err != nil {
		t.Fatal(err)
	}
	if b.Len() > 1<<20 {
		t.Errorf("page of a 10-hour run with 10000 faults is %d bytes; want under 1 MiB", b.Len())
	}
}

// stretchedHistory writes a historytest history of about ops ops with
// every time multiplied by factor (the generator spaces ops 700ns apart,
// so a million ops would last under a second).
func stretchedHistory(b *testing.B, ops, factor int64) string {
	b.Helper()
	src, _ := historytest.File(b, ops)
	in, err := os.Open(src)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	path := filepath.Join(b.TempDir(), "history.jsonl")
	out, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(out, 1<<20)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var op history.Op
	var line []byte
	for sc.Scan() {
		if err := history.UnmarshalLine(sc.Bytes(), &op); err != nil {
			b.Fatal(err)
		}
		op.Time *= factor
		line = append(op.AppendJSON(line[:0]), '\n')
		w.Write(line)
	}
	if err := errors.Join(sc.Err(), w.Flush(), out.Close()); err != nil {
		b.Fatal(err)
	}
	return path
}
