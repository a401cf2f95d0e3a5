package processor

// The processor against kfake, franz-go's in-process fake broker, so it
// runs under -short without a server: every input ends up exactly once in
// each output topic as read_committed sees it, some transactions abort
// and their inputs are retried, and the ops say so. The real-broker runs
// (with kills) are pipeline's TestStageKillProcessor and the built-in
// kafka-txn-stage-kill-processor.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/failpoint"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/internal/testenv"
)

// syncBuffer is a bytes.Buffer safe for the recorder's writes and the
// test's reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}

// kfakeStage starts a fake cluster with an events topic holding n inputs
// and two output topics, and returns its config and the output topics.
func kfakeStage(t *testing.T, ctx context.Context, partitions int32, n int) (broker.KafkaConfig, []string) {
	t.Helper()
	outputs := []string{"run.invoices", "run.revenue"}
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.SeedTopics(partitions, "run.events", outputs[0], outputs[1]),
		kfake.GroupMinSessionTimeout(100*time.Millisecond),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	kcfg := broker.KafkaConfig{Seeds: c.ListenAddrs(), Topic: "run.events", Partitions: partitions, Logger: log}
	pub, err := kgo.NewClient(kcfg.ClientOpts("test-producer")...)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	var recs []*kgo.Record
	for i := range n {
		id := "ev-" + strconv.Itoa(i)
		recs = append(recs, &kgo.Record{Topic: kcfg.Topic, Key: []byte("key-" + strconv.Itoa(i%7)), Value: []byte(id), Headers: []kgo.RecordHeader{
			{Key: broker.HeaderEventID, Value: []byte(id)}, {Key: broker.HeaderSource, Value: []byte("test")},
		}})
	}
	if err := pub.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return kcfg, outputs
}

