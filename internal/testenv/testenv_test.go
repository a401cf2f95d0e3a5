package testenv

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB that records how a helper ended the test
// instead of ending it (Fatalf and Skipf stop the goroutine, as the real
// ones do).
type recorder struct {
	testing.TB
	ended string // "", "fatal" or "skip"
	msg   string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(f string, a ...any) {
	r.ended, r.msg = "fatal", fmt.Sprintf(f, a...)
	runtime.Goexit()
}
func (r *recorder) Skipf(f string, a ...any) {
	r.ended, r.msg = "skip", fmt.Sprintf(f, a...)
	runtime.Goexit()
}

func run(tb testing.TB, f func(testing.TB)) *recorder {
	r := &recorder{TB: tb}
	done := make(chan struct{})
	go func() { defer close(done); f(r) }()
	<-done
	return r
}

func TestMustHave(t *testing.T) {
	missing := errors.New("no rabbitmq-server on PATH")
	for _, tc := range []struct {
		name    string
		servers string // RequireServers
		ctrs    string // RequireContainers
		f       func(testing.TB)
		want    string
	}{
		{"server present", "1", "", func(tb testing.TB) { MustHaveServer(tb, "rabbitmq", nil) }, ""},
		{"server missing, not required", "", "", func(tb testing.TB) { MustHaveServer(tb, "rabbitmq", missing) }, "skip"},
		{"server missing, required", "1", "", func(tb testing.TB) { MustHaveServer(tb, "rabbitmq", missing) }, "fatal"},
		{"server missing, switch is 0", "0", "", func(tb testing.TB) { MustHaveServer(tb, "rabbitmq", missing) }, "skip"},
		{"server missing, only containers required", "", "1", func(tb testing.TB) { MustHaveServer(tb, "rabbitmq", missing) }, "skip"},
		{"containers present", "", "1", func(tb testing.TB) { MustHaveContainers(tb, "") }, ""},
		{"containers missing, not required", "1", "", func(tb testing.TB) { MustHaveContainers(tb, "no engine") }, "skip"},
		{"containers missing, required", "", "1", func(tb testing.TB) { MustHaveContainers(tb, "no engine") }, "fatal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(RequireServers, tc.servers)
			t.Setenv(RequireContainers, tc.ctrs)
			r := run(t, tc.f)
			if r.ended != tc.want {
				t.Fatalf("ended %q (%s), want %q", r.ended, r.msg, tc.want)
			}
		})
	}
}

func TestEventually(t *testing.T) {
	t.Run("met", func(t *testing.T) {
		n := 0
		r := run(t, func(tb testing.TB) {
			Eventually(tb, context.Background(), 5*time.Second, "third try", func() error {
				if n++; n < 3 {
					return fmt.Errorf("try %d", n)
				}
				return nil
			})
		})
		if r.ended != "" || n != 3 {
			t.Fatalf("ended %q after %d tries, want met on the third", r.ended, n)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		r := run(t, func(tb testing.TB) {
			Eventually(tb, context.Background(), 60*time.Millisecond, "never", func() error { return errors.New("still no") })
		})
		if r.ended != "fatal" || !strings.Contains(r.msg, "never not met within 60ms: still no") {
			t.Fatalf("ended %q with %q, want a failure naming the wait and the last error", r.ended, r.msg)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		r := run(t, func(tb testing.TB) {
			Eventually(tb, ctx, time.Hour, "x", func() error { return errors.New("no") })
		})
		if r.ended != "fatal" {
			t.Fatalf("ended %q, want a failure when ctx is done", r.ended)
		}
	})
}
