package checker_test

import (
	"os"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/history/historytest"
)

// BenchmarkCheckFiles is the end-to-end figure: read, decode, merge and
// check a generated history file. Compare its ops/s with
// history.BenchmarkScanFiles on the same file for the checker's overhead.
// DELIVERYCHECK_BENCH_OPS=10000000 gives the 10M-op figures.
func BenchmarkCheckFiles(b *testing.B) {
	path, events := historytest.File(b, historytest.BenchOps(b))
	st, _ := os.Stat(path)
	b.SetBytes(st.Size())
	g, _ := checker.Preset("effectively-once")
	opts := checker.Options{Guarantees: g}
	var ops int64
	peak := watchHeap()
	cpu := historytest.CPUTime()
	for b.Loop() {
		r, err := checker.CheckFiles([]string{path}, opts)
		if err != nil {
			b.Fatal(err)
		}
		if r.Valid != checker.Valid {
			b.Fatalf("generated history is %s: %v", r.Valid, r.Reasons)
		}
		ops = r.Counts.Ops
	}
	b.StopTimer()
	b.ReportMetric(float64(historytest.CPUTime()-cpu)/float64(ops)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(ops)*float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	b.ReportMetric(float64(peak())/float64(events), "peak-heap-B/event")
}

// watchHeap samples the heap in use (live and not yet swept objects, plus
// unused span space) until the returned func is called and returns the
// peak above the starting point. It reads runtime/metrics, which does not
// stop the world.
func watchHeap() func() uint64 {
	runtime.GC()
	samples := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"}}
	inUse := func() uint64 {
		metrics.Read(samples)
		return samples[0].Value.Uint64() + samples[1].Value.Uint64()
	}
	base := inUse()
	var mu sync.Mutex
	var peak uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			n := inUse()
			mu.Lock()
			if n > base && n-base > peak {
				peak = n - base
			}
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 {
		close(stop)
		<-done
		mu.Lock()
		defer mu.Unlock()
		return peak
	}
}
