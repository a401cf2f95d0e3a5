package pipeline

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/workloads/consumer"
	"github.com/deliverycheck/deliverycheck/workloads/producer"
	"github.com/deliverycheck/deliverycheck/workloads/relay"
)

// faultCase is one pipeline run under one fault, with the verdict the
// checker must reach.
type faultCase struct {
	name    string
	brokers []string
	cfg     Config
	d       time.Duration
	// during runs while the workload runs (e.g. to pause workers).
	during func(t *testing.T, r *Run)
	g      checker.Guarantees
	// wantKind is the anomaly an invalid run must show; "" means the run
	// must be valid.
	wantKind checker.Kind
	// crashes is the least number of crashes each worker must show, to
	// prove the failpoint fired.
	crashes map[string]int
}

func both() []string { return []string{"kafka", "rabbitmq"} }

// correctUnderFailpoints: each failpoint fires and the correct pipeline
// stays valid (redeliveries are counted; nothing lost, no duplicate effect).
func correctUnderFailpoints() []faultCase {
	return []faultCase{
		{name: "producer.after-commit", brokers: both(), d: 3 * time.Second,
			cfg:     Config{Producers: 2, Rate: 80, Failpoints: map[string][]string{"producer-0": {"producer.after-commit=kill(2)"}}},
			crashes: map[string]int{"producer-0": 2}},
		{name: "relay.before-publish", brokers: both(), d: 3 * time.Second,
			cfg:     Config{Producers: 2, Rate: 80, Failpoints: map[string][]string{"relay-0": {"relay.before-publish=kill(2)"}}},
			crashes: map[string]int{"relay-0": 2}},
		{name: "relay.after-publish-before-mark", brokers: both(), d: 3 * time.Second,
			cfg:     Config{Producers: 2, Rate: 80, Failpoints: map[string][]string{"relay-0": {"relay.after-publish-before-mark=kill(2)"}}},
			crashes: map[string]int{"relay-0": 2}},
		{name: "consumer.after-effect-before-commit", brokers: both(), d: 3 * time.Second,
			cfg:     Config{Producers: 2, Rate: 80, Failpoints: map[string][]string{"consumer-inventory-0": {"consumer.after-effect-before-commit=kill(1)"}}},
			crashes: map[string]int{"consumer-inventory-0": 1}},
		{name: "armed at runtime", brokers: []string{"rabbitmq"}, d: 3 * time.Second,
			cfg:    Config{Producers: 2, Rate: 80},
			during: arm("consumer-email-0", "consumer.after-commit-before-ack=kill(2)"),
			crashes: map[string]int{"consumer-email-0": 2}},
		{name: "consumer.after-commit-before-ack", brokers: both(), d: 3 * time.Second,
			cfg:     Config{Producers: 2, Rate: 80, Failpoints: map[string][]string{"consumer-inventory-0": {"consumer.after-commit-before-ack=kill(1)"}}},
			crashes: map[string]int{"consumer-inventory-0": 1}},
	}
}

