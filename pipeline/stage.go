package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/pipeline/processor"
	"github.com/deliverycheck/deliverycheck/pipeline/worker"
)

// The transactional stage (issue 23; docs/history.md, "Transactional
// stage"): processors between the events topic and the output topics,
// a reader of the output topics during the whole run, what the drain
// waits for, and the final read's output and partition rows.

// Stage asks for a transactional consume-transform-produce stage
// (Kafka only): Processors processes of package pipeline/processor read
// the events topic in one consumer group and write one record per input
// to each output topic, in Kafka transactions that also commit their
// input offsets.
type Stage struct {
	// Processors is how many processor processes share the group,
	// overriding the default 1.
	Processors int
	// Outputs names the output topics, each prefixed with the run's
	// namespace like the events topic, overriding the default invoices
	// and revenue (the seeds' example).
	Outputs []string
	// AbortRatio is the share of transactions aborted on purpose and
	// retried, overriding the default 0.33 (as Kafka's own transactions
	// test does): without aborts no reader had an aborted record to skip.
	AbortRatio float64
	// ReadUncommitted makes the reader of the output topics read
	// uncommitted: known-bad, it sees aborted records.
	ReadUncommitted bool
	// Variant is how the processors commit their input offsets,
	// overriding the default processor.Transactional.
	Variant processor.Variant
	// NoAborts aborts no transaction on purpose, whatever AbortRatio
	// says: a benchmark's transactional stage doing the same work as an
	// at-least-once one. The checker leaves such a stage unknown (no
	// reader had an aborted record to skip), so no scenario asks for it.
	NoAborts bool
	// Effect is what the processors also write to PostgreSQL per input
	// inside their loop, overriding the default processor.NoEffect: the
	// boundary of Kafka's exactly-once. Its rows and apply ops are the
	// subscription StageConsumer's, so the checker judges them like a
	// subscription's and sets them beside the topics.
	Effect processor.Effect
}

// StageConsumer is the stage's consumer group, before the run's
// namespace: its name in the history's txn-stage op.
const StageConsumer = "processor"

// StageReader is the process name of the reader of the output topics.
const StageReader = "reader-0"

// DefaultStageOutputs are the output topics of a stage that names none.
var DefaultStageOutputs = []string{"invoices", "revenue"}

// DefaultAbortRatio is the share of transactions a stage aborts on
// purpose unless told otherwise.
const DefaultAbortRatio = 0.33

func (s *Stage) defaults() {
	if s.Processors <= 0 {
		s.Processors = 1
	}
	if len(s.Outputs) == 0 {
		s.Outputs = slices.Clone(DefaultStageOutputs)
	}
	switch {
	case s.NoAborts:
		s.AbortRatio = 0
	case s.AbortRatio == 0:
		s.AbortRatio = DefaultAbortRatio
	}
}

func processorName(i int) string { return fmt.Sprintf("processor-%d", i) }

// stageOutputs are the stage's output topics, namespaced.
func (r *Deployment) stageOutputs() []string {
	out := make([]string, len(r.cfg.Stage.Outputs))
	for i, o := range r.cfg.Stage.Outputs {
		out[i] = r.broker.Namespace + "." + o
	}
	return out
}

// startStage creates the output topics, declares the stage in the
// history, starts the processors and the reader.
func (r *Deployment) startStage(ctx context.Context) error {
	outputs := r.stageOutputs()
	if err := broker.SetupKafkaTopics(ctx, r.broker.Kafka(), outputs...); err != nil {
		return fmt.Errorf("pipeline: stage: %w", err)
	}
	if _, err := r.rec.Record(history.OK, history.TxnStage, history.Value{Consumer: StageConsumer, Target: r.broker.Events(), Topics: outputs}); err != nil {
		return err
	}
	if err := r.startReader(outputs); err != nil {
		return err
	}
	for i := range r.cfg.Stage.Processors {
		if ext := r.cfg.System.Processor; ext != nil {
			if err := r.startExternal(ctx, processorName(i), worker.RoleProcessor, StageConsumer, *ext); err != nil {
				return err
			}
			continue
		}
		name := processorName(i)
		if err := r.start(ctx, r.processorSpec(name, name)); err != nil {
			return err
		}
	}
	r.stage = broker.NewKafkaStageWatcher(r.broker.Kafka(), r.broker.Qualify(StageConsumer), outputs)
	return nil
}

