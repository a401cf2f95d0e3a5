package pipeline

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/internal/testenv"
	"github.com/deliverycheck/deliverycheck/pipeline/processor"
)

// The correct transactional stage, its processor killed -9 mid-run once
// its transactions are committing, comes out valid with the stage's
// facts established: committed and aborted transactions, every output
// topic read to its last stable offset, a reader's reads.
func TestStageKillProcessor(t *testing.T) {
	testenv.SkipIfShort(t, "runs Kafka and PostgreSQL")
	// Its fault is its own workers': it runs beside the other such
	// tests, once the ones that break the shared servers are done.
	t.Parallel()
	cfg := Config{Broker: "kafka", Producers: 2, Rate: 80, Subscriptions: []string{"inventory"}, Stage: &Stage{}}
	res, r := runPipelineWith(t, cfg, 5*time.Second, func(t *testing.T, r *Deployment) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		outputs := r.stageOutputs()
		testenv.Eventually(t, ctx, 20*time.Second, "a committed transaction in the output topics", func() error {
			offs, err := broker.KafkaPartitionOffsets(ctx, r.broker.Kafka(), outputs...)
			if err != nil {
				return err
			}
			for _, o := range offs {
				if o.LastStableOffset > 0 {
					return nil
				}
			}
			return errors.New("every output partition's last stable offset is 0")
		})
		status, err := r.Supervisor().Kill(ctx, "processor-0")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("killed processor-0: %s", status)
	}, effectivelyOnce())
	if res.Valid != checker.Valid {
		t.Fatalf("verdict %s: %v", res.Valid, res.Reasons)
	}
	st := res.TxnStage
	if st == nil {
		t.Fatal("no transactional_stage in the result")
	}
	t.Logf("stage: %+v", *st)
	for _, ts := range st.Topics {
		t.Logf("  %+v", ts)
	}
	if st.Transactions.Committed == 0 || st.Transactions.Aborted == 0 {
		t.Errorf("transactions %+v: want some committed and some aborted", st.Transactions)
	}
	if st.Delivery != checker.ExactlyOnce {
		t.Errorf("delivery %s, want exactly-once", st.Delivery)
	}
	// The harness's own view agrees with the processor's lineage: the
	// aborted transactions' records are in the log, read uncommitted only.
	for _, ts := range st.Topics {
		if ts.Uncommitted != "complete" || ts.Aborted == 0 {
			t.Errorf("%s: uncommitted read %q found %d aborted records; want it complete, with the aborted transactions' records", ts.Topic, ts.Uncommitted, ts.Aborted)
		}
	}
	if crashes, restarts := r.Supervisor().Stats("processor-0"); crashes < 1 || restarts < 1 {
		t.Errorf("processor-0: %d crashes, %d restarts; want the kill and a restart", crashes, restarts)
	}
}

// The processor's database effect, with no fault at all: the aborts on
// purpose alone have its inputs read again. A plain effect is then
// written again (exactly once on the topics, at least once on the
// database: duplicate-effect in subscription processor); through the
// inbox, once.
func TestStageDatabaseEffect(t *testing.T) {
	t.Parallel() // no fault on the servers (main_test.go)
	testenv.SkipIfShort(t, "runs Kafka and PostgreSQL")
	for _, tt := range []struct {
		effect   processor.Effect
		valid    checker.Validity
		boundary string
	}{
		{processor.PlainEffect, checker.Invalid, "exactly once on Kafka's topics; at least once on the database"},
		{processor.InboxEffect, checker.Valid, "exactly once on Kafka's topics; exactly once on the database"},
	} {
		t.Run(string(tt.effect), func(t *testing.T) {
			// No fault (the aborts are the processor's own, on purpose):
			// the two runs go side by side.
			t.Parallel()
			cfg := Config{Broker: "kafka", Producers: 2, Rate: 60, Subscriptions: []string{"inventory"}, Stage: &Stage{Effect: tt.effect}}
			res, _ := runPipelineWith(t, cfg, 3*time.Second, nil, effectivelyOnce())
			st := res.TxnStage
			if st == nil || st.Database == nil {
				t.Fatalf("no database half: stage %+v", st)
			}
			t.Logf("%s: %s %v; boundary %q; database %+v; transactions %+v, %d retried", tt.effect, res.Valid, res.Reasons, st.Boundary, *st.Database, st.Transactions, st.Retried)
			if res.Valid != tt.valid || st.Boundary != tt.boundary {
				t.Fatalf("verdict %s, boundary %q; want %s, %q", res.Valid, st.Boundary, tt.valid, tt.boundary)
			}
			if st.Transactions.Aborted == 0 || st.Retried == 0 {
				t.Fatalf("transactions %+v, %d retried: nothing was read again", st.Transactions, st.Retried)
			}
			var dups int64
			for _, an := range res.Anomalies {
				if an.Subscription == StageConsumer && an.Kind != checker.DuplicateEffect {
					t.Errorf("%d %s in %s", an.Count, an.Kind, an.Subscription)
				}
				if an.Subscription == StageConsumer && an.Kind == checker.DuplicateEffect {
					dups = int64(an.Count)
				}
			}
			if tt.effect == processor.PlainEffect && (dups == 0 || dups != st.Database.Duplicated) {
				t.Errorf("%d duplicate-effect in %s, %d events duplicated in the database half", dups, StageConsumer, st.Database.Duplicated)
			}
		})
	}
}
