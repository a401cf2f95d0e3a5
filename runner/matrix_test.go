package runner

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/internal/testenv"
	"github.com/deliverycheck/deliverycheck/pipeline/pipelinetest"
	"github.com/deliverycheck/deliverycheck/pipeline/relay"
	"github.com/deliverycheck/deliverycheck/scenarios"
)

// matrixDuration keeps each scenario short in CI; faults scheduled later
// still run (the workload is stretched to the schedule's end).
const matrixDuration = 3 * time.Second

// met reports whether o is what its scenario expects, and why not: the
// run's own verdict decides, as it does for `deliverycheck run`.
func met(o *Outcome) (bool, string) {
	if o.Verdict.Met {
		return true, ""
	}
	return false, fmt.Sprintf("%s: %v", o.Verdict.Unmet, o.Verdict.Reasons)
}

// runScenario runs one built-in scenario with a seed on the shared servers.
func runScenario(t *testing.T, s scenarios.Scenario, seed uint64, out string) *Outcome {
	t.Helper()
	return runScenarioOn(t, &shared, s, seed, out)
}

// runScenarioOn runs s on servers, or on servers of its own when it
// asks for replicated ones.
func runScenarioOn(t *testing.T, servers *pipelinetest.Servers, s scenarios.Scenario, seed uint64, out string) *Outcome {
	t.Helper()
	// Replicated scenarios start their own servers, not through servers
	// (whose Get skips under -short).
	testenv.SkipIfShort(t, "runs a scenario on real servers")
	s.Seed = seed
	s.Workload.Duration = matrixDuration
	if s.Drain.Quiet == 0 || s.Drain.Quiet > time.Second {
		s.Drain.Quiet = time.Second
	}
	spec, err := FromScenario(s)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// Replicated servers are the scenario's own: the shared ones are
	// single nodes.
	var cl *cluster.Cluster
	if spec.Nodes == nil && spec.Standby == "" {
		cl = servers.Get(t)
	}
	o, err := Run(ctx, spec, Options{Out: out, Cluster: cl, WorkerCmd: workerCmd(), Command: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if o.Result == nil {
		if cl != nil {
			servers.Reset()
		}
		t.Fatalf("harness error: %v", o.HarnessErr)
	}
	return o
}

// lostAt is where each known-bad scenario that loses events loses them:
// the stage (checker.Stage) every lost event of every subscription must
// be found at, from the history alone, its final read having read the
// broker's log. A loss the broker caused must never read as the
// consumer's, nor the consumer's as the broker's.
var lostAt = map[string]checker.Stage{
	// The offset is committed before the effect's transaction, which the
	// failpoint kills: delivered, its effect rolled back.
	"bad-ack-first": checker.RolledBack,
	// The producer dies after its commit, before its direct publish.
	"bad-dual-write": checker.NeverPublished,
	// Rows that commit late below the relay's mark are never published.
	"bad-high-water-mark": checker.NeverPublished,
	// acks=0: the relay records a publish as ok without a confirm, and
	// what the frozen, then killed, broker had not stored is not in its
	// log.
	"bad-unconfirmed": checker.AbsentFromBroker,
	// The witness queue is bound, the inventory queue is not: in the
	// broker, never delivered to inventory.
	"bad-unroutable": checker.NeverDelivered,
	// acks=1: the old leader confirmed them alone, and its successor
	// never had them.
	"bad-leader-ack": checker.AbsentFromBroker,
	// min ISR 1: the leader acknowledged alone once its replication
	// was cut, and unclean election handed the partition to a follower
	// that never had those records.
	"bad-min-isr-unclean": checker.AbsentFromBroker,
	// Replication factor 1: the partition's only broker came back with
	// an empty disk and leads it from offset 0.
	"bad-rf1-empty-disk": checker.AbsentFromBroker,
	// A classic queue's node came back with an empty disk: the queue,
	// the witness with it, was deleted when its peers forgot the node.
	"bad-classic-empty-disk": checker.AbsentFromBroker,
	// Non-persistent in classic queues (the witness one too): the
	// restart dropped them after the broker confirmed them.
	"bad-transient": checker.AbsentFromBroker,
	// The promoted asynchronous standby had not replayed them: outbox
	// rows committed before the failover, and effects applied before it
	// (with their inbox marks), are not on the new primary.
	"bad-async-standby": checker.LostInFailover,
	// The inbox keyed by id alone turned the second source's event
	// away as a duplicate of the first source's with the same id.
	"bad-inbox-by-id": checker.DeduplicatedAgainstOtherSource,
	// The late group started at the end of the topic: what was
	// published before its join is in the broker, never delivered to it.
	"bad-offset-reset-latest": checker.NeverDelivered,
	// Dead-lettered, then purged from the dead-letter queue by the
	// operator without an effect.
	"bad-redrive-purge":       checker.PurgedFromDLQ,
	"bad-redrive-purge-kafka": checker.PurgedFromDLQ,
}

// misplacedLosses says what is wrong with where r's lost events were
// found, for a scenario listed in lostAt: the broker's log must have been
// read whole, and every lost event must be at the scenario's stage.
func misplacedLosses(t *testing.T, name string, r *checker.Result) []string {
	t.Helper()
	want, ok := lostAt[name]
	if !ok {
		return nil
	}
	var out []string
	if r.Facts.BrokerRead != "complete" {
		out = append(out, fmt.Sprintf("broker read %s, want complete", r.Facts.BrokerRead))
	}
	for _, an := range r.Anomalies {
		if an.Kind != checker.Lost {
			continue
		}
		t.Logf("lost in %s: %s", an.Subscription, an.StageSummary())
		for _, sc := range an.Stages {
			if sc.Stage != want {
				out = append(out, fmt.Sprintf("%d lost in %s at %s, want all at %s", sc.Count, an.Subscription, sc.Stage, want))
			}
		}
	}
	return out
}

// servedDuring names, for the scenarios whose fault must not stop the
// pipeline, the target of that fault: events must be published and
// applied in the seconds wholly inside its window. For a node killed
// until its heal has started it again, that is the clients failing over
// to the other nodes; for a rolling restart, the clients moving between
// nodes as each goes.
var servedDuring = map[string]string{
	"rabbitmq-kill-node0":      "rabbitmq-0",
	"kafka-rolling-restart":    "kafka",
	"rabbitmq-rolling-restart": "rabbitmq",
}

// measured names the scenarios whose first fault waits for a lead-in:
// their first fault window must have a normal commit rate to be
// measured against (checker.Availability), not "no-baseline". Applies
// are only logged: they start once the relay's first batch is confirmed,
// which on a fresh replicated Kafka takes 1.5 to 3 s, so a lead-in of 3 s
// leaves them a baseline in most runs, not all (seen in make matrix).
var measured = map[string]bool{
	"bad-leader-ack": true, "kafka-replicated-kill-leader": true,
	"bad-min-isr-unclean": true, "kafka-replicated-cut-replication": true,
	"bad-rf1-empty-disk": true, "kafka-replicated-empty-disk": true,
	"bad-async-standby": true, "postgres-sync-failover": true,
	"rabbitmq-replicated-minority-partition": true,
}

// checkBaseline fails t unless r's first fault window has a normal
// commit rate.
func checkBaseline(t *testing.T, r *checker.Result) {
	t.Helper()
	if len(r.Availability.Windows) == 0 {
		t.Fatal("no fault window in the availability figures")
	}
	w := r.Availability.Windows[0]
	target := r.Faults[w.Fault].Target
	for _, rc := range []struct {
		name string
		c    checker.RateChange
	}{{"commits", w.Commits}, {"applies", w.Applies}} {
		if rc.c.NormalPerS == nil {
			t.Logf("%s around %s: %s", rc.name, target, rc.c.Recovery)
		} else {
			t.Logf("%s around %s: normal %.1f/s, %s", rc.name, target, *rc.c.NormalPerS, rc.c.Recovery)
		}
	}
	if w.Commits.NormalPerS == nil {
		t.Errorf("commits around %s: %s, want a normal rate from the lead-in", target, w.Commits.Recovery)
	}
}

// checkServedDuring fails t unless r's throughput shows publishes and
// applies in the seconds wholly inside the window of the fault on target.
func checkServedDuring(t *testing.T, r *checker.Result, target string) {
	t.Helper()
	var window *checker.Fault
	for i, f := range r.Faults {
		if f.Target == target {
			window = &r.Faults[i]
		}
	}
	if window == nil {
		t.Fatalf("no fault on %s in the history", target)
	}
	b := r.Series.BucketNanos
	first, last := int((window.StartNS+b-1)/b), int(window.EndNS/b)-1 // whole buckets inside
	if last < first {
		t.Fatalf("fault window on %s (%s) holds no whole second", target, time.Duration(window.EndNS-window.StartNS))
	}
	for _, f := range []history.F{history.Publish, history.Apply} {
		var per []int64
		var sum int64
		for _, rate := range r.Series.Throughput {
			if rate.F == f && rate.Type == history.OK {
				for i := first; i <= last && i < len(rate.Counts); i++ {
					per = append(per, rate.Counts[i])
					sum += rate.Counts[i]
				}
			}
		}
		t.Logf("%s ok per second during the fault on %s (%s): %v", f, target, time.Duration(window.EndNS-window.StartNS).Round(time.Millisecond), per)
		if sum == 0 {
			t.Errorf("no %s ok in the %d whole seconds of the fault on %s: the clients did not fail over", f, last-first+1, target)
		}
	}
}

// TestDetectionMatrix runs every built-in scenario once: each known-bad
// one must be caught (invalid, with its anomaly; one that came out valid
// at seed 1 gets a second seed, see detect), each correct one valid.
// Failpoint scenarios must also show their crashes in the history, and
// the losses of the known-bad ones that lose events must be found at
// their stage (lostAt).
func TestDetectionMatrix(t *testing.T) {
	out := t.TempDir()
	if os.Getenv("DELIVERYCHECK_KEEP") != "" {
		out = filepath.Join(os.TempDir(), "deliverycheck-matrix")
	}
	runLanes(t, scenarios.Builtin(), func(t *testing.T, servers *pipelinetest.Servers, s scenarios.Scenario) {
		detect(t, servers, s, out)
	})
}

// runLanes runs each scenario of all as a subtest through run, on one
// of the three shared sets of single-node servers, or on nil (servers of
// its own) for a replicated one, in four lanes at once (matrixWork).
// Each lane calls t.Run for its scenarios in turn (Run may be called
// from several goroutines), so the subtests keep their names and -run
// still picks one.
func runLanes(t *testing.T, all []scenarios.Scenario, run func(*testing.T, *pipelinetest.Servers, scenarios.Scenario)) {
	w := matrixPlan(t, all)
	var wg sync.WaitGroup
	wg.Go(func() {
		for s, ok := w.replicated(); ok; s, ok = w.replicated() {
			t.Run(s.Name, func(t *testing.T) { run(t, nil, s) })
		}
	})
	for _, servers := range lanes() {
		wg.Go(func() {
			for s, own, ok := w.any(); ok; s, own, ok = w.any() {
				on := servers
				if own {
					on = nil
				}
				t.Run(s.Name, func(t *testing.T) { run(t, on, s) })
			}
		})
	}
	wg.Wait()
}

// matrixWork is the catalogue as TestDetectionMatrix's lanes take it.
// A single-node run mostly waits (fault windows, restarts, drains): one
// kept this 2-core machine's CPU 11% busy, and three lanes on the three
// shared sets of servers still left it about half idle (the 53
// single-node scenarios took 3m08s of wall and 3m06s of CPU; a
// scenario's faults kill and cut the servers it runs on, so two never
// share a set). The replicated scenarios start servers of their own: one
// lane runs them, longest first, beside the three single-node lanes,
// which take the shortest ones from the back once no single-node one is
// left, so the four lanes end together. (The replicated lane alone took
// 570-620 s, the single-node lanes 450 s each; before, the replicated
// ones ran alone, in 6.6 minutes, and added 13 minutes of CI. Two
// replicated lanes from the start, five lanes on two cores, were no
// faster, and missed built-ins whose faults depend on timing.)
type matrixWork struct {
	mu             sync.Mutex
	replicatedLeft []scenarios.Scenario // longest schedule first
	singleLeft     []scenarios.Scenario
}

// matrixPlan splits the catalogue into the replicated scenarios, each on
// servers of its own, and the single-node ones.
func matrixPlan(t *testing.T, all []scenarios.Scenario) *matrixWork {
	t.Helper()
	w := &matrixWork{}
	ends := map[string]time.Duration{}
	for _, s := range all {
		spec := planSpec(t, s)
		if spec.Nodes != nil || spec.Standby != "" {
			w.replicatedLeft = append(w.replicatedLeft, s)
			ends[s.Name] = spec.Schedule.End()
			continue
		}
		w.singleLeft = append(w.singleLeft, s)
	}
	slices.SortStableFunc(w.replicatedLeft, func(a, b scenarios.Scenario) int { return cmp.Compare(ends[b.Name], ends[a.Name]) })
	return w
}

// planSpec is s's spec as the lanes are planned from it: the servers it
// asks for and its schedule, at any seed.
func planSpec(t *testing.T, s scenarios.Scenario) Spec {
	t.Helper()
	s.Seed = 1
	spec, err := FromScenario(s)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// replicated takes the longest replicated scenario left.
func (w *matrixWork) replicated() (scenarios.Scenario, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.replicatedLeft) == 0 {
		return scenarios.Scenario{}, false
	}
	s := w.replicatedLeft[0]
	w.replicatedLeft = w.replicatedLeft[1:]
	return s, true
}

// any takes the next single-node scenario, or, when none is left, the
// shortest replicated one (own: it runs on servers of its own).
func (w *matrixWork) any() (s scenarios.Scenario, own, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.singleLeft) > 0 {
		s, w.singleLeft = w.singleLeft[0], w.singleLeft[1:]
		return s, false, true
	}
	if n := len(w.replicatedLeft); n > 0 {
		s, w.replicatedLeft = w.replicatedLeft[n-1], w.replicatedLeft[:n-1]
		return s, true, true
	}
	return scenarios.Scenario{}, false, false
}

// detect runs s once on servers and checks what TestDetectionMatrix
// promises of it.
func detect(t *testing.T, servers *pipelinetest.Servers, s scenarios.Scenario, out string) {
	o := runScenarioOn(t, servers, s, 1, out)
	if s.Expect.Want() == checker.Invalid && o.Result.Valid == checker.Valid {
		// The fault did not expose the known-bad at this seed (a
		// schedule that depends on timing, on a loaded machine): one
		// more seed, said in the log. A correct scenario found invalid,
		// or a run found unknown, is never run again. `make matrix`
		// gives each known-bad's rate over 20 seeds.
		t.Logf("%s: valid at seed 1, not caught (%s); running seed 2", s.Name, o.Dir)
		o = runScenarioOn(t, servers, s, 2, out)
	}
	r := o.Result
	t.Logf("%s: %s %v; committed %d, crashes %d, faults %d (%s)", s.Name, r.Valid, r.Reasons, r.Counts.Committed, r.Counts.Crashes, r.Counts.Faults, o.Dir)
	if ok, why := met(o); !ok {
		t.Fatalf("expectation not met: %s", why)
	}
	if r.Counts.Committed == 0 {
		t.Fatal("nothing was committed")
	}
	for _, why := range misplacedLosses(t, s.Name, r) {
		t.Error(why)
	}
	checkRetries(t, s, r)
	if len(s.Nemesis.Failpoints) > 0 && r.Counts.Crashes == 0 {
		t.Error("failpoints were armed but no crash is in the history")
	}
	if len(s.Workload.Sources) > 1 {
		if n := sharedIDs(t, o.Dir); n == 0 {
			t.Error("the workload lists several sources but no event id committed under more than one: the shared ids were never exercised")
		} else {
			t.Logf("%d event ids committed under more than one source", n)
		}
	}
	if s.Variants.Relay == relay.Debezium && r.Counts.Crashes > 0 && r.Valid == checker.Valid {
		// At-least-once: a killed Connect republishes what it
		// had not flushed, and the report counts it.
		var redelivered int64
		for _, sub := range r.Subscriptions {
			redelivered += sub.Redelivered
		}
		if redelivered == 0 {
			t.Error("Debezium was killed but no event was redelivered")
		}
		t.Logf("redelivered: %d", redelivered)
	}
	if s.Variants.Relay == relay.Debezium {
		// Its replication slot is dropped with the run, or the
		// shared PostgreSQL would keep WAL for it forever.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, servers.Get(t).ClientURL(cluster.Postgres))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var slots int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'dc\_%'`).Scan(&slots); err != nil {
			t.Fatal(err)
		}
		if slots != 0 {
			t.Errorf("%d Debezium replication slots left behind", slots)
		}
	}
	if target, ok := servedDuring[s.Name]; ok {
		checkServedDuring(t, r, target)
	}
	if measured[s.Name] {
		checkBaseline(t, r)
	}
	checkStageBoundary(t, s, r)
	checkGroups(t, s, r)
	if kinds, ok := stageBittenBy[s.Name]; ok {
		checkStageBitten(t, o, kinds)
	}
	if n := len(s.Nemesis.Timeline); n > 0 && r.Counts.Faults == 0 {
		t.Errorf("%d timeline faults, none in the history", n)
	}
	checkOperations(t, s, o)
}