// processorSpec is the spec of processor process name whose
// transactional.id is tid: its own name, or for a replacement
// (ReplaceProcessor) the name of the processor it replaces.
func (r *Deployment) processorSpec(name, tid string) worker.Spec {
	spec := r.spec(worker.RoleProcessor, name)
	spec.Processor = processor.Config{
		Variant: r.cfg.Stage.Variant,
		Name:    tid, Group: r.broker.Qualify(StageConsumer), Outputs: r.stageOutputs(),
		AbortRatio: r.cfg.Stage.AbortRatio, Seed: spec.Seed,
		Effect: r.cfg.Stage.Effect, Subscription: StageConsumer,
	}
	return spec
}

// ReplaceProcessor starts a replacement for processor worker (paused by
// the nemesis's zombie fault, nemesis.Env.Replace): a new process,
// its own history process (processor-0.r1, then .r2, for processor-0),
// with the transactional.id of the processor it replaces, in the same
// group. The supervisor keeps it running like any worker; it is not one
// of the deployment's named workers.
func (r *Deployment) ReplaceProcessor(ctx context.Context, name string) (string, error) {
	if r.cfg.Stage == nil {
		return "", errors.New("pipeline: no stage: only a processor can be replaced")
	}
	tid, _, _ := strings.Cut(name, replacementSep)
	if !slices.Contains(stageWorkerNames(r.cfg), tid) {
		return "", fmt.Errorf("pipeline: %s is not a processor of the stage (%s)", name, strings.Join(stageWorkerNames(r.cfg), ", "))
	}
	have := r.sup.Names()
	n := 1
	for slices.Contains(have, fmt.Sprintf("%s%s%d", tid, replacementSep, n)) {
		n++
	}
	spec := r.processorSpec(fmt.Sprintf("%s%s%d", tid, replacementSep, n), tid)
	// Its own seed: the deployment's list of workers is not touched
	// while the run goes on.
	spec.Seed ^= uint64(n) * 0xbf58476d1ce4e5b9
	spec.Processor.Seed = spec.Seed
	b, err := json.Marshal(spec)
	if err != nil {
		return "", fmt.Errorf("pipeline: %w", err)
	}
	// Kept running (restarted after a crash) until the deployment stops,
	// not only while the caller's context lasts.
	if err := r.sup.Start(context.WithoutCancel(ctx), spec.Process, b); err != nil {
		return "", err
	}
	return spec.Process, nil
}

// replacementSep separates a replaced processor's name from its
// replacement's number: processor-0.r1.
const replacementSep = ".r"

// startReader starts the reader of the output topics, a goroutine of the
// harness recording, as process reader-0, an output-read op for each
// record of the stage it reads, from the start of the run until
// stopStageReader. It reads read_committed unless the stage asks for the
// known-bad reader.
func (r *Deployment) startReader(outputs []string) error {
	rec, err := history.NewRecorder(filepath.Join(r.dir, HistoryDir, StageReader+".jsonl"), StageReader, r.base)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := broker.KafkaReadOutputs(ctx, r.broker.Kafka(), outputs, !r.cfg.Stage.ReadUncommitted, func(o broker.OutputRecord) error {
			if o.Event == "" || !o.HasInput {
				return nil // nothing to name its input by (the final read says so)
			}
			_, err := rec.Record(history.OK, history.OutputRead, history.Value{
				Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, Event: o.Event, Source: o.Source,
				InputPartition: o.InputPartition, InputOffset: o.InputOffset,
			})
			return err
		})
		done <- errors.Join(err, rec.Close())
	}()
	r.stopReader = func() error {
		cancel()
		err := <-done
		if err != nil {
			r.log.Warn("stage reader", "err", err)
		}
		return err
	}
	return nil
}

