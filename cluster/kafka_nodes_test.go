package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/cluster/netns"
	"github.com/deliverycheck/deliverycheck/internal/testenv"
)

func TestKafkaNodes(t *testing.T) {
	testenv.SkipIfShort(t, "starts a 3-node Kafka cluster")
	testenv.MustHaveServer(t, "network namespaces", netns.Check())
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := cluster.Start(ctx, cluster.Config{Services: []string{cluster.Kafka}, Nodes: map[string]int{cluster.Kafka: 3}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ready in %v", time.Since(start))
	defer c.Close()
}