// TestDetectionRates is `make matrix`, not CI: every built-in scenario
// over DELIVERYCHECK_MATRIX_SEEDS seeds (default 20), writing the
// detection rate of each known-bad cell (variant × fault) and the false
// positive rate of the correct ones to DELIVERYCHECK_MATRIX_OUT (default
// matrix.md). A known-bad run whose losses are found at another stage
// than lostAt's is not counted as caught. DELIVERYCHECK_MATRIX_ONLY keeps the scenarios whose name
// starts with one of its comma-separated prefixes. It runs the scenarios
// in lanes as TestDetectionMatrix does (runLanes), each a subtest.
func TestDetectionRates(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("DELIVERYCHECK_MATRIX_SEEDS"))
	if n <= 0 {
		t.Skip("set DELIVERYCHECK_MATRIX_SEEDS (make matrix) to run")
	}
	dest := os.Getenv("DELIVERYCHECK_MATRIX_OUT")
	if dest == "" {
		dest = "matrix.md"
	}
	out := t.TempDir()
	if os.Getenv("DELIVERYCHECK_KEEP") != "" {
		out = filepath.Join(os.TempDir(), "deliverycheck-rates")
	}
	only := strings.Split(os.Getenv("DELIVERYCHECK_MATRIX_ONLY"), ",") // name prefixes, e.g. "bad-"
	var picked []scenarios.Scenario
	for _, s := range scenarios.Builtin() {
		if slices.ContainsFunc(only, func(p string) bool { return strings.HasPrefix(s.Name, strings.TrimSpace(p)) }) {
			picked = append(picked, s)
		}
	}
	var (
		mu         sync.Mutex
		lines      []string
		fpRuns, fp int
	)
	// rate runs s n times on servers (nil: its own replicated ones) and
	// adds its row.
	rate := func(t *testing.T, servers *pipelinetest.Servers, s scenarios.Scenario) {
		hits := 0
		var unknown int
		for seed := 1; seed <= n; seed++ {
			o := runScenarioOn(t, servers, s, uint64(seed), out)
			ok, why := met(o)
			if misplaced := misplacedLosses(t, s.Name, o.Result); ok && len(misplaced) > 0 {
				// Caught, but blamed on the wrong stage: not a hit.
				ok, why = false, strings.Join(misplaced, "; ")
			}
			if ok {
				hits++
			} else {
				t.Logf("%s seed %d: expectation not met: %s (%s)", s.Name, seed, why, o.Dir)
			}
			if o.Verdict.Validity == checker.Unknown {
				unknown++
			}
		}
		kind := "correct"
		rate := fmt.Sprintf("%d/%d valid", hits, n)
		mu.Lock()
		defer mu.Unlock()
		if s.Expect.Verdict == checker.Invalid {
			kind = "known-bad (" + string(s.Expect.Anomaly) + ")"
			rate = fmt.Sprintf("%d/%d caught (%.0f%%)", hits, n, 100*float64(hits)/float64(n))
		} else {
			fpRuns += n
			fp += n - hits
		}
		lines = append(lines, fmt.Sprintf("| %s | %s | %s | %s | %d |", s.Name, s.Broker.Kind, kind, rate, unknown))
		t.Log(lines[len(lines)-1])
	}
	runLanes(t, picked, rate)
	slices.Sort(lines)
	table := "| scenario | broker | kind | result | unknown |\n|---|---|---|---|---|\n" + strings.Join(lines, "\n") +
		fmt.Sprintf("\n\nFalse positives of the correct pipelines: %d of %d runs.\n", fp, fpRuns)
	if err := os.WriteFile(dest, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
}