// stopStageReader stops the reader of the output topics, if it runs,
// and waits until its last op is written. An error it ended with is
// logged: its ops so far stand.
func (r *Deployment) stopStageReader() {
	if r.stopReader != nil {
		_ = r.stopReader()
		r.stopReader = nil
	}
}

// stageRows reads the output topics into final-read rows: per topic, its
// records read_committed up to the last stable offsets (table output),
// closed by a row without an event (info with the error when the read
// failed), then the records its read_uncommitted read adds below those
// offsets, the aborted ones (table aborted), closed the same way; then
// every output partition's offsets (table partition).
func (r *Deployment) stageRows(ctx context.Context) []history.Entry {
	var rows []history.Entry
	outputs := r.stageOutputs()
	for _, topic := range outputs {
		l, err := broker.KafkaCommittedLog(ctx, r.broker.Kafka(), topic)
		rows = append(rows, r.outputRows(history.TableOutput, topic, l.Records, l.Detail, err)...)
		var ab broker.AbortedLog
		if err == nil {
			ab, err = broker.KafkaAbortedRecords(ctx, r.broker.Kafka(), l)
		} else {
			err = fmt.Errorf("not compared: the read_committed read of %s failed", topic)
		}
		rows = append(rows, r.outputRows(history.TableAborted, topic, ab.Records, ab.Detail, err)...)
	}
	offs, err := broker.KafkaPartitionOffsets(ctx, r.broker.Kafka(), outputs...)
	if err != nil {
		// Without partition rows the checker leaves transaction-left-open
		// unjudged and the stage's facts unestablished.
		r.log.Warn("read the output topics' offsets", "err", err)
	}
	for _, o := range offs {
		rows = append(rows, finalRow(history.Value{
			Table: history.TablePartition, Topic: o.Topic, Partition: int64(o.Partition),
			LastStableOffset: o.LastStableOffset, HighWatermark: o.HighWatermark,
		}))
	}
	return rows
}

// outputRows are the final-read rows of table of one output topic's
// records, closed by a row without an event: ok with detail, or info
// with the error of the read (err) or the records no row can name. A
// record without an event-id header, or without input-partition and
// input-offset headers, names no input (docs/contract.md, "Processor"):
// it gets no row and makes the read incomplete.
func (r *Deployment) outputRows(table, topic string, recs []broker.OutputRecord, detail string, err error) []history.Entry {
	rows := make([]history.Entry, 0, len(recs)+1)
	var anonymous, noInput int
	for _, o := range recs {
		switch {
		case o.Event == "":
			anonymous++
		case !o.HasInput:
			noInput++
		default:
			rows = append(rows, finalRow(history.Value{
				Table: table, Topic: o.Topic, Partition: o.Partition, Offset: o.Offset,
				Event: o.Event, Source: o.Source, InputPartition: o.InputPartition, InputOffset: o.InputOffset,
			}))
		}
	}
	if err == nil && anonymous > 0 {
		err = fmt.Errorf("%d of %d records in %s carry no %s header", anonymous, len(recs), topic, broker.HeaderEventID)
	}
	if err == nil && noInput > 0 {
		err = fmt.Errorf("%d of %d records in %s do not carry both %s and %s headers (decimal): they name no input", noInput, len(recs), topic, broker.HeaderInputPartition, broker.HeaderInputOffset)
	}
	done := finalRow(history.Value{Table: table, Topic: topic, Detail: detail})
	if err != nil {
		r.log.Warn("read an output topic", "topic", topic, "table", table, "err", err)
		done.Type, done.Value.Error = history.Info, err.Error()
	}
	return append(rows, done)
}

