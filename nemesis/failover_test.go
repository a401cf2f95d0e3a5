package nemesis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/cluster/netns"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/internal/testenv"
	"github.com/deliverycheck/deliverycheck/nemesis"
)

// A failover step on a real primary and standby: the primary is killed
// (a crash op), the standby promoted with the failover's own account as
// evidence, and the heal rejoins the deposed primary as a standby (a
// restart op), after which the database fails over again.
func TestFailoverStep(t *testing.T) {
	testenv.SkipIfShort(t, "starts PostgreSQL with a standby")
	testenv.MustHaveServer(t, "network namespaces", netns.Check())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := cluster.Start(ctx, cluster.Config{Services: []string{cluster.Postgres}, Standby: "sync"})
	testenv.MustHaveServer(t, "postgres", err)
	defer cl.Close()

	for round := range 2 {
		buf := &syncBuffer{}
		env := &nemesis.Env{Cluster: cl, Recorder: history.NewWriterRecorder(buf, "nemesis", time.Now())}
		st, err := nemesis.ParseStep("at 0s: failover postgres")
		if err != nil {
			t.Fatal(err)
		}
		heal, err := st.Fault.Inject(ctx, env)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if err := heal(ctx); err != nil {
			t.Fatalf("round %d: heal: %v", round, err)
		}
		var got []string
		var ev string
		for _, op := range buf.history(t) {
			got = append(got, op.Type.String()+" "+string(op.F))
			if op.F == history.Fault && op.Type == history.OK {
				ev = op.Value.Evidence
			}
		}
		if want := "invoke fault,info crash,ok restart,ok fault"; strings.Join(got, ",") != want {
			t.Errorf("round %d: ops %v, want %s", round, got, want)
		}
		if !strings.Contains(ev, "promoted") || !strings.Contains(ev, "link postgres →") {
			t.Errorf("round %d: evidence %q", round, ev)
		}
	}
}

// A restart whose window ends while the server is stopped (the run's
// end, on a loaded machine) still starts it again and says it took
// effect; only an interruption (ctx cancelled) cuts it short.
func TestRestartOutlastsTheWindow(t *testing.T) {
	testenv.SkipIfShort(t, "starts PostgreSQL")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := cluster.Start(ctx, cluster.Config{Services: []string{cluster.Postgres}})
	testenv.MustHaveServer(t, "postgres", err)
	defer cl.Close()

	buf := &syncBuffer{}
	env := &nemesis.Env{Cluster: cl, Recorder: history.NewWriterRecorder(buf, "nemesis", time.Now())}
	st, err := nemesis.ParseStep("at 0s: restart postgres")
	if err != nil {
		t.Fatal(err)
	}
	// Far shorter than a stop and a start of PostgreSQL.
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer wcancel()
	heal, err := st.Fault.Inject(wctx, env)
	if err != nil {
		t.Fatalf("restart past the window's end: %v", err)
	}
	if wctx.Err() == nil {
		t.Fatal("the restart ended within 20ms: the test proves nothing")
	}
	if err := heal(ctx); err != nil {
		t.Fatalf("heal: %v", err)
	}
	var got []string
	for _, op := range buf.history(t) {
		got = append(got, op.Type.String()+" "+string(op.F))
	}
	if want := "invoke fault,ok restart,ok fault"; strings.Join(got, ",") != want {
		t.Errorf("ops %v, want %s", got, want)
	}

	// Interrupted: cancelled while stopping or starting, it fails.
	ictx, icancel := context.WithCancel(ctx)
	time.AfterFunc(20*time.Millisecond, icancel)
	if _, err := st.Fault.Inject(ictx, env); err == nil {
		t.Error("a restart cancelled after 20ms took effect")
	}
}
