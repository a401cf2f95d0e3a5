package pipeline

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/pipeline/processor"
)

// stageBenches are the stages BenchmarkStage compares, on the same
// pipeline: the transactional processor as the scenarios run it (a
// third of its transactions aborted and redone), the same with no aborts
// (the same work as the at-least-once stage, so the difference is the
// transactions' own cost), and the at-least-once stage (processor
// variant idempotent: produce, then commit the offsets).
var stageBenches = []struct {
	name  string
	stage Stage
}{
	{"transactional", Stage{}},
	{"transactional-no-aborts", Stage{NoAborts: true}},
	{"at-least-once", Stage{Variant: processor.Idempotent}},
}

// BenchmarkStage measures what Kafka transactions cost the
// consume-transform-produce stage (issue 23): the transactional processor
// against the same stage at least once, each over the same pipeline as
// BenchmarkPipeline on Kafka (producers flat out for a window, one
// subscription) with one processor writing two output topics. The
// producers outrun the processor, so the stage works on a backlog and its
// rate is its own. Per stage:
//
//   - events/s: inputs the stage committed per second, from its first
//     commit plus a second of warm-up to its last (after the producers
//     stopped, it works off what piled up: its own pace, not theirs);
//     produced/s is the producers' rate over their window for
//     comparison, behind-s how long after the producers' last commit the
//     stage's last came, and backlog-events/s its rate over that time
//     (the producers stopped: the stage, the relay and the subscription
//     share the machine; 0 when it was less than a second behind);
//   - txn-p50/p99-ms: a committed batch's txn invoke to ok (read,
//     produce two records per input, commit), and commit-p50/p99-ms the
//     commit alone (last output acknowledged to ok: EndTxn with the
//     offsets, or the idempotent stage's CommitRecords); batch is the
//     mean inputs per committed batch;
//   - CPU µs per stage event over the window and the catch-up, split by
//     process as BenchmarkPipeline's (cpu_test.go; the producers, which
//     exit when stopped, up to the window's end), with the processor's
//     own (processor-µs/ev) and Kafka's (kafka-µs/ev) reported apart.
func BenchmarkStage(b *testing.B) {
	alone(b, "kafka")
	// Unmeasured: a fresh Kafka JVM spends its first windows compiling.
	stageRun(b, Stage{}, 5*time.Second)
	for _, sb := range stageBenches {
		b.Run(sb.name, func(b *testing.B) {
			var sum stageFigures
			cpu := map[string]float64{}
			n := 0
			for b.Loop() {
				quiesce(b)
				f := stageRun(b, sb.stage, 5*time.Second)
				sum.rate += f.rate
				sum.produced += f.produced
				sum.behind += f.behind
				sum.backlog += f.backlog
				sum.batch += f.batch
				sum.txnP50, sum.txnP99 = sum.txnP50+f.txnP50, sum.txnP99+f.txnP99
				sum.commitP50, sum.commitP99 = sum.commitP50+f.commitP50, sum.commitP99+f.commitP99
				for k, v := range f.cpu {
					cpu[k] += v
				}
				n++
			}
			d := float64(n)
			b.ReportMetric(sum.rate/d, "events/s")
			b.ReportMetric(sum.produced/d, "produced/s")
			b.ReportMetric(sum.behind/d, "behind-s")
			b.ReportMetric(sum.backlog/d, "backlog-events/s")
			b.ReportMetric(sum.batch/d, "batch")
			b.ReportMetric(sum.txnP50/d, "txn-p50-ms")
			b.ReportMetric(sum.txnP99/d, "txn-p99-ms")
			b.ReportMetric(sum.commitP50/d, "commit-p50-ms")
			b.ReportMetric(sum.commitP99/d, "commit-p99-ms")
			for k := range cpu {
				cpu[k] /= d
			}
			b.ReportMetric(cpu["worker/processor"], "processor-µs/ev")
			b.ReportMetric(cpu["kafka"], "kafka-µs/ev")
			reportCPU(b, cpu)
		})
	}
}

// stageFigures are one stage run's (see BenchmarkStage).
type stageFigures struct {
	rate, produced, behind, backlog, batch float64
	txnP50, txnP99, commitP50, commitP99   float64
	cpu                                    map[string]float64
}