// runUntilDone runs p until the stage has read every input and no
// transaction is open, and returns the ops it recorded.
func runUntilDone(t *testing.T, ctx context.Context, kcfg broker.KafkaConfig, outputs []string, p *Processor, buf *syncBuffer) history.History {
	t.Helper()
	pctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(pctx) }()
	w := broker.NewKafkaStageWatcher(kcfg, "run.processor", outputs)
	defer w.Close()
	testenv.Eventually(t, ctx, 30*time.Second, "the stage done: lag 0, no transaction open", func() error {
		lag, open, err := w.Pending(ctx)
		switch {
		case err != nil:
			return err
		case lag > 0 || open > 0:
			return fmt.Errorf("lag %d, %d partitions open", lag, open)
		}
		return nil
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	h, _, err := history.Read(bytes.NewReader(buf.Bytes()), "processor-0.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// newProcessor is processor-0 of group run.processor, recording to buf.
func newProcessor(t *testing.T, kcfg broker.KafkaConfig, outputs []string, buf *syncBuffer) *Processor {
	t.Helper()
	fp := failpoint.NewSet(1, func(failpoint.Name, any) { t.Error("no failpoint is armed") })
	return newVariant(t, kcfg, outputs, buf, Transactional, fp)
}

// newVariant is newProcessor of variant v with failpoints fp.
func newVariant(t *testing.T, kcfg broker.KafkaConfig, outputs []string, buf *syncBuffer, v Variant, fp *failpoint.Set) *Processor {
	t.Helper()
	rec := history.NewWriterRecorder(buf, "processor-0", time.Now())
	p, err := New(Config{Variant: v, Name: "processor-0", Group: "run.processor", Outputs: outputs, AbortRatio: 0.33, Seed: 7, MaxBatch: 10, SessionTimeout: 500 * time.Millisecond}, kcfg, rec, fp, kcfg.Logger)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// checkOutputs fails t unless every output topic, read committed, holds
// exactly one record per input, and no transaction is open.
func checkOutputs(t *testing.T, ctx context.Context, kcfg broker.KafkaConfig, outputs []string, inputs int) {
	t.Helper()
	for _, topic := range outputs {
		l, err := broker.KafkaCommittedLog(ctx, kcfg, topic)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[[2]int64]int{}
		for _, o := range l.Records {
			seen[[2]int64{o.InputPartition, o.InputOffset}]++
			if o.Event == "" {
				t.Errorf("%s %d@%d carries no event", topic, o.Partition, o.Offset)
			}
		}
		if len(l.Records) != inputs || len(seen) != inputs {
			t.Errorf("%s: %d records of %d distinct inputs, want %d each (%s)", topic, len(l.Records), len(seen), inputs, l.Detail)
		}
	}
	offs, err := broker.KafkaPartitionOffsets(ctx, kcfg, outputs...)
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * int(kcfg.Partitions); len(offs) != want {
		t.Errorf("%d partition offsets, want %d", len(offs), want)
	}
	for _, o := range offs {
		if o.LastStableOffset != o.HighWatermark {
			t.Errorf("%s/%d: last stable offset %d, high watermark %d", o.Topic, o.Partition, o.LastStableOffset, o.HighWatermark)
		}
	}
}

func TestKfakeExactlyOncePerInput(t *testing.T) {
	const inputs = 120
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kcfg, outputs := kfakeStage(t, ctx, 3, inputs)
	var buf syncBuffer
	h := runUntilDone(t, ctx, kcfg, outputs, newProcessor(t, kcfg, outputs, &buf), &buf)
	ends := map[history.Type]int{}
	txns := map[string]bool{}
	for _, op := range h {
		if op.F == history.Txn && op.Type != history.Invoke {
			ends[op.Type]++
			if op.Type == history.Fail && op.Value.Reason != history.ReasonAbort {
				t.Errorf("txn %s aborted for %q (%s), not on purpose", op.Value.Txn, op.Value.Reason, op.Value.Error)
			}
		}
		if op.F == history.Txn && op.Type == history.Invoke {
			if txns[op.Value.Txn] {
				t.Errorf("txn id %s used twice", op.Value.Txn)
			}
			txns[op.Value.Txn] = true
		}
	}
	if ends[history.OK] == 0 || ends[history.Fail] == 0 || ends[history.Info] > 0 {
		t.Errorf("transactions ended %v: want some committed, some aborted, none unknown", ends)
	}
	checkOutputs(t, ctx, kcfg, outputs, inputs)
	t.Logf("transactions %v", ends)
}

// A zombie with the processor's transactional.id, its transaction open,
// is fenced when the processor starts: its transaction is aborted, its
// commit fails, and nothing it wrote is visible.
func TestKfakeZombieFenced(t *testing.T) {
	const inputs = 40
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kcfg, outputs := kfakeStage(t, ctx, 3, inputs)
	zombie, err := kgo.NewClient(append(kcfg.ClientOpts("zombie"), kgo.TransactionalID("processor-0"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer zombie.Close()
	if err := zombie.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	late := &kgo.Record{Topic: outputs[0], Value: []byte("late"), Headers: []kgo.RecordHeader{{Key: broker.HeaderEventID, Value: []byte("zombie")}}}
	if err := zombie.ProduceSync(ctx, late).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var buf syncBuffer
	runUntilDone(t, ctx, kcfg, outputs, newProcessor(t, kcfg, outputs, &buf), &buf)
	if err := zombie.EndTransaction(ctx, kgo.TryCommit); err == nil {
		t.Error("the zombie's commit succeeded after the processor took its transactional.id")
	} else {
		t.Logf("zombie's commit: %v", err)
	}
	checkOutputs(t, ctx, kcfg, outputs, inputs)
}

// crashed is what a test's failpoint panics with, standing in for the
// worker's SIGKILL: the processor stops right there, its client closed
// by the unwinding (offsets it had not committed stay uncommitted, as
// after a kill).
type crashed struct{}

// crashThenRestart runs a processor of variant v until it crashes at
// failpoint at, then a second one, as its restart, until every input is
// processed; it returns both incarnations' history.
func crashThenRestart(t *testing.T, ctx context.Context, kcfg broker.KafkaConfig, outputs []string, v Variant, at failpoint.Name) history.History {
	t.Helper()
	var buf syncBuffer
	fp := failpoint.NewSet(1, func(failpoint.Name, any) { panic(crashed{}) })
	fp.Arm(failpoint.Term{Name: at, Count: 1})
	first := newVariant(t, kcfg, outputs, &buf, v, fp)
	done := make(chan any, 1)
	go func() {
		defer func() { done <- recover() }()
		_ = first.Run(ctx)
	}()
	if r := <-done; r != (crashed{}) {
		t.Fatalf("the first processor ended with %v, not at the failpoint", r)
	}
	second := newVariant(t, kcfg, outputs, &buf, v, failpoint.NewSet(1, nil))
	return runUntilDone(t, ctx, kcfg, outputs, second, &buf)
}

// A crash right after a commit: the correct processor's offsets were in
// the transaction, so its restart goes on exactly once; the known-bad
// offsets-after one had not committed them, so its restart writes the
// batch's outputs again.
func TestKfakeCrashAfterCommit(t *testing.T) {
	const inputs = 60
	for _, tc := range []struct {
		variant Variant
		dup     bool
	}{{Transactional, false}, {OffsetsAfter, true}} {
		t.Run(string(tc.variant), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			kcfg, outputs := kfakeStage(t, ctx, 3, inputs)
			crashThenRestart(t, ctx, kcfg, outputs, tc.variant, failpoint.ProcessorAfterCommitBeforePoll)
			l, err := broker.KafkaCommittedLog(ctx, kcfg, outputs[0])
			if err != nil {
				t.Fatal(err)
			}
			seen := map[[2]int64]int{}
			for _, o := range l.Records {
				seen[[2]int64{o.InputPartition, o.InputOffset}]++
			}
			t.Logf("%s: %d records of %d inputs", outputs[0], len(l.Records), len(seen))
			if len(seen) != inputs {
				t.Errorf("%d of %d inputs in %s", len(seen), inputs, outputs[0])
			}
			if got := len(l.Records) > len(seen); got != tc.dup {
				t.Errorf("duplicates %v, want %v", got, tc.dup)
			}
		})
	}
}

// A crash after the outputs are acknowledged, before the commit: the
// correct processor's transaction is still open, so its restart aborts it
// and nothing is visible twice; the known-bad idempotent one has no
// transaction, its outputs are visible at once and its offsets were not
// committed, so its restart writes the batch's outputs again; the
// known-bad offsets-before one had committed the batch's offsets before
// its transaction, which the restart aborts, so the batch's outputs are
// lost.
func TestKfakeCrashAfterProduce(t *testing.T) {
	const inputs = 60
	for _, tc := range []struct {
		variant Variant
		dup     bool
		lost    bool
	}{{Transactional, false, false}, {Idempotent, true, false}, {OffsetsBefore, false, true}} {
		t.Run(string(tc.variant), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			kcfg, outputs := kfakeStage(t, ctx, 3, inputs)
			h := crashThenRestart(t, ctx, kcfg, outputs, tc.variant, failpoint.ProcessorAfterProduceBeforeCommit)
			for _, topic := range outputs {
				l, err := broker.KafkaCommittedLog(ctx, kcfg, topic)
				if err != nil {
					t.Fatal(err)
				}
				seen := map[[2]int64]int{}
				for _, o := range l.Records {
					seen[[2]int64{o.InputPartition, o.InputOffset}]++
				}
				t.Logf("%s: %d records of %d inputs", topic, len(l.Records), len(seen))
				if got := len(seen) < inputs; got != tc.lost || len(seen) > inputs {
					t.Errorf("%d of %d inputs in %s, want lost %v", len(seen), inputs, topic, tc.lost)
				}
				if got := len(l.Records) > len(seen); got != tc.dup {
					t.Errorf("%s: duplicates %v, want %v", topic, got, tc.dup)
				}
			}
			if tc.variant != Idempotent {
				return
			}
			// No transaction, so nothing aborts: every batch but the
			// crashed one ends ok once its offsets are committed.
			ends := map[history.Type]int{}
			for _, op := range h {
				if op.F == history.Txn && op.Type != history.Invoke {
					ends[op.Type]++
				}
			}
			if ends[history.OK] == 0 || ends[history.Fail] > 0 || ends[history.Info] > 0 {
				t.Errorf("batches ended %v: want all ok", ends)
			}
		})
	}
}

// The known-bad random-id processor, without a zombie, is exactly once:
// its offsets, committed by group id alone, are in its transactions, so
// a restart after a commit goes on from them; and each start takes a
// transactional.id of its own, so the restart fences nobody (which a
// zombie needs, kafka-txn-stage-zombie on real Kafka).
func TestKfakeRandomID(t *testing.T) {
	const inputs = 60
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kcfg, outputs := kfakeStage(t, ctx, 3, inputs)
	h := crashThenRestart(t, ctx, kcfg, outputs, RandomID, failpoint.ProcessorAfterCommitBeforePoll)
	checkOutputs(t, ctx, kcfg, outputs, inputs)
	ids := map[string]bool{}
	for _, op := range h {
		if op.F == history.Txn && op.Type == history.Invoke {
			if !strings.HasPrefix(op.Value.TransactionalID, "processor-0-") {
				t.Errorf("txn %s under transactional.id %q", op.Value.Txn, op.Value.TransactionalID)
			}
			ids[op.Value.TransactionalID] = true
		}
	}
	if len(ids) != 2 {
		t.Errorf("transactional.ids %v: want one per start, two", ids)
	}
}

// A zombie's account of its late transaction: fenced (by reason, or by
// the error ending any transaction), committed, or otherwise.
func TestZombieError(t *testing.T) {
	fencedErr := fmt.Errorf("end: %w", kerr.ProducerFenced)
	for _, tc := range []struct {
		name string
		end  history.Entry
		err  error
		want string
	}{
		{"fenced", history.Entry{Type: history.Fail, Value: history.Value{Txn: "p:1", Reason: "fenced"}}, fencedErr, "zombie: late transaction p:1 fenced: yes"},
		{"fenced abort", history.Entry{Type: history.Fail, Value: history.Value{Txn: "p:1", Reason: history.ReasonAbort}}, fencedErr, "zombie: late transaction p:1 fenced: yes"},
		{"committed", history.Entry{Type: history.OK, Value: history.Value{Txn: "p:2"}}, nil, "zombie: late transaction p:2 fenced: no, committed"},
		{"rebalance", history.Entry{Type: history.Fail, Value: history.Value{Txn: "p:3", Reason: "rebalance"}}, nil, "zombie: late transaction p:3 fenced: no, ended fail rebalance"},
		{"none", history.Entry{}, nil, "zombie: late transaction (none ended) fenced: no, ended unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Processor{lastEnd: tc.end, lastEndErr: tc.err}
			z := p.zombieError(errors.New("session over"))
			if got := z.Error(); got != tc.want+" (session over)" {
				t.Errorf("got %q, want %q", got, tc.want+" (session over)")
			}
		})
	}
	p := &Processor{}
	if herr := (historyError{errors.New("disk full")}); !errors.Is(p.zombieError(herr), herr) {
		t.Error("a history error became a zombie's account")
	}
}

// A zombie: a processor paused with its transaction open (a zombie
// pause that blocks instead of SIGSTOP) while another producer takes
// its transactional.id, as its replacement's first InitProducerID does.
// Resumed, the correct processor's late commit is fenced; the random-id
// one's id was its own, so nothing fenced it and it commits. Either way
// Run ends with a *ZombieError saying so, for the worker to exit on.
func TestKfakeZombie(t *testing.T) {
	for _, tc := range []struct {
		variant           Variant
		fenced, committed bool
	}{{Transactional, true, false}, {RandomID, false, true}} {
		t.Run(string(tc.variant), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			kcfg, outputs := kfakeStage(t, ctx, 3, 60)
			paused, resume := make(chan struct{}), make(chan struct{})
			fp := failpoint.NewSet(1, func(failpoint.Name, any) { t.Error("no failpoint is armed") })
			fp.ArmZombie(failpoint.ProcessorAfterProduceBeforeCommit, func(failpoint.Name, any) {
				close(paused)
				<-resume
			})
			var buf syncBuffer
			zombie := newVariant(t, kcfg, outputs, &buf, tc.variant, fp)
			done := make(chan error, 1)
			go func() { done <- zombie.Run(ctx) }()
			select {
			case <-paused:
			case <-ctx.Done():
				t.Fatal("the processor never reached its zombie pause")
			}
			// The replacement's InitProducerID, under the transactional.id
			// the harness gives a replacement: the processor's Name.
			repl, err := kgo.NewClient(append(kcfg.ClientOpts("replacement"), kgo.TransactionalID("processor-0"))...)
			if err != nil {
				t.Fatal(err)
			}
			defer repl.Close()
			if _, _, err := repl.ProducerID(ctx); err != nil {
				t.Fatal(err)
			}
			close(resume)
			err = <-done
			z, ok := errors.AsType[*ZombieError](err)
			if !ok {
				t.Fatalf("Run ended with %v, not a zombie's account", err)
			}
			t.Logf("%s: %v", zombie.TransactionalID(), z)
			if z.Fenced != tc.fenced || z.Committed != tc.committed {
				t.Errorf("fenced %v, committed %v; want %v, %v", z.Fenced, z.Committed, tc.fenced, tc.committed)
			}
		})
	}
}
