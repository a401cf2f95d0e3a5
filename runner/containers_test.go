package runner

import (
	"context"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/internal/testenv"
	"github.com/deliverycheck/deliverycheck/scenarios"
)

// TestContainersRuntimeSameVerdict runs one built-in scenario with a
// fault end to end on the containers runtime (its own containers, not the
// shared local servers): it must reach the verdict the scenario expects,
// which TestDetectionMatrix's run of the same scenario on the local
// runtime must reach too, so the runtimes are interchangeable. (This test
// ran the local one a second time itself, about 18 s of every CI run.)
func TestContainersRuntimeSameVerdict(t *testing.T) {
	requireContainers(t)
	s, err := scenarios.Load("kafka-kill-broker")
	if err != nil {
		t.Fatal(err)
	}
	s.Seed = 7
	s.Workload.Duration = matrixDuration
	s.Drain.Quiet = time.Second
	o := runOnContainers(t, s, t.TempDir())
	t.Logf("containers: %s %v (committed %d, faults %d)", o.Result.Valid, o.Result.Reasons, o.Result.Counts.Committed, o.Result.Counts.Faults)
	if ok, why := met(o); !ok {
		t.Error(why)
	}
	if o.Result.Counts.Faults == 0 {
		t.Error("no fault in the history")
	}
}

// TestContainersRuntimeDebezium runs Debezium as the relay against the
// containers runtime's PostgreSQL (logical replication from the image's
// server, not the local one) and Kafka, with the relay killed mid-run:
// the scenario must come out as it promises, as it does locally in the
// detection matrix.
func TestContainersRuntimeDebezium(t *testing.T) {
	requireContainers(t)
	s, err := scenarios.Load("debezium-relay-crash")
	if err != nil {
		t.Fatal(err)
	}
	s.Seed = 7
	s.Workload.Duration = 5 * time.Second // long enough for "at 3s: kill relay-0"
	s.Drain.Quiet = time.Second
	o := runOnContainers(t, s, t.TempDir())
	t.Logf("containers: %s %v (committed %d, faults %d)", o.Result.Valid, o.Result.Reasons, o.Result.Counts.Committed, o.Result.Counts.Faults)
	if ok, why := met(o); !ok {
		t.Error(why)
	}
	if o.Result.Counts.Faults == 0 {
		t.Error("no fault in the history")
	}
}

// requireContainers skips t unless the containers runtime can run
// PostgreSQL and Kafka here (and fails it under
// testenv.RequireContainers, which says the runtime must be there).
func requireContainers(t *testing.T) {
	t.Helper()
	testenv.SkipIfShort(t, "starts real servers")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt, why := cluster.ResolveRuntime(ctx, cluster.Auto, cluster.ImageList(nil, []string{cluster.Postgres, cluster.Kafka}))
	if rt != cluster.Containers {
		if why == "" {
			why = "runtime resolved to " + rt
		}
		testenv.MustHaveContainers(t, why)
	}
}

// runOnContainers runs s on the containers runtime (its own containers)
// and checks the run recorded that runtime and its images.
func runOnContainers(t *testing.T, s scenarios.Scenario, out string) *Outcome {
	t.Helper()
	spec, err := FromScenario(s)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	o, err := Run(ctx, spec, Options{Out: out, Runtime: cluster.Containers, WorkerCmd: workerCmd(), Command: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if o.Result == nil {
		t.Fatalf("harness error on containers: %v", o.HarnessErr)
	}
	if o.Run.Environment.Runtime != cluster.Containers {
		t.Errorf("ran on %q, want containers", o.Run.Environment.Runtime)
	}
	for _, name := range []string{cluster.Postgres, cluster.Kafka} {
		if o.Run.Environment.Images[name] == "" {
			t.Errorf("no image recorded for %s: %v", name, o.Run.Environment.Images)
		}
	}
	return o
}
