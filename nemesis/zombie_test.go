package nemesis_test

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/failpoint"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/nemesis"
	"github.com/deliverycheck/deliverycheck/process/supervisor"
)

// The worker half of the zombie tests: the test binary started by a real
// supervisor as a built-in worker (spec "zombie-worker:<mode>"), which
// takes "zombie <failpoint>" on stdin as a processor does and, in mode
// "pauses", reaches nemesis.ZombiePoint every few milliseconds; resumed
// after its pause, it reports its late transaction fenced and exits. In
// mode "lingers" it does not exit then; in mode "never" it never reaches
// the point.
func init() {
	mode, ok := strings.CutPrefix(os.Getenv(supervisor.SpecEnv), "zombie-worker:")
	if !ok {
		return
	}
	fp := failpoint.NewSet(1, nil)
	pause := func(n failpoint.Name, _ any) {
		failpoint.Note("paused at " + string(n) + " in t-1")
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	}
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			switch cmd, arg, _ := strings.Cut(sc.Text(), " "); {
			case cmd == "zombie" && arg == "off":
				fp.ArmZombie("", nil)
			case cmd == "zombie":
				fp.ArmZombie(failpoint.Name(arg), pause)
			case cmd == "stop":
				os.Exit(0)
			}
		}
		os.Exit(0)
	}()
	for {
		if mode != "never" {
			fp.Hit(nemesis.ZombiePoint, nil)
		}
		if fp.Zombie() {
			failpoint.Note("zombie: late transaction t-1 fenced: yes (PRODUCER_FENCED)")
			if mode == "lingers" {
				select {} // until killed
			}
			os.Exit(0)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// zombieEnv is an Env with one built-in worker process, processor-0, in
// mode, whose replacements are workers that never pause.
func zombieEnv(t *testing.T, mode string) (*nemesis.Env, *supervisor.Supervisor, *syncBuffer, *[]string) {
	t.Helper()
	buf := &syncBuffer{}
	rec := history.NewWriterRecorder(buf, "nemesis", time.Now())
	sup, err := supervisor.New(supervisor.Config{Command: []string{os.Args[0], "-test.run=^$"}, LogDir: t.TempDir(),
		RestartDelay: 50 * time.Millisecond, Recorder: rec, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		sup.StopAll(ctx)
	})
	if err := sup.Start(context.Background(), "processor-0", []byte("zombie-worker:"+mode)); err != nil {
		t.Fatal(err)
	}
	var replaced []string
	env := &nemesis.Env{Workers: sup, Recorder: rec, Log: slog.New(slog.DiscardHandler), HealTimeout: 20 * time.Second, ZombieExit: time.Second,
		Replace: func(ctx context.Context, w string) (string, error) {
			name := w + ".r1"
			replaced = append(replaced, name)
			return name, sup.Start(ctx, name, []byte("zombie-worker:never"))
		}}
	return env, sup, buf, &replaced
}

// A zombie is paused at its point, replaced, resumed at the heal, and
// exits for good; its evidence says so. One that never reaches the
// point is not replaced, and its fault never bit.
func TestZombie(t *testing.T) {
	for _, tc := range []struct {
		mode     string
		typ      history.Type
		evidence []string // each in the evidence
		err      string   // in the error
		replaced int
	}{
		{"pauses", history.OK, []string{
			"processor-0 paused (SIGSTOP) ", "paused at processor.after-produce-before-commit in t-1",
			"replacement processor-0.r1 started", "processor-0 resumed (SIGCONT) after ",
			"zombie late transaction t-1 fenced: yes (PRODUCER_FENCED)", "processor-0 exited (exit status 0), not restarted",
		}, "", 1},
		{"lingers", history.OK, []string{
			"zombie late transaction t-1 fenced: yes (PRODUCER_FENCED)", "processor-0 exited (killed at the end of its window: signal: killed), not restarted",
		}, "", 1},
		{"never", history.Fail, nil, "processor-0 was never paused as a zombie: it did not reach processor.after-produce-before-commit within 5s", 0},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			env, sup, buf, replaced := zombieEnv(t, tc.mode)
			ctx := context.Background()
			st, err := nemesis.ParseStep("at 0s: zombie processor-0 for 300ms")
			if err != nil {
				t.Fatal(err)
			}
			if err := nemesis.Fixed(st).Run(ctx, env); err != nil {
				t.Fatalf("Run: %v", err)
			}
			op := completion(t, buf.history(t), nemesis.Zombie)
			if op.Type != tc.typ || !strings.Contains(op.Value.Error, tc.err) {
				t.Errorf("completion = %s\nwant type %s, error %q", op, tc.typ, tc.err)
			}
			for _, e := range tc.evidence {
				if !strings.Contains(op.Value.Evidence, e) {
					t.Errorf("evidence %q lacks %q", op.Value.Evidence, e)
				}
			}
			if len(*replaced) != tc.replaced {
				t.Errorf("replacements %v, want %d", *replaced, tc.replaced)
			}
			if tc.replaced == 0 {
				return
			}
			// Retired before it was resumed: its exit, which the heal
			// waited for, was no crash, and nothing restarts it.
			if err := sup.Signal("processor-0", syscall.Signal(0)); !errors.Is(err, supervisor.ErrNotRunning) {
				t.Errorf("processor-0 runs again after it was replaced: %v", err)
			}
			if crashes, restarts := sup.Stats("processor-0"); crashes != 0 || restarts != 0 {
				t.Errorf("processor-0: %d crashes, %d restarts; a retired worker has neither", crashes, restarts)
			}
			// Nothing is left behind once the run stops its workers.
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := sup.StopAll(sctx); err != nil {
				t.Fatal(err)
			}
			for _, pid := range sup.PIDs() {
				if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
					t.Errorf("pid %d outlived the run: %v", pid, err)
				}
			}
		})
	}
}
