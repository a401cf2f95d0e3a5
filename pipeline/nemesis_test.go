package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/nemesis"
)

// runSchedule runs a fixed nemesis timeline during the workload, as the
// run command does, and checks that it left nothing broken.
func runSchedule(steps ...string) func(*testing.T, *Deployment) {
	return func(t *testing.T, r *Deployment) {
		var sched nemesis.Schedule
		for _, s := range steps {
			st, err := nemesis.ParseStep(s)
			if err != nil {
				t.Fatal(err)
			}
			sched.Steps = append(sched.Steps, st)
		}
		env := &nemesis.Env{Cluster: r.Cluster(), Workers: r.Supervisor(), Recorder: r.Recorder(), Broker: r.cfg.Broker, Log: slog.Default()}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := sched.Run(ctx, env); err != nil {
			t.Errorf("schedule: %v", err)
		}
		if a := env.Active(); len(a) != 0 {
			t.Errorf("faults still active after the schedule: %v", a)
		}
		for _, l := range r.Cluster().Links().Links() {
			if a := l.Active(); len(a) != 0 {
				t.Errorf("link %s still has %v", l.Name(), a)
			}
		}
	}
}

// faultWindows pairs each fault start in the history with its heal: ok
// (it bit; its evidence is in evidence), or fail for a random fault that
// never bit, which a random schedule may draw (a partition of a link
// nobody used in its window).
func faultWindows(t *testing.T, r *Deployment) (open, healed []string, schedule string, evidence map[string]string) {
	t.Helper()
	h := runHistory(t, r)
	started := map[string]int{}
	evidence = map[string]string{}
	for _, op := range h {
		if op.F != history.Fault {
			continue
		}
		if op.Value.Fault == "schedule" {
			schedule = op.Value.Detail
			continue
		}
		k := fmt.Sprintf("%s %s: %s", op.Value.Fault, op.Value.Target, op.Value.Detail)
		switch op.Type {
		case history.Invoke:
			started[k]++
		case history.OK:
			if started[k] == 0 {
				t.Errorf("healed without a start: %s", k)
			}
			started[k]--
			healed = append(healed, k)
			evidence[k] = op.Value.Evidence
		case history.Fail:
			if op.Value.Reason != nemesis.ReasonRandom || op.Value.Error == "" {
				t.Errorf("fault op %s: %s (%s)", op.Type, k, op.Value.Error)
			}
			started[k]--
			healed = append(healed, k)
		default:
			t.Errorf("fault op %s: %s (%s)", op.Type, k, op.Value.Error)
		}
	}
	for k, n := range started {
		if n > 0 {
			open = append(open, k)
		}
	}
	return open, healed, schedule, evidence
}

// A fixed timeline with a broker crash, a database partition and a
// worker crash: the correct pipeline stays valid, every fault is in the
// history as a start and a heal, and the crashes and restarts are there.
// RabbitMQ only, for CI time: its kill also takes the nemesis's clean
// restart path, and a Kafka crash is covered by the controls in
// faults_test.go.
func TestNemesisFixedTimeline(t *testing.T) {
	steps := []string{
		"at 300ms: kill broker for 500ms",
		"at 800ms: kill relay-0",
		"at 2500ms: partition postgres for 1s",
		"at 3s: pause consumer-* for 500ms",
	}
	for _, b := range []string{"rabbitmq"} {
		t.Run(b, func(t *testing.T) {
			cfg := Config{Broker: b, Producers: 2, Rate: 50, Subscriptions: []string{"inventory", "email"}}
			res, r := runPipelineWith(t, cfg, 5*time.Second, runSchedule(steps...), effectivelyOnce())
			if res.Valid != checker.Valid {
				t.Fatalf("correct pipeline under the nemesis judged %s: %v", res.Valid, res.Reasons)
			}
			open, healed, schedule, evidence := faultWindows(t, r)
			if len(open) > 0 {
				t.Errorf("faults never healed: %v", open)
			}
			// Each one bit, and says how.
			for _, k := range healed {
				if evidence[k] == "" {
					t.Errorf("no evidence that %s took effect", k)
				}
				// A kill's evidence is the exit status the kernel gave.
				if strings.HasPrefix(k, "kill ") && !strings.Contains(evidence[k], "signal: killed") {
					t.Errorf("kill without its exit status: %s: %s", k, evidence[k])
				}
			}
			t.Logf("evidence: %v", evidence)
			if len(healed) != len(steps) {
				t.Errorf("healed %d faults, want %d: %v", len(healed), len(steps), healed)
			}
			if schedule == "" {
				t.Error("schedule not recorded")
			}
			// The broker and the relay crashed; the broker was started
			// again by the nemesis, the relay by the supervisor.
			if res.Counts.Crashes < 2 || res.Counts.Restarts < 2 {
				t.Errorf("crashes %d, restarts %d; want at least 2 each", res.Counts.Crashes, res.Counts.Restarts)
			}
			if c, _ := r.Supervisor().Stats("relay-0"); c < 1 {
				t.Errorf("relay-0 crashed %d times", c)
			}
			if res.Counts.Faults != int64(len(steps)) {
				t.Errorf("checker counted %d faults, want %d", res.Counts.Faults, len(steps))
			}
		})
	}
}