// sharedIDs counts the event ids the producers of the run in dir
// committed (commit ok) under more than one source: what a workload with
// several sources must exercise, or a consumer keyed by the id alone has
// nothing to get wrong.
func sharedIDs(t *testing.T, dir string) int {
	t.Helper()
	sources := map[string]map[string]bool{}
	for _, h := range roleHistories(t, dir, "producer") {
		for _, op := range h {
			if op.F != history.Commit || op.Type != history.OK {
				continue
			}
			if sources[op.Value.Event] == nil {
				sources[op.Value.Event] = map[string]bool{}
			}
			sources[op.Value.Event][op.Value.Source] = true
		}
	}
	n := 0
	for _, srcs := range sources {
		if len(srcs) > 1 {
			n++
		}
	}
	return n
}

// TestMatrixPlan: the lanes take every built-in exactly once, the
// replicated ones longest schedule first from the front and shortest
// from the back.
func TestMatrixPlan(t *testing.T) {
	all := scenarios.Builtin()
	w := matrixPlan(t, all)
	first, ok := w.replicated()
	if !ok {
		t.Fatal("no replicated built-in")
	}
	seen := map[string]int{first.Name: 1}
	var last scenarios.Scenario
	for s, own, ok := w.any(); ok; s, own, ok = w.any() {
		seen[s.Name]++
		if own {
			last = s
		}
	}
	for _, s := range all {
		if seen[s.Name] != 1 {
			t.Errorf("%s taken %d times", s.Name, seen[s.Name])
		}
	}
	end := func(s scenarios.Scenario) time.Duration { return planSpec(t, s).Schedule.End() }
	if end(first) < end(last) {
		t.Errorf("replicated %s (ends at %s) taken before %s (ends at %s)", first.Name, end(first), last.Name, end(last))
	}
	t.Logf("replicated lane starts with %s (%s); the last one taken is %s (%s)", first.Name, end(first), last.Name, end(last))
}
