package pipeline

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/nemesis"
	"github.com/deliverycheck/deliverycheck/pipeline/consumer"
	"github.com/deliverycheck/deliverycheck/pipeline/intruder"
	"github.com/deliverycheck/deliverycheck/signing"
)

// TestIntruder runs the intruder as its own per-run broker user on both
// brokers: with permissions publish the broker accepts every message and
// the drain waits until every subscription has dead-lettered or applied
// each; with none the broker refuses each, and the fail op carries the
// refusal. Either way the run's own relay and consumers keep working
// (the drain completes with every committed event applied), and the
// user is gone after Close.
func TestIntruder(t *testing.T) {
	t.Parallel() // no fault on the servers (main_test.go)
	for _, tc := range []struct {
		broker   string
		perm     intruder.Permissions
		refusal  string // in each fail op's error, for none
		consumer consumer.Variant
		verdict  checker.Validity
	}{
		{"rabbitmq", intruder.Publish, "", consumer.Inbox, checker.Valid},
		{"rabbitmq", intruder.None, "ACCESS_REFUSED", consumer.Inbox, checker.Valid},
		{"kafka", intruder.Publish, "", consumer.Inbox, checker.Valid},
		{"kafka", intruder.None, "TOPIC_AUTHORIZATION_FAILED", consumer.Inbox, checker.Valid},
		// The known-bad sibling: the broker lets the intruder in, and a
		// consumer that checks nothing but form applies its events.
		{"kafka", intruder.Publish, "", consumer.Trusting, checker.Invalid},
	} {
		t.Run(tc.broker+"/"+string(tc.perm)+"/"+string(tc.consumer), func(t *testing.T) {
			cl := servers.Get(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			kinds := []intruder.Kind{intruder.Type, intruder.Tenant, intruder.Replay}
			cfg := Config{Broker: tc.broker, Producers: 1, Rate: 50, Subscriptions: []string{"inventory", "email"},
				Name: "intr_" + strconv.FormatInt(time.Now().UnixNano(), 36), Quiet: time.Second, DrainTimeout: time.Minute, MaxAttempts: 2,
				Security: &Security{Sign: true, Tenant: "acme", Freshness: 10 * time.Minute}, ConsumerVariant: tc.consumer,
				Intruder: &intruder.Config{Permissions: tc.perm, Kinds: kinds, PerKind: 2},
			}
			r, err := Start(ctx, cl, t.TempDir(), cfg, workerCmd(), nil)
			if err != nil {
				t.Fatal(err)
			}
			closed := false
			defer func() {
				if !closed {
					r.Close()
				}
			}()
			user := IntruderUser(cfg.Name)
			if !userExists(t, ctx, r, user) {
				t.Fatalf("no user %s after Start", user)
			}
			waitCommitted(t, ctx, r, 10)
			// Through the nemesis, as a run does: the schedule's check,
			// then the fault and its evidence.
			st, err := nemesis.ParseStep("at 0s: intrude")
			if err != nil {
				t.Fatal(err)
			}
			sched := nemesis.Schedule{Steps: []nemesis.Step{st}}
			env := &nemesis.Env{Cluster: cl, Workers: r.Supervisor(), Recorder: r.Recorder(), Broker: tc.broker, Intrude: r.Intrude}
			if err := sched.Check(env); err != nil {
				t.Fatalf("schedule check: %v", err)
			}
			if err := sched.Run(ctx, env); err != nil {
				t.Fatal(err)
			}
			if len(r.intruder.cfg.Replays) != 2 || r.intruder.cfg.Tenant != "acme" {
				t.Errorf("%d replays, tenant %q: want 2, the run's", len(r.intruder.cfg.Replays), r.intruder.cfg.Tenant)
			}
			for _, e := range r.intruder.cfg.Replays {
				if !signing.Verify(r.SigningKey(), e) {
					t.Errorf("replay %s signature %q: not the run's key's", e.ID, e.Signature)
				}
			}
			drained, err := r.Finish(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !drained {
				for _, op := range runHistory(t, r) {
					if op.F == history.Drain && op.Type != history.Invoke {
						t.Errorf("the drain did not complete: %s", op.Value.Detail)
					}
				}
			}
			if owed, err := r.intruderPending(ctx); err != nil || len(owed) != 0 {
				t.Errorf("after the drain, unresolved: %v (%v)", owed, err)
			}
			h := runHistory(t, r)
			checkIntrudeOps(t, h, tc.perm, tc.refusal, len(kinds)*2)
			checkIntrudeFault(t, h, tc.perm, len(kinds)*2)
			checkIntrudeVerdict(t, r, cfg.Subscriptions, tc.verdict)
			if err := r.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
			closed = true
			if userExists(t, ctx, r, user) {
				t.Errorf("user %s still there after Close", user)
			}
		})
	}
}

// checkIntrudeOps checks the intruder's ops: an invoke and a completion
// per message, ok for publish, fail with the refusal for none.
func checkIntrudeOps(t *testing.T, h history.History, perm intruder.Permissions, refusal string, n int) {
	t.Helper()
	invokes, done := 0, 0
	for _, op := range h {
		if op.F != history.Intrude {
			continue
		}
		if op.Process != intruder.Process {
			t.Errorf("intrude op by %q, want %q", op.Process, intruder.Process)
		}
		if op.Type == history.Invoke {
			invokes++
			continue
		}
		done++
		switch perm {
		case intruder.Publish:
			if op.Type != history.OK {
				t.Errorf("intrude %s %s: %s", op.Value.Event, op.Type, op.Value.Error)
			}
		case intruder.None:
			if op.Type != history.Fail || !strings.Contains(op.Value.Error, refusal) {
				t.Errorf("intrude %s %s %q, want fail with %s", op.Value.Event, op.Type, op.Value.Error, refusal)
			}
		}
	}
	if invokes != n || done != n {
		t.Errorf("%d invokes and %d completions, want %d of each", invokes, done, n)
	}
}

// checkIntrudeFault checks the fault's completion: ok, its evidence
// what the broker said of every message.
func checkIntrudeFault(t *testing.T, h history.History, perm intruder.Permissions, n int) {
	t.Helper()
	want := fmt.Sprintf("broker accepted %d of %d intruder messages", n, n)
	if perm == intruder.None {
		want = fmt.Sprintf("broker refused %d of %d intruder messages: ", n, n)
	}
	for _, op := range h {
		if op.F == history.Fault && op.Value.Fault == string(nemesis.Intrude) && op.Type != history.Invoke {
			if op.Type != history.OK || !strings.HasPrefix(op.Value.Evidence, want) {
				t.Errorf("intrude fault %s %q %q, want ok with %q", op.Type, op.Value.Evidence, op.Value.Error, want)
			}
			t.Logf("fault evidence: %s", op.Value.Evidence)
			return
		}
	}
	t.Error("no intrude fault completion")
}

// checkIntrudeVerdict checks the checker's verdict on the run, and that
// it established what became of every message: each refused, or
// accepted and rejected, skipped or applied by every subscription; an
// invalid run is so for unauthorized effects.
func checkIntrudeVerdict(t *testing.T, r *Deployment, subs []string, want checker.Validity) {
	t.Helper()
	files, err := r.HistoryFiles()
	if err != nil {
		t.Fatal(err)
	}
	g := effectivelyOnce()
	g.Subscriptions = subs
	res, err := checker.CheckFiles(files, checker.Options{Guarantees: g})
	if err != nil {
		t.Fatal(err)
	}
	if res.Valid != want {
		t.Errorf("verdict %s %v, want %s", res.Valid, res.Reasons, want)
	}
	in := res.Intruder
	if in == nil || in.Sent == 0 || in.Refused+in.Accepted != in.Sent {
		t.Fatalf("intruder section %+v", in)
	}
	for _, k := range in.Kinds {
		for _, s := range k.Subscriptions {
			if s.Unaccounted != 0 {
				t.Errorf("%s in %s: %d unaccounted %v", k.Kind, s.Subscription, s.Unaccounted, s.UnaccountedEvents)
			}
			t.Logf("%s in %s: rejected %d %v, applied %d, skipped %d", k.Kind, s.Subscription, s.Rejected, s.Reasons, s.Applied, s.Skipped)
		}
	}
	if want == checker.Invalid {
		found := false
		for _, a := range res.Anomalies {
			found = found || a.Kind == checker.UnauthorizedEffect
		}
		if !found {
			t.Errorf("invalid without an unauthorized effect: %v", res.Reasons)
		}
	}
}

// userExists asks the broker whether the intruder's user exists.
func userExists(t *testing.T, ctx context.Context, r *Deployment, user string) bool {
	t.Helper()
	var ok bool
	var err error
	switch r.cfg.Broker {
	case "rabbitmq":
		var admin cluster.RabbitUserAdmin
		if admin, err = r.cl.RabbitUserAdmin(cluster.RabbitMQ); err == nil {
			ok, err = admin.UserExists(ctx, user)
		}
	case "kafka":
		ok, err = broker.KafkaUserExists(ctx, r.broker.Kafka(), user)
	}
	if err != nil {
		t.Fatal(err)
	}
	return ok
}
