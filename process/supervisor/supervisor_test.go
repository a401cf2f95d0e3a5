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
				t.Fatalf("after %v: stopped %v", sig, got)
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
