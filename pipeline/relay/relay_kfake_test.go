package relay

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/history"
)

// TestKfakeLostAnswerRepublishedMarkedOnce: a batch whose produce answer
// is lost is confirmed by nobody, so the relay marks none of it, records
// each publish as indeterminate (info, not fail: the broker did write
// it), and publishes it again with the next attempt number until a
// publish is confirmed; only that one marks the row, so each row is
// marked published exactly once.
//
// The relay's marks are SQL (claimAndPublish keeps the mark on the rows
// publish confirmed and clears it on the rest, so the next claim takes
// those again), so without PostgreSQL the test drives publish, where the
// relay decides which rows those are, and plays the claims itself: each
// round publishes the rows not confirmed yet. Against franz-go's fake
// broker (kfake), in milliseconds; the broker package's
// TestKfakeProduceAnswerLost covers the ways an answer can be lost.
//
// Flow: the broker holds the batch's produce request until the relay
// stops waiting (its ctx ends), then writes it; its answer goes to a
// connection the client has closed. The relay republishes until every row
// is confirmed.
func TestKfakeLostAnswerRepublishedMarkedOnce(t *testing.T) {
	const topic = "events"
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic, topic+".dlq"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	pub, err := broker.NewKafkaPublisher(broker.KafkaConfig{
		Seeds: cluster.ListenAddrs(), Topic: topic, Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
	}, broker.KafkaPublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	var hist bytes.Buffer
	r, err := New(Config{Variant: Polling}, nil, pub, history.NewWriterRecorder(&hist, "relay-0", time.Now()), nil)
	if err != nil {
		t.Fatal(err)
	}
	batch := make([]row, 3)
	for i := range batch {
		batch[i] = row{seq: int64(i + 1), ev: broker.Event{
			ID: fmt.Sprintf("ev-%d", i+1), Source: "test", Key: "agg-1", Version: int64(i + 1),
			Type: "OrderPlaced", Payload: []byte("{}"),
		}}
	}
	warm := []broker.Event{{ID: "warm", Source: "test", Key: "agg-0", Version: 1, Type: "OrderPlaced"}}
	if err := pub.Publish(context.Background(), warm)[0]; err != nil {
		t.Fatalf("warm-up publish: %v", err)
	}

	held, giveUp := make(chan struct{}), make(chan struct{})
	heal := sync.OnceFunc(func() { close(giveUp) })
	defer heal() // also when the test stops early
	cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		close(held)
		cluster.SleepControl(func() { <-giveUp })
		cluster.DropControl()
		return nil, nil, false // written now; the answer goes nowhere
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-held:
		case <-time.After(5 * time.Second):
		}
		cancel() // the relay's PublishTimeout
	}()
	first, err := r.publish(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	heal()
	select {
	case <-held:
	default:
		t.Fatal("the batch never reached the broker")
	}
	if len(first) != 0 {
		t.Errorf("first round confirmed seqs %v, whose answers were lost", first)
	}

	// The next claims: every row not marked yet.
	marked := slices.Clone(first)
	deadline := time.Now().Add(5 * time.Second)
	for {
		pending := slices.DeleteFunc(slices.Clone(batch), func(x row) bool { return slices.Contains(marked, x.seq) })
		if len(pending) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rows %v not confirmed within 5s", pending)
		}
		confirmed, err := r.publish(context.Background(), pending)
		if err != nil {
			t.Fatal(err)
		}
		marked = append(marked, confirmed...)
	}
	slices.Sort(marked)
	if want := []int64{1, 2, 3}; !slices.Equal(marked, want) {
		t.Errorf("rows marked over all rounds: %v, want each of %v once", marked, want)
	}

	h, _, err := history.Read(&hist, "relay history")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, op := range h {
		got[op.Value.Event] = append(got[op.Value.Event], fmt.Sprintf("%s/%d", op.Type, op.Value.Attempt))
	}
	t.Logf("%s: %v", batch[0].ev.ID, got[batch[0].ev.ID])
	for _, b := range batch {
		// invoke/1 info/1 ... invoke/k ok/k, with k >= 2.
		ops := got[b.ev.ID]
		var want []string
		for a := 1; a <= len(ops)/2; a++ {
			end := "info"
			if a == len(ops)/2 {
				end = "ok"
			}
			want = append(want, fmt.Sprintf("invoke/%d", a), fmt.Sprintf("%s/%d", end, a))
		}
		if len(ops) < 4 || !slices.Equal(ops, want) {
			t.Errorf("%s: publishes %v, want info for the lost one, then info until the ok", b.ev.ID, ops)
		}
	}
}
