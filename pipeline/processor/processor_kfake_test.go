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
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

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

func TestKfakeExactlyOncePerInput(t *testing.T) {
	const partitions, inputs = 3, 120
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
	defer c.Close()
	kcfg := broker.KafkaConfig{Seeds: c.ListenAddrs(), Topic: "run.events", Partitions: partitions, Logger: log}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	pub, err := kgo.NewClient(kcfg.ClientOpts("test-producer")...)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	var recs []*kgo.Record
	for i := range inputs {
		id := "ev-" + strconv.Itoa(i)
		recs = append(recs, &kgo.Record{Topic: kcfg.Topic, Key: []byte("key-" + strconv.Itoa(i%7)), Value: []byte(id), Headers: []kgo.RecordHeader{
			{Key: broker.HeaderEventID, Value: []byte(id)}, {Key: broker.HeaderSource, Value: []byte("test")},
		}})
	}
	if err := pub.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	var buf syncBuffer
	rec := history.NewWriterRecorder(&buf, "processor-0", time.Now())
	fp := failpoint.NewSet(1, func(failpoint.Name, any) { t.Error("no failpoint is armed") })
	p, err := New(Config{Name: "processor-0", Group: "run.processor", Outputs: outputs, AbortRatio: 0.33, Seed: 7, MaxBatch: 10, SessionTimeout: 500 * time.Millisecond}, kcfg, rec, fp, log)
	if err != nil {
		t.Fatal(err)
	}
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
	if len(offs) != 2*partitions {
		t.Errorf("%d partition offsets, want %d", len(offs), 2*partitions)
	}
	var markers int64
	for _, o := range offs {
		if o.LastStableOffset != o.HighWatermark {
			t.Errorf("%s/%d: last stable offset %d, high watermark %d", o.Topic, o.Partition, o.LastStableOffset, o.HighWatermark)
		}
		markers += o.HighWatermark
	}
	t.Logf("transactions %v; output topics hold %d offsets for %d committed records", ends, markers, 2*inputs)
}
