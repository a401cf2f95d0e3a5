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
