package local

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/deliverycheck/deliverycheck/cluster/netns"
	"github.com/deliverycheck/deliverycheck/internal/testenv"
)

// replicated is three nodes of service in a fresh network of their own,
// advertised at their own addresses (no links in front).
func replicated(t *testing.T, ctx context.Context, service string) ReplicatedOptions {
	t.Helper()
	testenv.SkipIfShort(t, "starts a 3-node "+service)
	testenv.MustHaveServer(t, "network namespaces", netns.Check())
	names := []string{service + "-0", service + "-1", service + "-2"}
	nw, err := netns.New(ctx, netns.Options{Nodes: names})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := nw.Close(); err != nil {
			t.Error(err)
		}
	})
	o := ReplicatedOptions{Network: nw, Nodes: names}
	for _, n := range names {
		o.Advertise = append(o.Advertise, nw.Addr(n).String()+":9092")
	}
	return o
}

// waitHealth polls check until its error matches want ("" for healthy).
func waitHealth(t *testing.T, ctx context.Context, check func(context.Context) error, want string) {
	t.Helper()
	waitFor(t, ctx, 90*time.Second, func() error {
		err := check(ctx)
		switch {
		case want == "" && err != nil:
			return err
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			return fmt.Errorf("health %v, want an error saying %q", err, want)
		}
		return nil
	})
}

// A RabbitMQ cluster is unhealthy while a quorum queue's member on one
// node does not run (a node back but its members not yet recovered), and
// while a node is down, and healthy again once each is back.
func TestRabbitMQClusterHealth(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := NewRabbitMQCluster(RabbitMQClusterOptions{ReplicatedOptions: replicated(t, ctx, "rabbitmq")})
	testenv.MustHaveServer(t, "rabbitmq", err)
	defer c.Close()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := amqp.DialConfig(amqpURL(c.Nodes()[1].Endpoint()), amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("health", true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}); err != nil {
		t.Fatal(err)
	}
	waitHealth(t, ctx, c.CheckHealth, "")

	n2 := c.Nodes()[2]
	member := func(call string) string {
		return `{ok, Q} = rabbit_amqqueue:lookup(rabbit_misc:r(<<"/">>, queue, <<"health">>)), {Name, _} = amqqueue:get_pid(Q), ok = ra:` + call + `(quorum_queues, {Name, node()}), "".`
	}
	if _, err := n2.eval(ctx, member("stop_server")); err != nil {
		t.Fatal(err)
	}
	waitHealth(t, ctx, c.CheckHealth, "rabbitmq-2: quorum queue members not running: health=noproc")
	if _, err := n2.eval(ctx, member("restart_server")); err != nil {
		t.Fatal(err)
	}
	waitHealth(t, ctx, c.CheckHealth, "")

	if err := n2.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	waitHealth(t, ctx, c.CheckHealth, "rabbitmq-2")
	if err := n2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitHealth(t, ctx, c.CheckHealth, "")
}

// A Kafka cluster is unhealthy while a node is down (fewer live brokers,
// its replicas out of the ISR) and healthy again once it is back and in
// sync.
func TestKafkaClusterHealth(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := NewKafkaCluster(KafkaClusterOptions{ReplicatedOptions: replicated(t, ctx, "kafka")})
	testenv.MustHaveServer(t, "kafka", err)
	defer c.Close()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	kc, err := kgo.NewClient(kgo.SeedBrokers(c.Nodes()[0].Endpoint()), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	if err := kc.ProduceSync(ctx, &kgo.Record{Topic: "health", Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	waitHealth(t, ctx, c.CheckHealth, "")
	n2 := c.Nodes()[2]
	if err := n2.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	waitHealth(t, ctx, c.CheckHealth, "kafka-2")
	waitHealth(t, ctx, func(ctx context.Context) error {
		// The others see the partitions it had without it.
		err := c.nodes[0].checkInSync(ctx, len(c.nodes))
		if err != nil && strings.Contains(err.Error(), "lists brokers") {
			return c.nodes[0].checkInSync(ctx, len(c.nodes)-1)
		}
		return err
	}, "under-replicated: health/0 in sync")
	if err := n2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitHealth(t, ctx, c.CheckHealth, "")
}
