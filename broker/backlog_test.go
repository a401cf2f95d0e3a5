package broker

import (
	"context"
	"testing"
	"time"
)

// The Kafka backlog is the group's lag: everything before the first
// commit, less what the group acked, summed over the partitions Lags
// lists one by one; the reader's kept client answers every call, and a
// closed reader dials again.
func TestKafkaBacklogReader(t *testing.T) {
	cfg := kafkaTopic(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := NewKafkaBacklogReader(cfg)
	defer r.Close()
	want := func(n int64) {
		t.Helper()
		got, err := r.Backlog(ctx, "g")
		if err != nil {
			t.Fatal(err)
		}
		if got != n {
			t.Fatalf("backlog %d, want %d", got, n)
		}
	}
	// The group coordinator comes up on first use: until then the
	// broker answers COORDINATOR_NOT_AVAILABLE, and the reader redials.
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := r.Backlog(ctx, "g")
		if err == nil {
			if n != 0 {
				t.Fatalf("backlog of an empty topic: %d", n)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	p := kafkaPublisher(t, cfg, KafkaPublisherOptions{})
	kafkaPublishAll(t, p, kafkaEvents("backlog", 12, 4))
	want(12)
	wantLags := func(total int64) {
		t.Helper()
		lags, err := r.Lags(ctx, "g")
		if err != nil {
			t.Fatal(err)
		}
		if len(lags) != 3 || sumLags(lags) != total {
			t.Fatalf("lags %+v, want 3 partitions summing to %d", lags, total)
		}
		for i, l := range lags {
			if l.Partition != int32(i) || l.Lag != l.End-l.Committed {
				t.Fatalf("lag of partition %d: %+v", i, l)
			}
		}
	}
	wantLags(12)
	s := kafkaSubscriber(t, cfg, "g")
	kafkaReceiveAll(t, s, 12, time.Minute) // acking each, and Ack waits for the commit
	want(0)
	wantLags(0)
	r.Close()
	kafkaPublishAll(t, p, kafkaEvents("backlog-more", 3, 3))
	want(3)
}

// The RabbitMQ backlog is what waits in the queue; a missing queue is an
// error that costs the reader its channel, and the next call recovers.
func TestRabbitBacklogReader(t *testing.T) {
	rt := newRabbitTest(t, []string{"inventory"}, nil)
	r := NewRabbitBacklogReader(rt.cfg)
	defer r.Close()
	want := func(n int64) {
		t.Helper()
		got, err := r.Backlog(rt.ctx, rt.sub(0))
		if err != nil {
			t.Fatal(err)
		}
		if got != n {
			t.Fatalf("backlog %d, want %d", got, n)
		}
	}
	want(0)
	rt.publishOK(rt.publisher(RabbitConfirmed), events("backlog", 5))
	want(5)
	if _, err := r.Backlog(rt.ctx, rt.sub(0)+".missing"); err == nil {
		t.Fatal("backlog of a missing queue: no error")
	}
	want(5)
}
