package local

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/cluster/netns"
	"github.com/deliverycheck/deliverycheck/internal/testenv"
)

// A cluster the options cannot make is refused before anything is made.
func TestKafkaClusterOptionsRefused(t *testing.T) {
	three := []string{"kafka-0", "kafka-1", "kafka-2"}
	adv := []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}
	for _, tc := range []struct {
		name string
		o    KafkaClusterOptions
		want string
	}{
		{"no network", KafkaClusterOptions{ReplicatedOptions: ReplicatedOptions{Nodes: three, Advertise: adv}}, "no network"},
		{"one node", KafkaClusterOptions{ReplicatedOptions: ReplicatedOptions{Network: &netns.Network{}, Nodes: three[:1], Advertise: adv[:1]}}, "want 2 or more"},
		{"advertised short", KafkaClusterOptions{ReplicatedOptions: ReplicatedOptions{Network: &netns.Network{}, Nodes: three, Advertise: adv[:2]}}, "one each"},
		{"replication factor", KafkaClusterOptions{ReplicatedOptions: ReplicatedOptions{Network: &netns.Network{}, Nodes: three, Advertise: adv}, ReplicationFactor: 4}, "replication factor 4 on 3 nodes"},
		{"not in network", KafkaClusterOptions{ReplicatedOptions: ReplicatedOptions{Network: &netns.Network{}, Nodes: three, Advertise: adv}}, "kafka-0 is not in network"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewKafkaCluster(tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewKafkaCluster = %v, %v; want an error saying %q", c, err, tc.want)
			}
		})
	}
}

// Each node's server.properties: its own listeners, the links advertised
// to clients, node names between nodes, the quorum over node names, and
// the replication settings, the defaults and a scenario's known-bad ones.
func TestKafkaClusterConfigs(t *testing.T) {
	testenv.MustHaveServer(t, "network namespaces", netns.Check())
	nodes := []string{"kafka-0", "kafka-1", "kafka-2"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nw, err := netns.New(ctx, netns.Options{Nodes: nodes})
	if err != nil {
		t.Fatal(err)
	}
	defer nw.Close()
	ro := ReplicatedOptions{Network: nw, Nodes: nodes, Advertise: []string{"127.0.0.1:1000", "127.0.0.1:1001", "127.0.0.1:1002"}}
	common := []string{
		"process.roles=broker,controller",
		"controller.quorum.voters=0@kafka-0:9094,1@kafka-1:9094,2@kafka-2:9094",
		"inter.broker.listener.name=BROKER",
		"offsets.topic.replication.factor=3",
		"transaction.state.log.replication.factor=3",
		"transaction.state.log.min.isr=2",
		"replica.lag.time.max.ms=2000",
	}
	for _, tc := range []struct {
		name string
		o    KafkaClusterOptions
		want []string
	}{
		{"defaults", KafkaClusterOptions{ReplicatedOptions: ro}, []string{
			"default.replication.factor=3", "min.insync.replicas=2", "unclean.leader.election.enable=false",
		}},
		{"known-bad: min ISR 1 and unclean election", KafkaClusterOptions{ReplicatedOptions: ro, MinInsyncReplicas: 1, UncleanLeaderElection: true}, []string{
			"default.replication.factor=3", "min.insync.replicas=1", "unclean.leader.election.enable=true",
		}},
		{"known-bad: RF 1", KafkaClusterOptions{ReplicatedOptions: ro, ReplicationFactor: 1}, []string{
			"default.replication.factor=1", "min.insync.replicas=1",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfgs, err := tc.o.configs()
			if err != nil {
				t.Fatal(err)
			}
			if len(cfgs) != 3 {
				t.Fatalf("%d configs, want 3", len(cfgs))
			}
			for i, c := range cfgs {
				addr := nw.Addr(nodes[i]).String()
				props := c.properties()
				want := append(append([]string{
					"node.id=" + strconv.Itoa(i),
					"listeners=PLAINTEXT://" + addr + ":9092,BROKER://" + addr + ":9093,CONTROLLER://" + addr + ":9094",
					"advertised.listeners=PLAINTEXT://" + ro.Advertise[i] + ",BROKER://" + nodes[i] + ":9093",
				}, common...), tc.want...)
				for _, line := range want {
					if !strings.Contains(props, "\n"+line+"\n") {
						t.Errorf("%s: no line %q in\n%s", nodes[i], line, props)
					}
				}
			}
		})
	}
}