// knownBad: each broken sibling under the fault that exposes it.
func knownBad() []faultCase {
	return []faultCase{
		{name: "ack-first loses on a crash after ack", brokers: both(), d: 3 * time.Second,
			cfg: Config{Producers: 2, Rate: 80, ConsumerVariant: consumer.AckFirst,
				Failpoints: map[string][]string{"consumer-inventory-0": {"consumer.after-ack-before-commit=kill(1)"}}},
			wantKind: checker.Lost, crashes: map[string]int{"consumer-inventory-0": 1}},
		{name: "no-inbox duplicates on a crash after commit", brokers: both(), d: 3 * time.Second,
			cfg: Config{Producers: 2, Rate: 80, ConsumerVariant: consumer.NoInbox,
				Failpoints: map[string][]string{"consumer-inventory-0": {"consumer.after-commit-before-ack=kill(1)"}}},
			wantKind: checker.DuplicateEffect, crashes: map[string]int{"consumer-inventory-0": 1}},
		{name: "dual-write loses on a crash after commit", brokers: both(), d: 3 * time.Second,
			cfg: Config{Producers: 2, Rate: 80, ProducerVariant: producer.DualWrite,
				Failpoints: map[string][]string{"producer-0": {"producer.after-commit=kill(2)"}}},
			wantKind: checker.Lost, crashes: map[string]int{"producer-0": 2}},
		{name: "publish-then-commit makes phantoms when the tx aborts", brokers: both(), d: 3 * time.Second,
			cfg:      Config{Producers: 2, Rate: 80, ProducerVariant: producer.PublishThenCommit, AbortRatio: 0.2},
			wantKind: checker.Unexpected},
		{name: "high-water-mark skips rows that commit late", brokers: both(), d: 4 * time.Second,
			cfg:      Config{Producers: 6, Rate: 0, Keys: 50, RelayVariant: relay.HighWaterMark, Subscriptions: []string{"inventory"}},
			wantKind: checker.Lost},
		{name: "unconfirmed relay loses what a broker crash took", brokers: both(), d: 5 * time.Second,
			cfg:    Config{Producers: 2, Rate: 100, RelayVariant: relay.Unconfirmed, Subscriptions: []string{"inventory"}},
			during: killBroker(500*time.Millisecond, 2*time.Second), wantKind: checker.Lost},
		{name: "unroutable relay confirms into the void", brokers: []string{"rabbitmq"}, d: 2 * time.Second,
			cfg:      Config{Producers: 1, Rate: 50, RelayVariant: relay.Unroutable, Subscriptions: []string{"inventory"}, Unbound: []string{"inventory"}},
			wantKind: checker.Lost},
		{name: "check-then-act duplicates on concurrent redelivery", brokers: []string{"rabbitmq"}, d: 3 * time.Second,
			cfg: Config{Producers: 2, Rate: 100, ConsumerVariant: consumer.CheckThenAct, Consumers: 2, ConsumerWorkers: 8, ConsumerWork: 20 * time.Millisecond,
				RelayBatch: 5, Subscriptions: []string{"inventory"},
				Failpoints: map[string][]string{"relay-0": {"relay.after-publish-before-mark=kill(5)"}}},
			during: pauseConsumersUntilRelayCrashed(5), wantKind: checker.DuplicateEffect, crashes: map[string]int{"relay-0": 5}},
		{name: "no-version-guard applies old after new", brokers: []string{"rabbitmq"}, d: 3 * time.Second,
			cfg: Config{Producers: 2, Rate: 150, Keys: 3, ConsumerVariant: consumer.NoVersionGuard, Consumers: 2, ConsumerWorkers: 8, Subscriptions: []string{"inventory"}},
			during: pauseConsumersFor(time.Second), g: orderedOnce(), wantKind: checker.OrderRegression},
	}
}

// controls: the same schedules the known-bad variants fail under, run on
// the correct pipeline, which must stay valid.
func controls() []faultCase {
	return []faultCase{
		{name: "inbox under concurrent redelivery", brokers: []string{"rabbitmq"}, d: 3 * time.Second,
			cfg: Config{Producers: 2, Rate: 100, Consumers: 2, ConsumerWorkers: 8, ConsumerWork: 20 * time.Millisecond,
				RelayBatch: 5, Subscriptions: []string{"inventory"},
				Failpoints: map[string][]string{"relay-0": {"relay.after-publish-before-mark=kill(5)"}}},
			during: pauseConsumersUntilRelayCrashed(5), crashes: map[string]int{"relay-0": 5}},
		{name: "version guard under competing consumers", brokers: []string{"rabbitmq"}, d: 3 * time.Second,
			cfg:    Config{Producers: 2, Rate: 150, Keys: 3, Consumers: 2, ConsumerWorkers: 8, Subscriptions: []string{"inventory"}},
			during: pauseConsumersFor(time.Second), g: orderedOnce()},
		{name: "confirmed relay under a broker crash", brokers: both(), d: 5 * time.Second,
			cfg:    Config{Producers: 2, Rate: 50, Subscriptions: []string{"inventory"}},
			during: killBroker(500*time.Millisecond, 2*time.Second)},
		{name: "polling relay with concurrent producers", brokers: []string{"kafka"}, d: 4 * time.Second,
			cfg: Config{Producers: 6, Rate: 0, Keys: 50, Subscriptions: []string{"inventory"}}},
	}
}

func orderedOnce() checker.Guarantees {
	return checker.Guarantees{Loss: checker.None, DuplicateEffects: checker.None, Order: checker.PerKey}
}

func consumers(r *Run) []string {
	var out []string
	for _, n := range r.Supervisor().Names() {
		if len(n) > 9 && n[:9] == "consumer-" {
			out = append(out, n)
		}
	}
	return out
}

