package failpoint_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/failpoint"
)

// The end-to-end tests of Inject, against the harness's real endpoint
// and beside the Java, Node.js and Python clients, are in
// process/supervisor (endpoint_test.go): the server lives there.

// Outside a run (no endpoint in the environment) Inject does nothing.
func TestInjectOutsideARun(t *testing.T) {
	if os.Getenv(failpoint.EnvEndpoint) != "" {
		t.Skip("running under deliverycheck")
	}
	failpoint.Inject("after-commit-before-ack") // must return
}

// The client asks with the documented request and returns on each answer
// a component must survive, but only once the harness has answered: the
// call blocks while the harness decides.
func TestClient(t *testing.T) {
	release := make(chan struct{})
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Method + " " + r.URL.RequestURI())
		switch r.URL.Query().Get("event") {
		case "held":
			<-release
			w.WriteHeader(http.StatusNoContent)
		case "refused":
			http.Error(w, "no such worker", http.StatusNotFound)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	defer srv.Close()
	c := failpoint.NewClient(srv.URL + "/tok/consumer-inventory-0")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c.Inject(ctx, "after-commit-before-ack", "ord 7/v3")
	if want := "POST /tok/consumer-inventory-0/failpoint/after-commit-before-ack?event=ord+7%2Fv3"; got.Load() != want {
		t.Errorf("request = %q, want %q", got.Load(), want)
	}
	c.Inject(ctx, "after-commit-before-ack", "refused") // logged, returns

	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Inject(ctx, "after-commit-before-ack", "held")
	}()
	select {
	case <-done:
		t.Fatal("Inject returned before the harness answered")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("Inject did not return after the harness answered")
	}
}

// A harness that is gone is not the component's problem.
func TestClientUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	failpoint.NewClient("http://"+addr+"/tok/relay-0").Inject(ctx, "before-publish", "")
}

func TestStateRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fp")
	in := []failpoint.Term{{Name: "a.b-c_d", Count: 3, Prob: 1}, {Name: "x", Count: -1, Prob: 0.25}, {Name: "off", Count: 0}}
	if err := failpoint.WriteState(path, in); err != nil {
		t.Fatal(err)
	}
	out, err := failpoint.ReadState(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || out[0] != in[0] || out[1] != in[1] {
		t.Fatalf("read back %+v, want %+v", out, in[:2])
	}
	if err := os.WriteFile(path, []byte("a=kill(1)\nbad name=kill(1)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := failpoint.ReadState(path); err == nil {
		t.Fatal("a bad line read without error")
	}
}