// stageRun runs the pipeline with stage st, its producers flat out for
// d, waits until the stage has committed every event, and returns its
// figures.
func stageRun(b *testing.B, st Stage, d time.Duration) stageFigures {
	b.Helper()
	cl := servers.Get(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg := benchConfig("kafka")
	cfg.Stage = &st
	r, err := Start(ctx, cl, b.TempDir(), cfg, workerCmd(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	start := cpuSamples(ctx, b, r)
	time.Sleep(d) // the measured window: producers run flat out
	// The producers (and their database backends) exit when stopped:
	// their time is sampled now, everyone else's once the stage is done.
	window := cpuSamples(ctx, b, r)
	if err := r.StopProducers(ctx); err != nil {
		b.Fatal(err)
	}
	if err := stageCaughtUp(ctx, r); err != nil {
		b.Fatal(err)
	}
	end := cpuSamples(ctx, b, r)
	for pid, s := range window {
		if _, ok := end[pid]; !ok {
			end[pid] = s
		}
	}
	// Total µs per group: divided by the stage's events below, once the
	// history has counted them.
	cpu := map[string]float64{}
	for pid, s := range end {
		cpu[s.group] += float64(s.ticks-start[pid].ticks) * 1e6 / ticksPerSecond
	}
	if _, err := r.Finish(ctx); err != nil {
		b.Fatal(err)
	}
	f, events := stageHistoryFigures(runHistory(b, r), time.Second)
	if f.rate == 0 || events == 0 {
		b.Fatal("the stage committed nothing")
	}
	for k := range cpu {
		cpu[k] /= float64(events)
	}
	f.cpu = cpu
	return f
}

// stageCaughtUp waits until the events topic holds every committed event
// and the stage has committed them all: its group's lag 0 and no
// transaction open in the output topics.
func stageCaughtUp(ctx context.Context, r *Deployment) error {
	kc, err := kgo.NewClient(r.broker.Kafka().ClientOpts("bench")...)
	if err != nil {
		return fmt.Errorf("stage bench: %w", err)
	}
	defer kc.Close()
	adm := kadm.NewClient(kc)
	var committed int64
	if err := r.DB().QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&committed); err != nil {
		return fmt.Errorf("stage bench: count the outbox: %w", err)
	}
	for {
		ends, err := adm.ListEndOffsets(ctx, r.broker.Events())
		if err == nil {
			err = ends.Error()
		}
		var inTopic, lag, open int64
		ends.Each(func(o kadm.ListedOffset) { inTopic += o.Offset })
		if err == nil {
			lag, open, err = r.stagePending(ctx)
		}
		if err == nil && inTopic >= committed && lag == 0 && open == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stage bench: the stage never caught up (%d of %d events in the topic, lag %d, %d partitions open, last error %v): %w",
				inTopic, committed, lag, open, err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stageHistoryFigures reads a stage run's figures from its history (all
// but CPU), and how many inputs the stage committed in all. The rate
// counts the inputs of the batches committed from warm after the first
// commit to the last one.
func stageHistoryFigures(h history.History, warm time.Duration) (stageFigures, int) {
	type txn struct {
		begun, lastOut, ended int64
		inputs                int
		ok                    bool
	}
	txns := map[string]*txn{}
	get := func(id string) *txn {
		t := txns[id]
		if t == nil {
			t = &txn{}
			txns[id] = t
		}
		return t
	}
	var firstCommit, lastCommit int64 = -1, 0
	var commits int
	for _, op := range h {
		switch {
		case op.F == history.Commit && op.Type == history.OK:
			if firstCommit < 0 {
				firstCommit = op.Time
			}
			lastCommit = op.Time
			commits++
		case op.F == history.Txn && op.Type == history.Invoke:
			get(op.Value.Txn).begun = op.Time
		case op.F == history.Txn:
			t := get(op.Value.Txn)
			t.ended, t.ok = op.Time, op.Type == history.OK
		case op.F == history.TxnInput:
			get(op.Value.Txn).inputs++
		case op.F == history.TxnOutput:
			t := get(op.Value.Txn)
			t.lastOut = max(t.lastOut, op.Time)
		}
	}
	var f stageFigures
	var first, last int64 = -1, 0
	var committed []*txn
	for _, t := range txns {
		if !t.ok {
			continue
		}
		committed = append(committed, t)
		if first < 0 || t.ended < first {
			first = t.ended
		}
		last = max(last, t.ended)
	}
	if len(committed) == 0 {
		return f, 0
	}
	from := first + int64(warm)
	var events, inWindow, inBacklog int
	var txnMS, commitMS []float64
	for _, t := range committed {
		events += t.inputs
		if t.ended >= from {
			inWindow += t.inputs
		}
		if t.ended > lastCommit {
			inBacklog += t.inputs
		}
		txnMS = append(txnMS, float64(t.ended-t.begun)/1e6)
		if t.lastOut > 0 {
			commitMS = append(commitMS, float64(t.ended-t.lastOut)/1e6)
		}
	}
	if last > from {
		f.rate = float64(inWindow) / (float64(last-from) / 1e9)
	}
	if lastCommit > firstCommit {
		f.produced = float64(commits) / (float64(lastCommit-firstCommit) / 1e9)
		f.behind = float64(last-lastCommit) / 1e9
	}
	if f.behind >= 1 {
		f.backlog = float64(inBacklog) / f.behind
	}
	f.batch = float64(events) / float64(len(committed))
	f.txnP50, f.txnP99 = percentiles(txnMS)
	f.commitP50, f.commitP99 = percentiles(commitMS)
	return f, events
}

// percentiles are xs's p50 and p99 (0 for none); xs is sorted in place.
func percentiles(xs []float64) (p50, p99 float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	slices.Sort(xs)
	return xs[len(xs)/2], xs[len(xs)*99/100]
}

// TestStageHistoryFigures: the stage's figures count committed batches
// only, their inputs once, and time the commit from the last output.
func TestStageHistoryFigures(t *testing.T) {
	ms := int64(time.Millisecond)
	var h history.History
	add := func(at int64, typ history.Type, f history.F, txn string) {
		h = append(h, history.Op{Time: at * ms, Type: typ, F: f, Value: history.Value{Txn: txn}})
	}
	// Producers commit one event per ms for 3 s.
	for i := range int64(3000) {
		add(i, history.OK, history.Commit, "")
	}
	// A batch of 10 inputs every 10 ms from 0 to 4 s: 100 ms to
	// produce, 5 ms to commit; every fifth aborted.
	for i := range int64(400) {
		id := fmt.Sprint("p:1:", i)
		at := i * 10
		add(at, history.Invoke, history.Txn, id)
		for range 10 {
			add(at, history.OK, history.TxnInput, id)
		}
		add(at+100, history.OK, history.TxnOutput, id)
		if i%5 == 4 {
			add(at+105, history.Fail, history.Txn, id)
		} else {
			add(at+105, history.OK, history.Txn, id)
		}
	}
	slices.SortStableFunc(h, func(a, b history.Op) int { return int(a.Time - b.Time) })
	f, events := stageHistoryFigures(h, time.Second)
	if events != 3200 {
		t.Errorf("%d events, want 3200 (the committed batches' inputs)", events)
	}
	// From 1.105 s to 4.085 s: 240 batches committed, 2400 inputs.
	if f.rate < 790 || f.rate > 810 {
		t.Errorf("rate %.1f, want about 800/s", f.rate)
	}
	if f.txnP50 != 105 || f.commitP99 != 5 || f.batch != 10 {
		t.Errorf("txn p50 %.1f ms, commit p99 %.1f ms, batch %.1f; want 105, 5, 10", f.txnP50, f.commitP99, f.batch)
	}
	// The last batch (the 400th) aborted: the last commit is the 399th's.
	if f.produced < 999 || f.produced > 1002 || f.behind < 1.085 || f.behind > 1.087 {
		t.Errorf("produced %.1f/s, behind %.3f s; want 1000/s and 1.086 s", f.produced, f.behind)
	}
	// After 2.999 s: the batches ending from 3.005 s to 4.085 s, 88
	// of them committed.
	if want := 880 / 1.086; math.Abs(f.backlog-want) > 1 {
		t.Errorf("backlog rate %.1f/s, want %.1f", f.backlog, want)
	}
}
