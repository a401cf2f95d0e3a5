package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/cluster"
)

// BenchmarkColdStart measures starting PostgreSQL, Kafka and RabbitMQ
// from nothing until every one is ready (a real client call answered),
// on each runtime this machine has. Teardown is not timed. Compare the
// sub-benchmarks with benchstat: containers/local is the price of the
// containers runtime.
func BenchmarkColdStart(b *testing.B) {
	for _, rt := range benchRuntimes(b) {
		b.Run(rt, func(b *testing.B) {
			for b.Loop() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				c, err := cluster.Start(ctx, cluster.Config{Runtime: rt})
				cancel()
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := c.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

func benchRuntimes(b *testing.B) []string {
	out := []string{cluster.Local}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if rt, why := cluster.ResolveRuntime(ctx, cluster.Auto, cluster.ImageList(nil, cluster.Names())); rt == cluster.Containers {
		out = append(out, cluster.Containers)
	} else {
		b.Logf("containers runtime not measured: %s", why)
	}
	return out
}
