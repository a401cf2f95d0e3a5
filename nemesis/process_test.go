package nemesis_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/failpoint"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/nemesis"
	"github.com/deliverycheck/deliverycheck/process/supervisor"
)

// The worker half of these tests: the test binary started by a real
// supervisor as an external worker, which reaches failpoint
// relay.before-publish every few milliseconds, from half a second after
// it starts (so a failpoint disarmed at once never fires), until it is
// killed there or stopped.
func init() {
	if os.Getenv("NEMESIS_TEST_WORKER") != "late" {
		return
	}
	time.Sleep(500 * time.Millisecond)
	for {
		failpoint.Inject(string(failpoint.RelayBeforePublish))
		time.Sleep(5 * time.Millisecond)
	}
}

// workerEnv is an Env with one real worker process, relay-0, under a
// real supervisor, restarted restartDelay after a crash.
func workerEnv(t *testing.T, restartDelay time.Duration) (*nemesis.Env, *supervisor.Supervisor, *syncBuffer) {
	t.Helper()
	dir := t.TempDir()
	buf := &syncBuffer{}
	rec := history.NewWriterRecorder(buf, "nemesis", time.Now())
	sup, err := supervisor.New(supervisor.Config{Command: []string{"unused"}, LogDir: dir, RestartDelay: restartDelay,
		Recorder: rec, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		sup.StopAll(ctx)
	})
	if err := sup.StartCommand(context.Background(), "relay-0", supervisor.Command{
		Argv: []string{os.Args[0], "-test.run=^$"},
		Env:  []string{"NEMESIS_TEST_WORKER=late"},
	}); err != nil {
		t.Fatal(err)
	}
	env := &nemesis.Env{Workers: sup, Recorder: rec, Log: slog.New(slog.DiscardHandler), HealTimeout: 10 * time.Second}
	return env, sup, buf
}

// A failpoint armed by the schedule's last step, with no duration, stays
// armed until it fires, and its completion says it was hit. It used to be
// disarmed as soon as the schedule had started it ("fault healed …
// lasted=1ms"), before any worker reached it, so it never fired. One that
// never fires by the end of the run completes with fail.
func TestFailpointStepStaysArmedUntilHit(t *testing.T) {
	for _, tc := range []struct {
		name     string
		step     string
		crashes  int
		typ      history.Type
		evidence string
		err      string
	}{
		{"fires", "at 0s: failpoint relay-0 relay.before-publish=kill(once)", 1, history.OK,
			"failpoint relay.before-publish hit in relay-0", ""},
		{"never reached", "at 0s: failpoint relay-0 relay.after-publish-before-mark=kill(once)", 0, history.Fail,
			"", "failpoint relay.after-publish-before-mark armed in relay-0 never hit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, sup, buf := workerEnv(t, 50*time.Millisecond)
			st, err := nemesis.ParseStep(tc.step)
			if err != nil {
				t.Fatal(err)
			}
			// The run's workload: long enough for the worker to reach
			// the failpoint many times over.
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			if err := nemesis.Fixed(st).Run(ctx, env); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if tc.crashes > 0 && ctx.Err() != nil {
				t.Errorf("Run waited for the end of the workload, not for the failpoint to fire")
			}
			// The supervisor counts the crash once it has seen the exit.
			waitFor(t, 5*time.Second, func() error {
				if crashes, _ := sup.Stats("relay-0"); crashes != tc.crashes {
					return fmt.Errorf("relay-0 crashed %d times, want %d", crashes, tc.crashes)
				}
				return nil
			})
			op := completion(t, buf.history(t), nemesis.Failpoint)
			if op.Type != tc.typ || op.Value.Evidence != tc.evidence || op.Value.Error != tc.err {
				t.Errorf("completion = %s\nwant type %s, evidence %q, error %q", op, tc.typ, tc.evidence, tc.err)
			}
		})
	}
}

// A failpoint step with a duration is judged at the end of its window.
func TestFailpointWindow(t *testing.T) {
	env, _, buf := workerEnv(t, 50*time.Millisecond)
	st, err := nemesis.ParseStep("at 0s: failpoint relay-0 relay.before-publish=kill(always) for 2s")
	if err != nil {
		t.Fatal(err)
	}
	if err := nemesis.Fixed(st).Run(context.Background(), env); err != nil {
		t.Fatalf("Run: %v", err)
	}
	op := completion(t, buf.history(t), nemesis.Failpoint)
	if op.Type != history.OK || !strings.HasPrefix(op.Value.Evidence, "failpoint relay.before-publish hit in relay-0") {
		t.Errorf("completion = %s", op)
	}
}

// A worker kill's evidence is the killed process's exit status, a
// pause's that the worker was stopped and continued; either one on a
// worker that is down (killed, not restarted yet) does nothing, and
// completes with fail.
func TestWorkerFaultEvidence(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fault    nemesis.Fault
		down     bool // kill relay-0 first; it stays down for a minute
		typ      history.Type
		evidence string
		err      string
	}{
		{"kill", nemesis.Fault{Kind: nemesis.Kill, Target: "relay-0"}, false, history.OK, "relay-0 exited: signal: killed", ""},
		{"kill down", nemesis.Fault{Kind: nemesis.Kill, Target: "relay-0"}, true, history.Fail, "", "nothing killed: relay-0 not running (restarting)"},
		{"pause", nemesis.Fault{Kind: nemesis.Pause, Target: "relay-*"}, false, history.OK, "relay-0 paused (SIGSTOP), resumed", ""},
		{"pause down", nemesis.Fault{Kind: nemesis.Pause, Target: "relay-0"}, true, history.Fail, "", "nothing paused: relay-0 not running (restarting)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, sup, buf := workerEnv(t, time.Minute)
			ctx := context.Background()
			if tc.down {
				if _, err := sup.Kill(ctx, "relay-0"); err != nil {
					t.Fatal(err)
				}
			}
			heal, err := tc.fault.Inject(ctx, env)
			if err != nil {
				t.Fatal(err)
			}
			if err := heal(ctx); err != nil {
				t.Fatal(err)
			}
			op := completion(t, buf.history(t), tc.fault.Kind)
			if op.Type != tc.typ || op.Value.Evidence != tc.evidence || op.Value.Error != tc.err {
				t.Errorf("completion = %s\nwant type %s, evidence %q, error %q", op, tc.typ, tc.evidence, tc.err)
			}
			if _, err := sup.Kill(ctx, "relay-0"); tc.down && !errors.Is(err, supervisor.ErrNotRunning) {
				t.Errorf("relay-0 restarted within its minute: %v", err)
			}
		})
	}
}
