package pipeline

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/pipeline/consumer"
	"github.com/deliverycheck/deliverycheck/pipeline/hostile"
	"github.com/deliverycheck/deliverycheck/pipeline/producer"
)

// hostileReasons is the reason (a prefix) a correct consumer dead-letters
// each hostile kind with.
func hostileReasons() map[hostile.Kind]string {
	return map[hostile.Kind]string{
		hostile.Oversize:        "payload too large: ",
		hostile.CompressionBomb: "decompressed payload over 65536 bytes",
		hostile.DeepJSON:        "JSON nested deeper than 32",
		hostile.InvalidUTF8:     `header "event-id" is not valid UTF-8`,
		hostile.UnknownType:     `unknown type "Sabotage"`,
		hostile.ManyHeaders:     "too many headers: ",
	}
}

// TestHostileMessages runs the correct consumer on both brokers, publishing
// one message of each hostile kind mid-run with an ordinary publisher:
// each is dead-lettered at its first attempt with its reason (its dead
// letter stored even when its id is not valid UTF-8), none applied, and
// every real event still applied.
func TestHostileMessages(t *testing.T) {
	t.Parallel() // no fault on the servers (main_test.go)
	for _, b := range []string{"kafka", "rabbitmq"} {
		t.Run(b, func(t *testing.T) {
			t.Parallel() // no fault: the two brokers' runs go side by side
			cfg := Config{Broker: b, Producers: 1, Rate: 50, Subscriptions: []string{"inventory"}, ConsumerVariant: consumer.Inbox}
			var fs []forged
			_, r := runPipelineWith(t, cfg, 3*time.Second, func(t *testing.T, r *Deployment) {
				var cr hostile.Crafter
				base := broker.Event{ID: strings.ToLower(r.base.Format("150405.000")), Source: producer.DefaultSource,
					Key: "order-1", Version: 1, Type: producer.EventType}
				for _, k := range hostile.Kinds() {
					e, err := cr.Craft(k, 1, base)
					if err != nil {
						t.Fatal(err)
					}
					fs = append(fs, forged{ev: e, reason: hostileReasons()[k]})
				}
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
				id := broker.SafeText(f.ev.ID)
				got, ok := dead[id]
				if !ok || !strings.HasPrefix(got.reason, f.reason) || got.attempts != 1 || applied[id] {
					t.Errorf("%s: dead-lettered %v with %q at attempt %d, applied %v; want %q at attempt 1", id, ok, got.reason, got.attempts, applied[id], f.reason)
				}
			}
			hostileID := func(id string) bool { return strings.Contains(id, "hostile-") }
			checkForgedOps(t, r, fs, consumer.Inbox, hostileID)
			checkRealEvents(ctx, t, db, applied, dead, hostileID)
		})
	}
}

// TestUnboundedBomb shows the known-bad unbounded consumer caught by the
// memory facts: a compression bomb published mid-run (RabbitMQ) raises
// its peak resident set past the bomb's inflated size and more (a memory
// anomaly under max-rss), while the correct consumer's peak stays under
// it.
func TestUnboundedBomb(t *testing.T) {
	t.Parallel() // no fault on the servers (main_test.go)
	for _, v := range []consumer.Variant{consumer.Inbox, consumer.Unbounded} {
		t.Run(string(v), func(t *testing.T) {
			// No fault, and a peak resident set is each consumer
			// process's own: the two runs go side by side.
			t.Parallel()
			cfg := Config{Broker: "rabbitmq", Producers: 1, Rate: 50, Subscriptions: []string{"inventory"}, ConsumerVariant: v}
			// The limit sits well between the two: a correct consumer's
			// baseline is 35-50 MiB, and the unbounded one holds the
			// inflated bomb at least twice (ReadAll's buffer, the parsed
			// copy), about 180 MiB.
			g := effectivelyOnce()
			g.MaxRSS = hostile.BombBytes + 40<<20
			res, _ := runPipelineWith(t, cfg, 3*time.Second, func(t *testing.T, r *Deployment) {
				var cr hostile.Crafter
				e, err := cr.Craft(hostile.CompressionBomb, 1, broker.Event{ID: strings.ToLower(r.base.Format("150405.000")),
					Source: producer.DefaultSource, Key: "order-1", Version: 1, Type: producer.EventType})
				if err != nil {
					t.Fatal(err)
				}
				publishForged(t, r, []forged{{ev: e}})
			}, g)
			var peak int64
			for _, p := range res.Resources {
				if strings.HasPrefix(p.Process, "consumer-") {
					peak = max(peak, p.PeakRSS)
				}
			}
			var memory bool
			for _, an := range res.Anomalies {
				memory = memory || an.Kind == checker.Memory
			}
			t.Logf("%s: consumer peak RSS %d MiB, memory anomaly %v", v, peak>>20, memory)
			if peak == 0 {
				t.Fatal("no consumer's resident set measured")
			}
			if want := v == consumer.Unbounded; memory != want || (peak > g.MaxRSS) != want {
				t.Errorf("%s: peak %d bytes, memory anomaly %v; want over %d: %v", v, peak, memory, g.MaxRSS, want)
			}
		})
	}
}