// A schedule cancelled while a server is down still starts it again: the
// final heal runs on its own context.
func TestNemesisCancelStartsKilledService(t *testing.T) {
	cl := servers.Get(t)
	rec := history.NewWriterRecorder(io.Discard, "nemesis", time.Now())
	nenv := &nemesis.Env{Cluster: cl, Recorder: rec, Broker: "kafka", HealTimeout: time.Minute}
	st, err := nemesis.ParseStep("at 0s: kill postgres for 1h")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- nemesis.Fixed(st).Run(ctx, nenv) }()
	waitUntil(t, 30*time.Second, func() error {
		if len(nenv.Active()) == 0 {
			return errors.New("kill not active yet")
		}
		return nil
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return after cancel")
	}
	qctx, qcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer qcancel()
	conn, err := pgx.Connect(qctx, cl.ClientURL(cluster.Postgres))
	if err != nil {
		t.Fatalf("postgres after the cancelled kill: %v", err)
	}
	defer conn.Close(context.Background())
	if err := conn.Ping(qctx); err != nil {
		t.Fatalf("postgres after the cancelled kill: %v", err)
	}
}

// A seeded random schedule over the network and process families, on the
// correct pipeline: valid, and every fault it drew healed and recorded.
func TestNemesisRandomSchedule(t *testing.T) {
	for _, b := range []string{"kafka"} {
		t.Run(b, func(t *testing.T) {
			cfg := Config{Broker: b, Producers: 2, Rate: 50, Subscriptions: []string{"inventory"}}
			var sched nemesis.Schedule
			during := func(t *testing.T, r *Deployment) {
				// Links and workers only: server kills are the fixed
				// timeline's business and cost seconds each.
				targets := nemesis.DefaultTargets(r.Supervisor().Names())
				targets.Services = nil
				sched = nemesis.Random(seed(t), []string{"process", "network", "failpoint"}, 600*time.Millisecond, 4*time.Second, targets)
				t.Logf("schedule: %s", sched)
				env := &nemesis.Env{Cluster: r.Cluster(), Workers: r.Supervisor(), Recorder: r.Recorder(), Broker: r.cfg.Broker}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := sched.Run(ctx, env); err != nil {
					t.Errorf("schedule: %v", err)
				}
			}
			res, r := runPipelineWith(t, cfg, 5*time.Second, during, effectivelyOnce())
			if res.Valid != checker.Valid {
				t.Fatalf("correct pipeline under %s judged %s: %v", sched, res.Valid, res.Reasons)
			}
			open, healed, recorded, _ := faultWindows(t, r)
			if len(open) > 0 || len(healed) != len(sched.Steps) {
				t.Errorf("open %v, healed %d of %d steps", open, len(healed), len(sched.Steps))
			}
			if recorded != sched.String() {
				t.Errorf("recorded schedule %q, want %q", recorded, sched)
			}
		})
	}
}

// seed is DELIVERYCHECK_SEED if set (to replay a failure), else fixed.
func seed(t *testing.T) int64 {
	if s := os.Getenv("DELIVERYCHECK_SEED"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return 1
}

// Faults on one server take turns, and a graceful restart of RabbitMQ
// earlier in the run is the clean restart its first kill needs (queues
// declared, then a restart), so the kill neither restarts it a second
// time nor lands while the first restart is still booting it: the
// matrix's rabbitmq-kill-broker (restart at 0s, kill at 4s) failed both
// ways when its restart took over 4 s on a loaded machine.
func TestNemesisRestartCountsAsCleanRestart(t *testing.T) {
	cfg := Config{Broker: "rabbitmq", Producers: 1, Rate: 50, Subscriptions: []string{"inventory"}}
	// The restart takes 2 to 6 s on a node that just declared its queues:
	// the kill, due at 1 s, waits for it rather than SIGTERMing a node
	// that is booting (both failed when they overlapped).
	res, r := runPipelineWith(t, cfg, 8*time.Second, runSchedule("at 0s: restart broker", "at 1s: kill broker for 500ms"), effectivelyOnce())
	if res.Valid != checker.Valid {
		t.Fatalf("judged %s: %v", res.Valid, res.Reasons)
	}
	var restarts []string
	for _, op := range runHistory(t, r) {
		if op.F == history.Restart && op.Value.Target == cluster.RabbitMQ {
			restarts = append(restarts, op.Value.Detail)
		}
		if op.F == history.Fault && op.Type == history.Invoke && strings.Contains(op.Value.Detail, "clean restart") {
			t.Errorf("the kill still announces a clean restart: %s", op.Value.Detail)
		}
	}
	// The nemesis's restart, then the start after the kill.
	if len(restarts) != 2 || restarts[0] != "graceful restart by the nemesis" {
		t.Errorf("rabbitmq restarts %q, want the graceful one and the one after the kill", restarts)
	}
}
