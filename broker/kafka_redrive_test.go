package broker

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKafkaRedrive: subscription g's redrive republishes its dead letters
// to the events topic for g alone, keeps the one it did not ack, passes
// over h's; g's consumers get the copies, h's commit past them; the final
// read sees only what is still a dead letter, and a purge of g leaves h's.
func TestKafkaRedrive(t *testing.T) {
	cfg := kafkaTopic(t, 1)
	p := kafkaPublisher(t, cfg, KafkaPublisherOptions{})
	evs := kafkaEvents("redrive", 4, 4)
	kafkaPublishAll(t, p, evs)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// g dead-letters the first three, h the last.
	g, h := kafkaSubscriber(t, cfg, "g"), kafkaSubscriber(t, cfg, "h")
	for i := range evs {
		for _, s := range []*KafkaSubscriber{g, h} {
			d := kafkaNext(t, s, 30*time.Second)
			if (s == g) == (i < 3) {
				if err := s.DeadLetter(ctx, d, "test"); err != nil {
					t.Fatal(err)
				}
			} else {
				kafkaAck(t, s, d)
			}
		}
	}
	if n, err := KafkaDeadLetterCount(ctx, cfg, "g"); err != nil || n != 3 {
		t.Fatalf("g's dead letters: %d, %v; want 3", n, err)
	}

	r, err := OpenKafkaRedrive(ctx, cfg, "g")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		m, ok, err := r.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got = append(got, m.Event.ID)
		if m.Event.ID == evs[1].ID {
			continue // kept
		}
		if err := r.Republish(ctx, m, m.Event.ID, 1); err != nil {
			t.Fatal(err)
		}
		if err := r.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	r.Close()
	if want := []string{evs[0].ID, evs[1].ID, evs[2].ID}; !slices.Equal(got, want) {
		t.Fatalf("redrive read %v, want %v", got, want)
	}
	// A second redrive classifies again what the first kept, and only
	// that; kept again, it stays a dead letter.
	if r, err = OpenKafkaRedrive(ctx, cfg, "g"); err != nil {
		t.Fatal(err)
	}
	got = nil
	for {
		m, ok, err := r.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got = append(got, m.Event.ID)
	}
	r.Close()
	if want := []string{evs[1].ID}; !slices.Equal(got, want) {
		t.Fatalf("second redrive read %v, want %v", got, want)
	}

	// g gets the two copies, marked; h commits past them.
	for _, want := range []string{evs[0].ID, evs[2].ID} {
		d := kafkaNext(t, g, 30*time.Second)
		if d.ID != want || d.Headers[HeaderRedriveSubscription] != "g" || d.Headers[HeaderRedriveAttempt] != "1" || d.Headers[HeaderReason] != "" {
			t.Fatalf("g got %s %v, want %s redriven", d.ID, d.Headers, want)
		}
		kafkaAck(t, g, d)
	}
	short, stop := context.WithTimeout(ctx, 3*time.Second)
	defer stop()
	if d, err := h.Next(short); err == nil {
		t.Fatalf("h was handed g's redrive copy %s", d.ID)
	}
	deadline := time.Now().Add(20 * time.Second)
	for kafkaCommitted(t, cfg, "h")[0] != 6 {
		if time.Now().After(deadline) {
			t.Fatalf("h committed %v, want past both copies (6)", kafkaCommitted(t, cfg, "h"))
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Still dead letters: g's kept one and h's.
	dls, err := KafkaDeadLetters(ctx, cfg, []string{"g", "h"})
	if err != nil {
		t.Fatal(err)
	}
	if ids := deadLetterIDs(dls); !slices.Equal(ids, []string{evs[1].ID, evs[3].ID}) {
		t.Fatalf("dead letters %v, want the kept one and h's", ids)
	}
	if n, err := KafkaPurgeDLQ(ctx, cfg, "g"); err != nil || n != 1 {
		t.Fatalf("purge: %d, %v; want 1", n, err)
	}
	dls, err = KafkaDeadLetters(ctx, cfg, []string{"g", "h"})
	if err != nil {
		t.Fatal(err)
	}
	if ids := deadLetterIDs(dls); !slices.Equal(ids, []string{evs[3].ID}) {
		t.Fatalf("dead letters after the purge %v, want h's", ids)
	}
}

func deadLetterIDs(dls []DeadLetter) []string {
	out := make([]string, len(dls))
	for i, d := range dls {
		out[i] = d.Event
	}
	return out
}

// TestKafkaSubscriberSettlesForeignRedrive: in a batch, another
// subscription's redrive copy ends its partition's share (what is before
// it is not yet settled); once it reaches the head it is committed past
// without being handed out, and the records after it come next.
func TestKafkaSubscriberSettlesForeignRedrive(t *testing.T) {
	cfg := kafkaTopic(t, 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Seeds...), kgo.DefaultProduceTopic(cfg.Topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rec := func(id, to string) *kgo.Record {
		r := &kgo.Record{Key: []byte("k"), Value: []byte("{}"), Headers: []kgo.RecordHeader{{Key: HeaderEventID, Value: []byte(id)}}}
		if to != "" {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderRedriveSubscription, Value: []byte(to)})
		}
		return r
	}
	if err := cl.ProduceSync(ctx, rec("a", ""), rec("f", "other"), rec("b", "g"), rec("c", "")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	s := kafkaSubscriber(t, cfg, "g")
	var got []string
	for len(got) < 3 {
		ds, err := s.NextBatch(ctx, 10, nil)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, d := range ds {
			ids = append(ids, d.ID)
			kafkaAck(t, s, d)
		}
		if len(got) == 0 && !slices.Equal(ids, []string{"a"}) {
			t.Fatalf("first batch %v, want [a]: it ends before the foreign copy", ids)
		}
		got = append(got, ids...)
	}
	if !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("handed out %v, want a, b (its own redrive copy), c", got)
	}
	if c := kafkaCommitted(t, cfg, "g")[0]; c != 4 {
		t.Fatalf("committed %d, want 4", c)
	}
}

// TestKafkaRedrivePosFit: kept offsets that do not fit a commit's
// metadata hold the position back at the first that does not, and what
// is committed reads back the same.
func TestKafkaRedrivePosFit(t *testing.T) {
	many := make([]int64, 1000)
	for i := range many {
		many[i] = 100000 + int64(2*i) // 6 digits each: 7 bytes with the comma
	}
	for _, c := range []struct {
		name     string
		pos      kafkaRedrivePos
		wantAt   int64
		wantKept int
	}{
		{"none kept", kafkaRedrivePos{at: 7}, 7, 0},
		{"a few, unsorted", kafkaRedrivePos{at: 9, kept: []int64{5, 2}}, 9, 2},
		{"too many", kafkaRedrivePos{at: 200000, kept: many}, many[(kafkaMaxMetadata-len(kafkaKeptPrefix)+1)/7], (kafkaMaxMetadata - len(kafkaKeptPrefix) + 1) / 7},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := c.pos.fit()
			if got.at != c.wantAt || len(got.kept) != c.wantKept {
				t.Fatalf("fit: at %d with %d kept, want at %d with %d", got.at, len(got.kept), c.wantAt, c.wantKept)
			}
			meta := got.metadata()
			if len(meta) > kafkaMaxMetadata {
				t.Fatalf("metadata of %d bytes", len(meta))
			}
			kept, err := parseKept(meta)
			if err != nil || !slices.Equal(kept, got.kept) || !slices.IsSorted(kept) {
				t.Fatalf("read back %v, %v; committed %v", kept, err, got.kept)
			}
			for _, o := range got.kept {
				if o >= got.at {
					t.Fatalf("kept %d at or past the position %d", o, got.at)
				}
			}
		})
	}
}
