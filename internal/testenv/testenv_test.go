package testenv

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
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