// stagePending is what the drain waits for in the stage: the processors'
// lag on the events topic, and the output partitions with a transaction
// open. Both 0 without a stage.
func (r *Deployment) stagePending(ctx context.Context) (lag, open int64, err error) {
	if r.stage == nil {
		return 0, 0, nil
	}
	return r.stage.Pending(ctx)
}

// stageWorkerNames are the stage's workers of cfg (defaults applied).
func stageWorkerNames(cfg Config) []string {
	if cfg.Stage == nil {
		return nil
	}
	out := make([]string, cfg.Stage.Processors)
	for i := range out {
		out[i] = processorName(i)
	}
	return out
}

// checkStage refuses a stage the run cannot have.
func checkStage(cfg Config) error {
	if cfg.Stage == nil {
		return nil
	}
	if cfg.Broker != "kafka" {
		return fmt.Errorf("pipeline: the transactional stage needs Kafka (broker is %s)", cfg.Broker)
	}
	if v := cfg.Stage.Variant; v != "" && !slices.Contains(processor.Variants(), v) {
		return fmt.Errorf("pipeline: unknown processor variant %q (valid: %s)", v, processor.VariantNames())
	}
	if err := checkStageEffect(cfg); err != nil {
		return err
	}
	if cfg.Stage.AbortRatio < 0 || cfg.Stage.AbortRatio >= 1 {
		return fmt.Errorf("pipeline: stage abort ratio %g is not in [0, 1)", cfg.Stage.AbortRatio)
	}
	for _, o := range cfg.Stage.Outputs {
		if o == "" || strings.ContainsAny(o, "/ ") || o == "events" || o == "events.dlq" {
			return fmt.Errorf("pipeline: stage output topic %q: not a name, or the events topic's", o)
		}
	}
	return nil
}

// checkStageEffect refuses a stage's database effect the run cannot
// judge: one whose subscription name a subscription of the run also
// has, or in a workload with poison events (the processor applies every
// input; it has no dead-letter path).
func checkStageEffect(cfg Config) error {
	e := cfg.Stage.Effect
	if !e.Writes() {
		return nil
	}
	if !slices.Contains(processor.Effects(), e) {
		return fmt.Errorf("pipeline: unknown stage effect %q (valid: %s)", e, processor.EffectNames())
	}
	if slices.Contains(cfg.Subscriptions, StageConsumer) {
		return fmt.Errorf("pipeline: the stage's effect is subscription %q, and the run has a subscription of that name", StageConsumer)
	}
	if cfg.PoisonRatio > 0 {
		return errors.New("pipeline: the stage's effect applies every input and dead-letters none: no poison events with it")
	}
	return nil
}

// declaredSubscriptions are the subscriptions the setup op declares: the
// run's, and the stage effect's, which owes every committed event its
// effect as they do.
func declaredSubscriptions(cfg Config) []string {
	if cfg.Stage == nil || !cfg.Stage.Effect.Writes() {
		return cfg.Subscriptions
	}
	return append(slices.Clone(cfg.Subscriptions), StageConsumer)
}

// processorEnv adds what a team's processor (system.processor) needs
// besides what every Kafka component gets: the output topics, its
// transactional.id and the abort ratio. The consumer group
// (DELIVERYCHECK_KAFKA_GROUP) and DELIVERYCHECK_SUBSCRIPTION come with
// the stage's consumer name, StageConsumer.
func (r *Deployment) processorEnv(env map[string]string, name string) {
	env[EnvKafkaOutputTopics] = strings.Join(r.stageOutputs(), ",")
	// The process name today: stable across restarts, so a restart
	// fences its dead or paused predecessor.
	env[EnvTransactionalID] = name
	env[EnvAbortRatio] = strconv.FormatFloat(r.cfg.Stage.AbortRatio, 'g', -1, 64)
}
