package nemesis_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/cluster/netns"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/internal/testenv"
	"github.com/deliverycheck/deliverycheck/nemesis"
)

// A roll of a service that is not replicated, or of no cluster at all,
// cannot be injected, and says why.
func TestRollNeedsNodes(t *testing.T) {
	buf := &syncBuffer{}
	env := &nemesis.Env{Broker: "kafka", Log: slog.New(slog.DiscardHandler), Recorder: history.NewWriterRecorder(buf, "nemesis", time.Now())}
	st, err := nemesis.ParseStep("at 0s: roll broker for 1m")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Fault.Inject(context.Background(), env); err == nil || !strings.Contains(err.Error(), "no cluster") {
		t.Fatalf("roll without a cluster: %v", err)
	}
	if got, want := strings.Join(faultOps(buf.history(t)), ","), "invoke roll kafka,fail roll kafka error"; got != want {
		t.Errorf("ops %s, want %s", got, want)
	}
}

// TestNodeSteps starts a real 3-node Kafka and a 3-node RabbitMQ, one
// at a time, and runs on each the nemesis steps that need nodes: a roll on
// both, then a wipe on Kafka (on the cluster the roll left healthy: a
// cluster of its own cost a 3-node start, about 8 s of CI).
func TestNodeSteps(t *testing.T) {
	testenv.SkipIfShort(t, "starts 3-node Kafka and RabbitMQ clusters")
	testenv.MustHaveServer(t, "network namespaces", netns.Check())
	for _, svc := range []string{cluster.Kafka, cluster.RabbitMQ} {
		t.Run(svc, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
			defer cancel()
			cl, err := cluster.Start(ctx, cluster.Config{Services: []string{svc}, Nodes: map[string]int{svc: 3}})
			testenv.MustHaveServer(t, svc, err)
			defer cl.Close()
			t.Run("roll", func(t *testing.T) { checkRollStep(t, ctx, cl, svc) })
			if svc == cluster.Kafka {
				t.Run("wipe", func(t *testing.T) { checkWipeStep(t, ctx, cl) })
			}
		})
	}
}

// checkRollStep: a rolling restart of cl's 3-node svc, with data in
// replicated topics or quorum queues: every node restarts once, in
// order, each only once the service is healthy again, all inside the
// step's window, and the evidence names every node.
func checkRollStep(t *testing.T, ctx context.Context, cl *cluster.Cluster, svc string) {
	switch svc {
	case cluster.Kafka:
		fillKafka(t, ctx, cl.ClientURL(svc))
	case cluster.RabbitMQ:
		fillRabbitMQ(t, ctx, cl.NodeURLs(svc)[1])
	}
	buf := &syncBuffer{}
	env := &nemesis.Env{Cluster: cl, Broker: svc, Recorder: history.NewWriterRecorder(buf, "nemesis", time.Now())}
	st, err := nemesis.ParseStep("at 0s: roll broker for 4m")
	if err != nil {
		t.Fatal(err)
	}
	if err := nemesis.Fixed(st).Check(env); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := nemesis.Fixed(st).Run(ctx, env); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	var ops []string
	var ev string
	var back []time.Duration
	var stopped time.Duration
	for _, op := range buf.history(t) {
		switch op.F {
		case history.Restart:
			ops = append(ops, op.Type.String()+" restart "+op.Value.Target)
			if op.Type == history.Invoke {
				stopped = time.Duration(op.Time)
			} else {
				back = append(back, time.Duration(op.Time)-stopped)
			}
		case history.Fault:
			if op.Value.Fault == "schedule" {
				continue
			}
			ops = append(ops, op.Type.String()+" fault "+op.Value.Target)
			if op.Type == history.OK {
				ev = op.Value.Evidence
			}
		}
	}
	var want []string
	want = append(want, "invoke fault "+svc)
	for i := range 3 {
		n := cluster.NodeName(svc, i)
		want = append(want, "invoke restart "+n, "ok restart "+n)
	}
	want = append(want, "ok fault "+svc)
	if strings.Join(ops, ",") != strings.Join(want, ",") {
		t.Fatalf("ops\n%s\nwant\n%s", strings.Join(ops, "\n"), strings.Join(want, "\n"))
	}
	for i := range 3 {
		if n := cluster.NodeName(svc, i); !strings.Contains(ev, n+" back in ") {
			t.Errorf("evidence %q does not name %s's restart", ev, n)
		}
	}
	hc, err := cl.HealthChecker(svc)
	if err != nil {
		t.Fatal(err)
	}
	if err := hc.CheckHealth(ctx); err != nil {
		t.Errorf("not healthy after the roll: %v", err)
	}
	t.Logf("%s rolled in %v (each node down→back %v): %s", svc, took.Round(100*time.Millisecond), back, ev)
}

// fillKafka writes to a topic of three replicas (the cluster's default)
// so that the roll has replicas to wait for.
func fillKafka(t *testing.T, ctx context.Context, seeds string) {
	t.Helper()
	kc, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(seeds, ",")...), kgo.AllowAutoTopicCreation(), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	for i := range 200 {
		r := &kgo.Record{Topic: "roll", Value: fmt.Appendf(nil, "v%d", i)}
		if err := kc.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// fillRabbitMQ declares a quorum queue (a member on every node) and puts
// messages in it, so that the roll has members to wait for.
func fillRabbitMQ(t *testing.T, ctx context.Context, url string) {
	t.Helper()
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("roll", true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", "roll", false, false, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: fmt.Appendf(nil, "v%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			t.Fatalf("publish %d: ack %v, %v", i, ok, err)
		}
	}
}