func signalAll(t *testing.T, r *Run, names []string, sig syscall.Signal) {
	t.Helper()
	for _, n := range names {
		if err := r.Supervisor().Signal(n, sig); err != nil {
			t.Fatal(err)
		}
	}
}

// pauseConsumersUntilRelayCrashed freezes every consumer until the relay
// has crashed n times, so the republished copies of each event pile up
// next to each other in the queue and are then handled concurrently.
func pauseConsumersUntilRelayCrashed(n int) func(*testing.T, *Run) {
	return func(t *testing.T, r *Run) {
		cs := consumers(r)
		signalAll(t, r, cs, syscall.SIGSTOP)
		defer signalAll(t, r, cs, syscall.SIGCONT)
		waitUntil(t, 30*time.Second, func() error {
			if c, _ := r.Supervisor().Stats("relay-0"); c < n {
				return fmt.Errorf("relay crashed %d times, want %d", c, n)
			}
			return nil
		})
	}
}

// killBroker kill -9s the run's broker after a while, keeps it down for a
// while, and starts it again (same ports, same data).
func killBroker(after, down time.Duration) func(*testing.T, *Run) {
	return func(t *testing.T, r *Run) {
		svc := r.cl.Service(r.cfg.Broker)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if r.cfg.Broker == "rabbitmq" {
			// RabbitMQ 3.10.8 can leave a quorum queue declared shortly
			// before a kill -9 without a leader for good (every publish to
			// it then waits for a confirm that never comes). That is a
			// broker bug this test is not about: a clean restart first
			// makes the queues' Raft state durable.
			if err := svc.Restart(ctx); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(after)
		if err := svc.Kill(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(down)
		if err := svc.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// arm arms a failpoint in a running worker, as a nemesis does.
func arm(worker, term string) func(*testing.T, *Run) {
	return func(t *testing.T, r *Run) {
		if err := r.Supervisor().Send(worker, "arm "+term); err != nil {
			t.Fatal(err)
		}
	}
}

// pauseConsumersFor builds a backlog, then lets competing consumers at it.
func pauseConsumersFor(d time.Duration) func(*testing.T, *Run) {
	return func(t *testing.T, r *Run) {
		cs := consumers(r)
		signalAll(t, r, cs, syscall.SIGSTOP)
		time.Sleep(d) // the backlog grows at the producers' rate; its size is not asserted
		signalAll(t, r, cs, syscall.SIGCONT)
	}
}

func waitUntil(t *testing.T, d time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %v", d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func runFaultCases(t *testing.T, cases []faultCase) {
	for _, tc := range cases {
		for _, b := range tc.brokers {
			t.Run(tc.name+"/"+b, func(t *testing.T) {
				cfg := tc.cfg
				cfg.Broker = b
				g := tc.g
				if g.Loss == "" && g.Order == "" {
					g = checker.Guarantees{Loss: checker.None, DuplicateEffects: checker.None}
				}
				res, r := runPipelineWith(t, cfg, tc.d, tc.during, g)
				want := 0
				for w, n := range tc.crashes {
					if c, _ := r.Supervisor().Stats(w); c < n {
						t.Errorf("%s crashed %d times, want at least %d: the failpoint did not fire", w, c, n)
					}
					want += n
				}
				// Each failpoint crash is in the history, naming the
				// event in flight.
				if res.Counts.Crashes < int64(want) {
					t.Errorf("history shows %d crashes, want at least %d", res.Counts.Crashes, want)
				}
				if tc.wantKind == "" {
					if res.Valid != checker.Valid {
						t.Fatalf("correct pipeline judged %s: %v", res.Valid, res.Reasons)
					}
					return
				}
				if res.Valid != checker.Invalid {
					t.Fatalf("known-bad variant judged %s, want invalid with %s: %v", res.Valid, tc.wantKind, res.Reasons)
				}
				found := false
				for _, a := range res.Anomalies {
					if a.Kind == tc.wantKind && a.Fatal && a.Count > 0 {
						found = true
					}
				}
				if !found {
					t.Fatalf("no fatal %s anomaly; anomalies: %+v", tc.wantKind, res.Anomalies)
				}
			})
		}
	}
}

func TestCorrectUnderFailpoints(t *testing.T) { runFaultCases(t, correctUnderFailpoints()) }
func TestKnownBadAreCaught(t *testing.T)     { runFaultCases(t, knownBad()) }
func TestControls(t *testing.T)              { runFaultCases(t, controls()) }
