package netns

import (
	"context"
	"testing"
	"time"
)

// BenchmarkNetwork3 makes and removes a 3-node network: what a 3-node
// cluster's cold start pays before its first server starts, and its
// teardown after.
func BenchmarkNetwork3(b *testing.B) {
	testenvCheck(b)
	ctx := context.Background()
	var up, down time.Duration
	for b.Loop() {
		t0 := time.Now()
		n, err := New(ctx, Options{Nodes: []string{"kafka-0", "kafka-1", "kafka-2"}})
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := n.Close(); err != nil {
			b.Fatal(err)
		}
		up, down = up+t1.Sub(t0), down+time.Since(t1)
	}
	b.ReportMetric(float64(up.Milliseconds())/float64(b.N), "new-ms/op")
	b.ReportMetric(float64(down.Milliseconds())/float64(b.N), "close-ms/op")
}

// BenchmarkPartition isolates one node of three and heals it (with the
// evidence read at heal): what one partition step of a schedule costs.
func BenchmarkPartition(b *testing.B) {
	n := newNetwork(b, "a", "b", "c")
	ctx := context.Background()
	for b.Loop() {
		f, err := n.Partition(ctx, []string{"a"}, []string{"b", "c"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := f.Heal(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPartitionPort cuts one port between a node and two others and
// heals it (with the evidence read at heal): one cut-replication step.
func BenchmarkPartitionPort(b *testing.B) {
	n := newNetwork(b, "a", "b", "c")
	ctx := context.Background()
	for b.Loop() {
		f, err := n.PartitionPort(ctx, 9093, []string{"a"}, []string{"b", "c"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := f.Heal(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
