package relay

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/internal/testenv"
)

// An unconfirmed relay whose client still holds events it reported
// published (the broker unreachable: they wait in franz-go's buffer) is
// not idle, however empty its outbox; once the client has sent them or
// failed them, it is. Seen in bad-unconfirmed: the drain ended on the
// relay's idle polls while 122 events waited in its client for the
// killed broker to come back, stopped the consumers, and the final read
// then found the events in the broker, never delivered.
func TestNotIdleWhileClientHoldsEvents(t *testing.T) {
	hole := blackHole(t) // accepts, never answers: no metadata, no send
	pub, err := broker.NewKafkaPublisher(broker.KafkaConfig{
		Seeds: []string{hole}, Topic: "events", Logger: slog.New(slog.DiscardHandler),
	}, broker.KafkaPublisherOptions{Mode: broker.KafkaUnconfirmed, DeliveryTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	r, err := New(Config{Variant: Unconfirmed, Name: "relay-0"}, nil, pub, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	evs := []broker.Event{{ID: "ev-1", Source: "test", Key: "agg-1", Version: 1, Type: "OrderPlaced", Payload: []byte("{}")}}
	for _, err := range pub.Publish(context.Background(), evs) {
		if err != nil {
			t.Fatalf("unconfirmed publish: %v", err) // handed off: ok
		}
	}
	var ex idleNotes
	commit := func(context.Context) error { return nil }
	if err := r.noteIdle(context.Background(), &ex, commit); err != nil {
		t.Fatal(err)
	}
	if n := ex.count(); n != 0 {
		t.Fatalf("the client holds %d events, and the relay noted itself idle", pub.Held())
	}
	// The delivery timeout fails the held record: nothing is held, and
	// the relay is idle.
	testenv.Eventually(t, context.Background(), 10*time.Second, "the relay notes itself idle once its client holds nothing", func() error {
		if err := r.noteIdle(context.Background(), &ex, commit); err != nil {
			return err
		}
		if ex.count() == 0 {
			return fmt.Errorf("not noted idle; the client holds %d events", pub.Held())
		}
		return nil
	})
}

// idleNotes counts the relay's idle notes (its only statement).
type idleNotes struct {
	mu sync.Mutex
	n  int
}

func (x *idleNotes) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.n++
	return pgconn.CommandTag{}, nil
}

func (x *idleNotes) count() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.n
}

// blackHole listens on loopback and holds every connection open without
// a byte in answer, until the test ends.
func blackHole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}
