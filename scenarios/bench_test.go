package scenarios

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkParse decodes and validates every built-in scenario file, the
// work `deliverycheck run` and `suite` do before anything starts.
func BenchmarkParse(b *testing.B) {
	paths, err := filepath.Glob(filepath.Join("builtin", "*.yaml"))
	if err != nil || len(paths) == 0 {
		b.Fatalf("no built-in scenarios: %v", err)
	}
	files := make(map[string][]byte, len(paths))
	size := 0
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			b.Fatal(err)
		}
		files[p] = data
		size += len(data)
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		for p, data := range files {
			if _, err := Parse(p, data); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkSet applies one --set override, as the CLI does per flag.
func BenchmarkSet(b *testing.B) {
	s := Builtin()[0]
	b.ReportAllocs()
	for b.Loop() {
		c := s
		if err := c.Set("workload.rate", "500"); err != nil {
			b.Fatal(err)
		}
	}
}
