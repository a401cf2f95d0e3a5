package supervisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func newSup(t *testing.T) *Supervisor {
	t.Helper()
	s, err := New(Config{Command: []string{"/bin/false"}, LogDir: t.TempDir(), RestartDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.StopAll(ctx)
	})
	return s
}

// An external command gets its env and dir, is restarted after it dies,
// and stops on SIGTERM.
func TestStartCommand(t *testing.T) {
	s := newSup(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "runs")
	// Each incarnation appends a line, then the first one exits (a crash)
	// and the second waits to be stopped.
	script := `echo "$GREETING $(pwd)" >> runs; [ $(wc -l < runs) -ge 2 ] && exec sleep 60; exit 1`
	if err := s.StartCommand(context.Background(), "consumer-x-0", Command{Argv: []string{"/bin/sh", "-c", script}, Env: []string{"GREETING=hello"}, Dir: dir}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(out)
		if strings.Count(string(b), "\n") >= 2 {
			if !strings.HasPrefix(string(b), "hello "+dir+"\n") {
				t.Fatalf("runs = %q", b)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not restarted after exiting: runs = %q", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if c, r := s.Stats("consumer-x-0"); c != 1 || r != 1 {
		t.Errorf("crashes, restarts = %d, %d; want 1, 1", c, r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Stop(ctx, "consumer-x-0"); err != nil {
		t.Fatalf("SIGTERM did not stop it: %v", err)
	}
}

func TestStartCommandNotFound(t *testing.T) {
	s := newSup(t)
	err := s.StartCommand(context.Background(), "relay-0", Command{Argv: []string{"./no-such-relay"}, Dir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "no-such-relay") {
		t.Fatalf("err = %v, want one naming the missing program", err)
	}
}

// Arming an external worker arms its endpoint, term by term.
func TestArmExternal(t *testing.T) {
	s := newSup(t)
	if err := s.StartCommand(context.Background(), "relay-0", Command{Argv: []string{"/bin/sleep", "60"}}); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"arm after-publish=kill(2)", "arm before-mark=kill(0.5)", "arm after-publish=off"} {
		if err := s.Send("relay-0", line); err != nil {
			t.Fatal(err)
		}
	}
	terms, err := s.Armed("relay-0")
	if err != nil {
		t.Fatal(err)
	}
	if len(terms) != 1 || terms[0].String() != "before-mark=kill(0.5)" {
		t.Fatalf("armed = %v", terms)
	}
	if err := s.Send("relay-0", "stop"); err == nil {
		t.Error(`"stop" to an external worker: no error`)
	}
}

// A worker's notes are kept in order; Stopped sees a SIGSTOP (the state
// in /proc, whatever its command's name holds); a retired worker that
// exits is neither a crash nor restarted.
func TestNotesStoppedRetire(t *testing.T) {
	s := newSup(t)
	// Its notes on the hits pipe, then it waits; a name with a space and
	// a parenthesis, as /proc/<pid>/stat's comm may hold.
	dir := t.TempDir()
	prog := filepath.Join(dir, "odd (name")
	if err := os.Symlink("/bin/sh", prog); err != nil {
		t.Fatal(err)
	}
	script := `echo "note paused at x" >&3; echo "hit y" >&3; echo "note zombie: done" >&3; while :; do sleep 1; done`
	if err := s.StartCommand(context.Background(), "processor-0", Command{Argv: []string{prog, "-c", script}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		notes, next := s.Notes("processor-0")
		if len(notes) == 2 {
			if notes[0] != "paused at x" || notes[1] != "zombie: done" {
				t.Fatalf("notes %q", notes)
			}
			break
		}
		select {
		case <-next:
		case <-time.After(time.Until(deadline)):
			t.Fatalf("notes %q after 10s", notes)
		}
	}
	if n, _ := s.Hits("processor-0", "y"); n != 1 {
		t.Errorf("hits of y: %d", n)
	}
	for _, sig := range []syscall.Signal{syscall.SIGSTOP, syscall.SIGCONT} {
		if err := s.Signal("processor-0", sig); err != nil {
			t.Fatal(err)
		}
		// The script's sh is sometimes in vfork, starting sleep, when the
		// SIGSTOP lands: it then reads D, not T, while its child is
		// stopped (Stopped counts that; it once failed CI, 1 in 30).
		sent := time.Now()
		deadline := sent.Add(10 * time.Second)
		want := sig == syscall.SIGSTOP
		for {
			got, err := s.Stopped("processor-0")
			if err != nil {
				t.Fatal(err)
			}
			if got == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%v after %v: stopped %v", time.Since(sent).Round(time.Millisecond), sig, got)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	exited, err := s.Retire("processor-0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Signal("processor-0", syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	if st := s.ExitStatus("processor-0"); st != "signal: killed" {
		t.Errorf("exit status %q", st)
	}
	if c, r := s.Stats("processor-0"); c != 0 || r != 0 {
		t.Errorf("crashes, restarts = %d, %d; a retired worker has neither", c, r)
	}
	if _, err := s.Stopped("processor-0"); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Stopped of an exited worker: %v", err)
	}
	if _, err := s.Retire("processor-0"); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Retire of an exited worker: %v", err)
	}
}

// newShellSup is a supervisor whose built-in workers are script, run by
// /bin/sh in dir with the spec in $DELIVERYCHECK_WORKER_SPEC.
func newShellSup(t *testing.T, dir, script string) *Supervisor {
	t.Helper()
	s, err := New(Config{Command: []string{"/bin/sh", "-c", "cd " + dir + " && " + script}, LogDir: t.TempDir(), RestartDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.StopAll(ctx)
	})
	return s
}

// A one-shot worker is restarted after a non-zero exit, and is done,
// never started again, once it exits 0.
func TestStartOnce(t *testing.T) {
	dir := t.TempDir()
	s := newShellSup(t, dir, `echo "$DELIVERYCHECK_WORKER_SPEC" >> runs; [ $(wc -l < runs) -ge 2 ] && exit 0; exit 1`)
	done, err := s.StartOnce(context.Background(), "redrive-email", []byte("once"))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("done: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not done after 10s")
	}
	if c, r := s.Stats("redrive-email"); c != 1 || r != 1 {
		t.Errorf("crashes, restarts = %d, %d; want 1, 1 (the exit 1, then nothing after the exit 0)", c, r)
	}
	time.Sleep(100 * time.Millisecond) // ten restart delays: a wrongful restart would have run
	if b, _ := os.ReadFile(filepath.Join(dir, "runs")); string(b) != "once\nonce\n" {
		t.Errorf("runs = %q, want two", b)
	}
	// Ended, its name is free for the next one-shot run, not for a
	// worker kept running.
	if err := s.Start(context.Background(), "redrive-email", []byte("again")); err == nil {
		t.Error("Start took the name of an ended one-shot worker")
	}
	done, err = s.StartOnce(context.Background(), "redrive-email", []byte("again"))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("second run: %v", err)
	}
}

// A one-shot worker stopped before it finished says so.
func TestStartOnceStopped(t *testing.T) {
	s := newShellSup(t, t.TempDir(), `while read l; do [ "$l" = stop ] && exit 0; done`)
	done, err := s.StartOnce(context.Background(), "redrive-email", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Stop(ctx, "redrive-email"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, errStoppedOnce) {
		t.Errorf("done: %v, want errStoppedOnce", err)
	}
}

// Redeploy stops a worker gracefully and starts it with the new spec,
// which a later crash restart keeps; neither the stop nor the new start
// is a crash. An external worker gets the added environment.
func TestRedeploy(t *testing.T) {
	dir := t.TempDir()
	// Each incarnation notes its spec; "crash" exits 1 from the new one.
	s := newShellSup(t, dir, `echo "$DELIVERYCHECK_WORKER_SPEC" >> runs; while read l; do [ "$l" = stop ] && exit 0; [ "$l" = crash ] && exit 1; done`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Start(ctx, "consumer-email-0", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	waitLines := func(path string, n int) string {
		t.Helper()
		for {
			b, _ := os.ReadFile(path)
			if strings.Count(string(b), "\n") >= n {
				return string(b)
			}
			if ctx.Err() != nil {
				t.Fatalf("%s = %q, want %d lines", path, b, n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	runs := filepath.Join(dir, "runs")
	waitLines(runs, 1)
	if err := s.Redeploy(ctx, "consumer-email-0", []byte("v2"), nil); err != nil {
		t.Fatal(err)
	}
	waitLines(runs, 2)
	if c, r := s.Stats("consumer-email-0"); c != 0 || r != 0 {
		t.Errorf("crashes, restarts after the redeploy = %d, %d; want 0, 0", c, r)
	}
	if err := s.Send("consumer-email-0", "crash"); err != nil {
		t.Fatal(err)
	}
	if got := waitLines(runs, 3); got != "v1\nv2\nv2\n" {
		t.Errorf("runs = %q: the crash restart must keep the new spec", got)
	}

	ext := filepath.Join(dir, "ext")
	script := `echo "${FIX:-none}" >> ext; exec sleep 60`
	if err := s.StartCommand(ctx, "consumer-inventory-0", Command{Argv: []string{"/bin/sh", "-c", script}, Dir: dir}); err != nil {
		t.Fatal(err)
	}
	waitLines(ext, 1)
	if err := s.Redeploy(ctx, "consumer-inventory-0", nil, map[string]string{"FIX": "1,2"}); err != nil {
		t.Fatal(err)
	}
	if got := waitLines(ext, 2); got != "none\n1,2\n" {
		t.Errorf("ext = %q", got)
	}
}
