package nemesis_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/cluster/local"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/nemesis"
)

// checkWipeStep: a wipe step on cl's real 3-node Kafka (TestNodeSteps):
// the node is killed and its disk emptied (a crash op), the heal rejoins
// it as a new member (a restart op), and the evidence has both accounts.
// A wipe of the whole cluster, which has no node to rejoin, is refused
// before a schedule runs.
func checkWipeStep(t *testing.T, ctx context.Context, cl *cluster.Cluster) {
	buf := &syncBuffer{}
	env := &nemesis.Env{Cluster: cl, Broker: cluster.Kafka, Recorder: history.NewWriterRecorder(buf, "nemesis", time.Now())}
	whole, err := nemesis.ParseStep("at 0s: wipe broker for 1s")
	if err != nil {
		t.Fatal(err)
	}
	if err := nemesis.Fixed(whole).Check(env); !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "replaced with an empty disk") {
		t.Errorf("Check of %q = %v, want unsupported", whole, err)
	}

	st, err := nemesis.ParseStep("at 0s: wipe broker-1 for 1s")
	if err != nil {
		t.Fatal(err)
	}
	if err := nemesis.Fixed(st).Check(env); err != nil {
		t.Fatalf("Check of %q: %v", st, err)
	}
	node := cl.Service("kafka-1").(*local.KafkaNode)
	heal, err := st.Fault.Inject(ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	if ents, err := os.ReadDir(filepath.Join(node.Dir(), "data")); err != nil || len(ents) != 0 {
		t.Errorf("kafka-1's data dir during the wipe holds %d entries (%v), want none", len(ents), err)
	}
	if err := heal(ctx); err != nil {
		t.Fatal(err)
	}
	var got []string
	var ev string
	for _, op := range buf.history(t) {
		got = append(got, op.Type.String()+" "+string(op.F)+" "+op.Value.Target)
		if op.F == history.Fault && op.Type == history.OK {
			ev = op.Value.Evidence
		}
	}
	if want := "invoke fault kafka-1,info crash kafka-1,ok restart kafka-1,ok fault kafka-1"; strings.Join(got, ",") != want {
		t.Errorf("ops %v, want %s", got, want)
	}
	for _, want := range []string{"kafka-1 killed (signal: killed)", "disk wiped", "rejoined with an empty disk", "new directory id"} {
		if !strings.Contains(ev, want) {
			t.Errorf("evidence %q: no %q", ev, want)
		}
	}
	ids, err := local.KafkaBrokers(ctx, node.Endpoint())
	if err != nil || len(ids) != 3 {
		t.Errorf("kafka-1 after the heal lists brokers %v (%v), want all 3", ids, err)
	}
	t.Logf("evidence: %s", ev)
}
