package pipeline

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/pipeline/consumer"
	"github.com/deliverycheck/deliverycheck/pipeline/producer"
	"github.com/deliverycheck/deliverycheck/signing"
)

// forged is one event an intruder could publish, and the reason a correct
// consumer dead-letters it with (a prefix).
type forged struct {
	ev     broker.Event
	reason string
}

// forgeries are one event of each of the intruder's kinds
// (docs/security.md), made as it makes them, for a run with key and
// tenant acme that began at start.
func forgeries(key []byte, start time.Time) []forged {
	now := time.Now().UTC().Format(time.RFC3339Nano)
	ev := func(kind, key string, version int64, typ, tenant, at string) broker.Event {
		return broker.Event{ID: "forged-" + kind + "-" + strings.ToLower(start.Format("150405.000")), Source: producer.DefaultSource,
			Key: key, Version: version, Type: typ, Payload: producer.Payload(key, version, false), Tenant: tenant, Time: at}
	}
	wrong := ev("signature-wrong", "order-2", 1, producer.EventType, "acme", now)
	wrong.Signature = signing.Sign([]byte("a key the intruder made up"), wrong)
	replay := ev("replay", "order-3", 1, producer.EventType, "acme", start.Add(-time.Hour).UTC().Format(time.RFC3339Nano))
	replay.Signature = signing.Sign(key, replay)
	return []forged{
		{ev("type", "order-1", 1, consumer.AdminGranted, "acme", now), `source "/orders" may not emit "AdminGranted"`},
		{ev("tenant", "globex/order-1", 1, producer.EventType, "globex", now), `tenant "globex" is not this consumer's`},
		{ev("signature-missing", "order-4", 1, producer.EventType, "acme", now), "missing signature"},
		{wrong, "signature does not verify"},
		{replay, "stale: event time "},
		{ev("version-ahead", "order-5", 1000000, producer.EventType, "acme", now), "version 1000000 is more than 1000 ahead of the applied "},
	}
}

