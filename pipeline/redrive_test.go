package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/history"
)

// TestRedriveAfterFix walks the seeds' worked case on each broker: new-schema
// events are refused and dead-lettered; the canary redriver finds nothing
// compatible before the fix (the step fails: it would have done
// nothing); deploy-fix redeploys the consumer (a restart op, no crash);
// a consumer that joined and left stays gone; the redrive then sends the canary, then the rest, and keeps the poison
// in the dead-letter queue; every new-schema event ends applied once,
// and the run is valid. A purge then empties what was kept. On Kafka the
// redrive after the fix reads again what the one before it kept.
func TestRedriveAfterFix(t *testing.T) {
	t.Parallel() // no fault on the servers (main_test.go)
	for _, b := range []string{"rabbitmq", "kafka"} {
		t.Run(b, func(t *testing.T) { testRedriveAfterFix(t, b) })
	}
}

func testRedriveAfterFix(t *testing.T, brokerKind string) {
	cl := servers.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := Config{Broker: brokerKind, Producers: 1, Rate: 100, Subscriptions: []string{"email"},
		Name: "redr_" + strconv.FormatInt(time.Now().UnixNano(), 36), Quiet: time.Second, DrainTimeout: time.Minute, MaxAttempts: 2,
		NewSchemaRatio: 0.2, PoisonRatio: 0.05} // the canary redriver by default
	r, err := Start(ctx, cl, t.TempDir(), cfg, workerCmd(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	waitUntil(t, 30*time.Second, func() error {
		n, err := r.broker.DeadLetterCount(ctx, "email")
		if err == nil && n < 10 {
			err = fmt.Errorf("%d dead letters, want 10", n)
		}
		return err
	})
	if _, err := r.Redrive(ctx, "email", 50); err == nil || !strings.Contains(err.Error(), "no dead letter of email is compatible with its consumers (schema versions 1)") {
		t.Fatalf("redrive before the fix: %v", err)
	}
	// A consumer that joined and left is not started again by the fix.
	joined, err := r.Join(ctx, "email")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Leave(ctx, joined); err != nil {
		t.Fatal(err)
	}
	ev, err := r.DeployFix(ctx, "email")
	if err != nil || ev != "consumer-email-0 redeployed accepting schema versions 1,2" {
		t.Fatalf("deploy-fix: %q, %v", ev, err)
	}
	if c, _ := r.Supervisor().Stats("consumer-email-0"); c != 0 {
		t.Errorf("the redeploy counted %d crashes", c)
	}
	if err := r.StopProducers(ctx); err != nil {
		t.Fatal(err)
	}
	ev, err = r.Redrive(ctx, "email", 100)
	if err != nil || !strings.Contains(ev, "redrove") || !strings.Contains(ev, "(canary ") || !strings.Contains(ev, "kept in the dead-letter queue as incompatible") {
		t.Fatalf("redrive after the fix: %q, %v", ev, err)
	}
	t.Log(ev)
	if _, err := r.Finish(ctx); err != nil {
		t.Fatal(err)
	}
	files, err := r.HistoryFiles()
	if err != nil {
		t.Fatal(err)
	}
	h, _, err := history.ReadFiles(files...)
	if err != nil {
		t.Fatal(err)
	}
	s2, effects, redrove, deployed := map[string]bool{}, map[string]int{}, map[string]bool{}, false
	for _, op := range h {
		v := op.Value
		switch {
		case op.F == history.Commit && op.Type == history.OK && v.Schema == 2:
			s2[v.Event] = true
			if !strings.Contains(v.Key, "s2-") {
				t.Errorf("new-schema event %s on a shared aggregate %s", v.Event, v.Key)
			}
		case op.F == history.FinalRead && v.Table == history.TableEffects:
			effects[v.Event]++
		case op.F == history.Redrive && op.Type == history.OK:
			redrove[v.Event] = true
		case op.F == history.Restart && v.Detail == "deploy-fix" && v.Target == "consumer-email-0":
			deployed = true
		}
	}
	if !deployed {
		t.Error("no restart op of the deploy-fix")
	}
	if len(redrove) == 0 {
		t.Fatal("nothing redriven")
	}
	for e := range s2 {
		if effects[e] != 1 {
			t.Errorf("new-schema event %s: %d effects (redriven %v)", e, effects[e], redrove[e])
		}
	}
	g := effectivelyOnce()
	g.Subscriptions = cfg.Subscriptions
	res, err := checker.CheckFiles(files, checker.Options{Guarantees: g})
	if err != nil {
		t.Fatal(err)
	}
	if res.Valid != checker.Valid {
		t.Errorf("verdict %s %v", res.Valid, res.Reasons)
	}
	ev, err = r.PurgeDLQ(ctx, "email")
	if err != nil || !strings.HasPrefix(ev, "purged ") {
		t.Errorf("purge: %q, %v", ev, err)
	}
	if _, err := r.PurgeDLQ(ctx, "email"); err == nil {
		t.Error("a purge of an empty dead-letter queue took effect")
	}
}

// TestDLQLocks: one operation at a time per dead-letter queue; another
// subscription's is not held up, and a wait ends with its context.
func TestDLQLocks(t *testing.T) {
	var l dlqLocks
	ctx := context.Background()
	unlock, err := l.lock(ctx, "email")
	if err != nil {
		t.Fatal(err)
	}
	other, err := l.lock(ctx, "inventory")
	if err != nil {
		t.Fatalf("another subscription's queue: %v", err)
	}
	other()
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := l.lock(short, "email"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second lock while held: %v", err)
	}
	got := make(chan error, 1)
	go func() {
		u, err := l.lock(ctx, "email")
		if err == nil {
			u()
		}
		got <- err
	}()
	unlock()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting lock was not granted after the unlock")
	}
}
