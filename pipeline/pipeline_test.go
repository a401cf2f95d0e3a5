package pipeline

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/history"
)

// runPipeline runs cfg for d on the shared cluster, finishes it and checks
// the history against g.
func runPipeline(t *testing.T, cfg Config, d time.Duration, g checker.Guarantees) *checker.Result {
	t.Helper()
	res, _ := runPipelineWith(t, cfg, d, nil, g)
	return res
}

// runPipelineWith is runPipeline with an action run during the workload;
// it also returns the finished run for inspection.
func runPipelineWith(t *testing.T, cfg Config, d time.Duration, during func(*testing.T, *Deployment), g checker.Guarantees) (*checker.Result, *Deployment) {
	t.Helper()
	cl := servers.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if cfg.Name == "" {
		// Unique and short: PostgreSQL cuts names at 63 bytes.
		cfg.Name = "t_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	dir := t.TempDir()
	if os.Getenv("DELIVERYCHECK_KEEP") != "" {
		// Keep the run's history and logs for a look afterwards.
		var err error
		if dir, err = os.MkdirTemp("", "pipeline-run-"); err != nil {
			t.Fatal(err)
		}
		t.Logf("run dir kept: %s", dir)
	}
	r, err := Start(ctx, cl, dir, cfg, workerCmd(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	start := time.Now()
	if during != nil {
		during(t, r)
	}
	select {
	case <-time.After(d - time.Since(start)):
	case <-ctx.Done():
	}
	drained, err := r.Finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !drained {
		t.Errorf("drain did not complete")
	}
	files, err := r.HistoryFiles()
	if err != nil {
		t.Fatal(err)
	}
	g.Subscriptions = cfg.Subscriptions
	res, err := checker.CheckFiles(files, checker.Options{Guarantees: g})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: valid=%s reasons=%v counts=%+v", t.Name(), res.Valid, res.Reasons, res.Counts)
	for _, s := range res.Subscriptions {
		t.Logf("  %s: %+v", s.Name, s)
	}
	return res, r
}

func effectivelyOnce() checker.Guarantees {
	return checker.Guarantees{Loss: checker.None, DuplicateEffects: checker.None, Order: checker.PerKey}
}

func TestNoFaults(t *testing.T) {
	t.Parallel() // no fault on the servers (main_test.go)
	for _, b := range []string{"kafka", "rabbitmq"} {
		t.Run(b, func(t *testing.T) {
			t.Parallel() // no fault: the two brokers' runs go side by side
			res := runPipeline(t, Config{Broker: b, Producers: 2, Rate: 100, Subscriptions: []string{"inventory", "email"}}, 3*time.Second, effectivelyOnce())
			if res.Valid != checker.Valid {
				t.Fatalf("verdict %s: %v", res.Valid, res.Reasons)
			}
			if res.Counts.Committed < 100 {
				t.Fatalf("only %d events committed", res.Counts.Committed)
			}
			for _, s := range res.Subscriptions {
				if s.Applied != res.Counts.Committed {
					t.Errorf("%s applied %d of %d committed", s.Name, s.Applied, res.Counts.Committed)
				}
			}
		})
	}
}

// Poison events are retried up to MaxAttempts, then dead-lettered with the
// reason, by every subscription; valid events are not.
func TestPoisonReachesDLQ(t *testing.T) {
	t.Parallel() // no fault on the servers (main_test.go)
	for _, b := range []string{"kafka", "rabbitmq"} {
		t.Run(b, func(t *testing.T) {
			t.Parallel() // no fault: the two brokers' runs go side by side
			res := runPipeline(t, Config{Broker: b, Producers: 2, Rate: 60, PoisonRatio: 0.1, MaxAttempts: 3}, 3*time.Second, effectivelyOnce())
			if res.Valid != checker.Valid {
				t.Fatalf("verdict %s: %v", res.Valid, res.Reasons)
			}
			if res.Counts.Poison == 0 {
				t.Fatal("no poison event was produced")
			}
			for _, s := range res.Subscriptions {
				if s.DeadLettered != res.Counts.Poison {
					t.Errorf("%s dead-lettered %d of %d poison events", s.Name, s.DeadLettered, res.Counts.Poison)
				}
			}
		})
	}
}

// Producers sharing processes: each is its own history process with its
// own commits, a failpoint in a shared process crashes (and restarts) all
// its clients together, and the pipeline stays valid.
func TestProducerProcesses(t *testing.T) {
	// Its fault is its own workers': it runs beside the other such
	// tests, once the ones that break the shared servers are done.
	t.Parallel()
	cfg := Config{Broker: "kafka", Producers: 4, ProducerProcesses: 2, Rate: 60, Subscriptions: []string{"inventory"},
		Failpoints: map[string][]string{"producer-2": {"producer.after-commit=kill(1)"}}}
	res, r := runPipelineWith(t, cfg, 3*time.Second, nil, effectivelyOnce())
	if res.Valid != checker.Valid {
		t.Fatalf("verdict %s: %v", res.Valid, res.Reasons)
	}
	if c, _ := r.Supervisor().Stats("producer-2"); c < 1 {
		t.Errorf("producer-2 crashed %d times, want at least 1", c)
	}
	h := runHistory(t, r)
	commits := map[string]int{}
	for _, op := range h {
		if op.F == history.Commit && op.Type == history.OK {
			commits[op.Process]++
		}
	}
	for i := range 4 {
		if p := fmt.Sprintf("producer-%d", i); commits[p] == 0 {
			t.Errorf("%s committed nothing; commits by process: %v", p, commits)
		}
	}
}

func TestProducerGroups(t *testing.T) {
	for _, tc := range []struct {
		producers, procs int
		want             [][]int
	}{
		{3, 0, [][]int{{0}, {1}, {2}}},
		{3, 5, [][]int{{0}, {1}, {2}}},
		{8, 2, [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}}},
		{5, 2, [][]int{{0, 1, 2}, {3, 4}}},
		{4, 1, [][]int{{0, 1, 2, 3}}},
	} {
		got := producerGroups(tc.producers, tc.procs)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("producerGroups(%d producers, %d processes) = %v, want %v", tc.producers, tc.procs, got, tc.want)
		}
	}
	names, err := WorkerNames(Config{Broker: "kafka", Producers: 4, ProducerProcesses: 2, Subscriptions: []string{"inventory"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"consumer-inventory-0", "relay-0", "producer-0", "producer-2"}; !reflect.DeepEqual(names, want) {
		t.Errorf("WorkerNames = %v, want %v", names, want)
	}
	// A producer that is another's client has no process to arm.
	_, err = WorkerNames(Config{Broker: "kafka", Producers: 4, ProducerProcesses: 2,
		Failpoints: map[string][]string{"producer-1": {"producer.after-commit=kill(1)"}}})
	if err == nil || !strings.Contains(err.Error(), "producer-1") {
		t.Errorf("failpoints on producer-1, a client of producer-0's process: err = %v, want one naming producer-1", err)
	}
}

// runHistory reads every history file of a finished run.
func runHistory(tb testing.TB, r *Deployment) history.History {
	tb.Helper()
	files, err := r.HistoryFiles()
	if err != nil {
		tb.Fatal(err)
	}
	h, _, err := history.ReadFiles(files...)
	if err != nil {
		tb.Fatal(err)
	}
	return h
}