// publishForged publishes fs to the run's events exchange or topic with an
// ordinary publisher of the harness's own.
func publishForged(t *testing.T, r *Deployment, fs []forged) {
	t.Helper()
	var pub broker.Publisher
	var err error
	b := r.broker
	switch b.Kind {
	case "kafka":
		pub, err = broker.NewKafkaPublisher(b.Kafka(), broker.KafkaPublisherOptions{})
	case "rabbitmq":
		subs := make([]string, len(b.Subscriptions))
		for i, s := range b.Subscriptions {
			subs[i] = b.Qualify(s)
		}
		pub, err = broker.NewRabbitPublisher(broker.RabbitConfig{URLs: b.URLs(), Exchange: b.Events(), Subscriptions: subs,
			DeliveryLimit: b.DeliveryLimit, Prefetch: b.Prefetch, QueueType: b.QueueType}, broker.RabbitConfirmed)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	evs := make([]broker.Event, len(fs))
	for i, f := range fs {
		evs[i] = f.ev
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, err := range pub.Publish(ctx, evs) {
		if err != nil {
			t.Fatalf("publish %s: %v", evs[i].ID, err)
		}
	}
}

// TestSecurityConsumers runs the signing relay and the consumers on both
// brokers, publishing one forged event of each kind mid-run: the correct
// consumer dead-letters each at its first attempt with the right reason
// and applies every real event (each signed by the relay, so its
// signature verified end to end); the trusting one applies the forged
// events too.
func TestSecurityConsumers(t *testing.T) {
	t.Parallel() // no fault on the servers (main_test.go)
	for _, tc := range []struct {
		broker  string
		variant consumer.Variant
	}{
		{"kafka", consumer.Inbox}, {"rabbitmq", consumer.Inbox},
		{"kafka", consumer.Trusting}, {"rabbitmq", consumer.Trusting},
	} {
		t.Run(tc.broker+"/"+string(tc.variant), func(t *testing.T) {
			// No fault touches the shared servers, and each run has its
			// own database, topics and queues: the four go side by side.
			t.Parallel()
			cfg := Config{Broker: tc.broker, Producers: 1, Rate: 50, Subscriptions: []string{"inventory"}, ConsumerVariant: tc.variant,
				Security: &Security{Sign: true, Tenant: "acme", Freshness: 10 * time.Minute, MaxVersionAhead: 1000}}
			var fs []forged
			_, r := runPipelineWith(t, cfg, 3*time.Second, func(t *testing.T, r *Deployment) {
				fs = forgeries(r.SigningKey(), r.base)
				publishForged(t, r, fs)
			}, effectivelyOnce())
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			db, err := pgxpool.New(ctx, r.dsn) // the run's pool is closed
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			dead := deadLetters(ctx, t, db)
			applied := appliedIDs(ctx, t, db)
			for _, f := range fs {
				got, ok := dead[f.ev.ID]
				switch {
				case tc.variant == consumer.Trusting && (ok || !applied[f.ev.ID]):
					t.Errorf("trusting: %s dead-lettered %v (%q), applied %v", f.ev.ID, ok, got.reason, applied[f.ev.ID])
				case tc.variant == consumer.Inbox && (!ok || !strings.HasPrefix(got.reason, f.reason) || got.attempts != 1 || applied[f.ev.ID]):
					t.Errorf("%s: dead-lettered %v with %q at attempt %d, applied %v; want %q at attempt 1", f.ev.ID, ok, got.reason, got.attempts, applied[f.ev.ID], f.reason)
				}
			}
			forgedID := func(id string) bool { return strings.HasPrefix(id, "forged-") }
			checkForgedOps(t, r, fs, tc.variant, forgedID)
			if tc.variant == consumer.Trusting {
				return // its forged version-ahead event made real ones stale
			}
			checkRealEvents(ctx, t, db, applied, dead, forgedID)
		})
	}
}

type deadLetter struct {
	reason   string
	attempts int
}

// checkRealEvents fails t unless every event the run committed (at least
// 50) was applied and none was dead-lettered; injected reports which ids
// the test published itself, which are neither.
func checkRealEvents(ctx context.Context, t *testing.T, db *pgxpool.Pool, applied map[string]bool, dead map[string]deadLetter, injected func(id string) bool) {
	t.Helper()
	var committed, real int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&committed); err != nil {
		t.Fatal(err)
	}
	for id := range applied {
		if !injected(id) {
			real++
		}
	}
	for id, d := range dead {
		if !injected(id) {
			t.Errorf("real event %s dead-lettered: %s", id, d.reason)
		}
	}
	if committed < 50 || real != committed {
		t.Errorf("%d real events applied of %d committed", real, committed)
	}
}
func deadLetters(ctx context.Context, t *testing.T, db *pgxpool.Pool) map[string]deadLetter {
	t.Helper()
	rows, err := db.Query(ctx, `SELECT event_id, reason, attempts FROM dead_letters`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]deadLetter{}
	for rows.Next() {
		var id string
		var d deadLetter
		if err := rows.Scan(&id, &d.reason, &d.attempts); err != nil {
			t.Fatal(err)
		}
		if _, dup := out[id]; dup {
			t.Errorf("%s dead-lettered twice", id)
		}
		out[id] = d
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func appliedIDs(ctx context.Context, t *testing.T, db *pgxpool.Pool) map[string]bool {
	t.Helper()
	rows, err := db.Query(ctx, `SELECT DISTINCT event_id FROM effects`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, id := range ids {
		out[id] = true
	}
	return out
}

// checkForgedOps checks the consumer's history of each forged event (an
// id injected reports as the test's own, stored as broker.SafeText makes
// it): the correct consumer records its deliver, then at once its dlq with
// the reason (attempt 1, no apply, no retry); the trusting one applies it.
func checkForgedOps(t *testing.T, r *Deployment, fs []forged, v consumer.Variant, injected func(id string) bool) {
	t.Helper()
	files, err := r.HistoryFiles()
	if err != nil {
		t.Fatal(err)
	}
	h, _, err := history.ReadFiles(files...)
	if err != nil {
		t.Fatal(err)
	}
	ops := map[string][]history.Op{}
	for _, op := range h {
		if strings.HasPrefix(op.Process, "consumer-") && injected(op.Value.Event) {
			ops[op.Value.Event] = append(ops[op.Value.Event], op)
		}
	}
	for _, f := range fs {
		id := broker.SafeText(f.ev.ID)
		var got []string
		for _, op := range ops[id] {
			got = append(got, fmt.Sprintf("%s %s", op.Type, op.F))
		}
		want := []string{"ok deliver", "ok dlq"}
		if v == consumer.Trusting {
			want = []string{"ok deliver", "invoke apply", "ok apply", "invoke ack", "ok ack"}
		}
		if strings.Join(got, ", ") != strings.Join(want, ", ") {
			t.Errorf("%s: ops %v, want %v", id, got, want)
			continue
		}
		if last := ops[id][len(got)-1]; v == consumer.Inbox && (!strings.HasPrefix(last.Value.Reason, f.reason) || last.Value.Attempt != 1) {
			t.Errorf("%s: dlq reason %q at attempt %d, want %q at 1", id, last.Value.Reason, last.Value.Attempt, f.reason)
		}
	}
}
