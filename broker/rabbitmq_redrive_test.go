package broker

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// deadLetterAll publishes evs to rt's first subscription and dead-letters
// each delivery, then waits until its dead-letter queue holds them all.
func (rt *rabbitTest) deadLetterAll(evs []Event) {
	rt.t.Helper()
	rt.publishOK(rt.publisher(RabbitConfirmed), evs)
	s := rt.subscriber(rt.sub(0))
	for range evs {
		if err := s.DeadLetter(rt.ctx, rt.next(s, 10*time.Second), "schema version 2 is not supported (accepts 1)"); err != nil {
			rt.t.Fatal(err)
		}
	}
	s.Close()
	dlq := RabbitDeadLetterQueue(rt.sub(0))
	waitFor(rt.t, rt.ctx, 10*time.Second, func() error {
		if n := rt.depth(dlq); n != len(evs) {
			return fmt.Errorf("%s holds %d, want %d", dlq, n, len(evs))
		}
		return nil
	})
}

// A redriven dead letter reaches the subscription's queue alone (not the
// other subscription's), with its identity and headers as published,
// without RabbitMQ's death headers, with its redrive attempt; acked, it
// has left the dead-letter queue. One redriven under a new id carries it
// in both message_id and event-id. One taken and not acked goes back.
func TestRabbitRedrive(t *testing.T) {
	rt := newRabbitTest(t, []string{"email", "inventory"}, nil)
	evs := events("rd", 3)
	rt.deadLetterAll(evs)
	r, err := OpenRabbitRedrive(rt.ctx, rt.cfg, rt.sub(0))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := r.Count(rt.ctx); err != nil || n != 3 {
		t.Fatalf("count %d, %v; want 3", n, err)
	}
	for i := range evs {
		m, ok, err := r.Next(rt.ctx)
		if err != nil || !ok {
			t.Fatalf("next: %v, %v", ok, err)
		}
		if m.Event.ID != evs[i].ID || m.Event.Key != evs[i].Key || string(m.Event.Payload) != string(evs[i].Payload) {
			t.Errorf("dead letter %+v, want %+v", m.Event, evs[i])
		}
		if m.Headers["x-death"] == "" {
			t.Errorf("dead letter of %s without x-death: %v", m.Event.ID, m.Headers)
		}
		switch i {
		case 0:
			err = r.Republish(rt.ctx, m, m.Event.ID, 1)
		case 1:
			err = r.Republish(rt.ctx, m, "fresh-id", 2)
		case 2:
			continue // kept: not acked, back in the queue at Close
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok, err := r.Next(rt.ctx); ok || err != nil {
		t.Fatalf("a fourth dead letter: %v, %v", ok, err)
	}
	r.Close()

	s := rt.subscriber(rt.sub(0))
	first := rt.next(s, 10*time.Second)
	sameIdentity(t, first, evs[0])
	for _, h := range []string{"x-death", "x-first-death-reason", "x-last-death-reason"} {
		if v, ok := first.Headers[h]; ok {
			t.Errorf("redriven message carries %s = %q", h, v)
		}
	}
	if first.Attempt != 1 || first.Headers[HeaderRedriveAttempt] != "1" {
		t.Errorf("attempt %d, %s %q; want 1, 1", first.Attempt, HeaderRedriveAttempt, first.Headers[HeaderRedriveAttempt])
	}
	second := rt.next(s, 10*time.Second)
	if second.ID != "fresh-id" || second.Headers[HeaderRedriveAttempt] != "2" || second.Key != evs[1].Key {
		t.Errorf("second %+v (headers %v), want fresh-id, attempt 2", second.Event, second.Headers)
	}
	if n := rt.depth(rt.sub(1)); n != 3 {
		t.Errorf("%s holds %d, want its own 3 and no redriven copy", rt.sub(1), n)
	}
	dlq := RabbitDeadLetterQueue(rt.sub(0))
	waitFor(t, rt.ctx, 10*time.Second, func() error {
		if n := rt.depth(dlq); n != 1 {
			return fmt.Errorf("%s holds %d, want the one kept", dlq, n)
		}
		return nil
	})
}

// A purge empties the dead-letter queue and says how much it threw away.
func TestRabbitPurgeDLQ(t *testing.T) {
	rt := newRabbitTest(t, []string{"email"}, nil)
	rt.deadLetterAll(events("pg", 2))
	ctx, cancel := context.WithTimeout(rt.ctx, 30*time.Second)
	defer cancel()
	n, err := RabbitPurgeDLQ(ctx, rt.cfg, rt.sub(0))
	if err != nil || n != 2 {
		t.Fatalf("purged %d, %v; want 2", n, err)
	}
	if d := rt.depth(RabbitDeadLetterQueue(rt.sub(0))); d != 0 {
		t.Errorf("after the purge the dead-letter queue holds %d", d)
	}
}
