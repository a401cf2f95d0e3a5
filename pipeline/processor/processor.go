// Package processor is the transactional consume-transform-produce stage
// of issue 23 (docs/history.md, "Transactional stage"): a Kafka consumer
// group member that reads the events topic with read_committed and, for
// each input record, writes one record to each output topic and commits
// its input offsets in the same Kafka transaction. This is the
// exactly-once Kafka promises between its own topics, and the checker
// (checker/transactions.go) judges it per input record.
//
// Its transactional.id is the process's name (processor-0), stable across
// restarts: a restarted processor's first InitProducerID fences the dead
// or paused one and aborts its open transaction. A share of transactions
// (Config.AbortRatio) is aborted on purpose and its inputs read again, so
// that aborted records really exist in the output topics and a
// read_committed reader has something to skip.
package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/failpoint"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/internal/backoff"
)

// Config tunes one processor process.
type Config struct {
	// Name is the processor's transactional.id and the prefix of its
	// transactions' ids; the harness gives it the process's name.
	Name string `json:"name"`
	// Group is the consumer group the processors share.
	Group string `json:"group"`
	// Outputs are the output topics: each input gets one record in each.
	Outputs []string `json:"outputs"`
	// AbortRatio is the share of transactions aborted on purpose, in
	// [0, 1); 0 aborts none.
	AbortRatio float64 `json:"abort_ratio"`
	// Seed makes the choice of aborted transactions reproducible.
	Seed uint64 `json:"seed"`
	// MaxBatch is the most input records one transaction takes,
	// overriding the default 50.
	MaxBatch int `json:"max_batch"`
	// TransactionTimeout is how long the coordinator lets a transaction
	// stay open before aborting it itself, overriding the default 10s:
	// what a processor paused mid-transaction holds the output topics'
	// last stable offsets back for, unless a restart fences it first.
	TransactionTimeout time.Duration `json:"transaction_timeout"`
	// SessionTimeout is how long the group waits for a silent member,
	// overriding the default 2s (a killed processor's inputs wait that
	// long for its replacement).
	SessionTimeout time.Duration `json:"session_timeout"`
}

func (c *Config) defaults() error {
	if c.Name == "" || c.Group == "" || len(c.Outputs) == 0 {
		return errors.New("processor: a name, a group and output topics are required")
	}
	if c.AbortRatio < 0 || c.AbortRatio >= 1 {
		return fmt.Errorf("processor: abort ratio %g is not in [0, 1)", c.AbortRatio)
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = 50
	}
	if c.TransactionTimeout <= 0 {
		c.TransactionTimeout = 10 * time.Second
	}
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = 2 * time.Second
	}
	return nil
}

// Processor runs the stage for one process.
type Processor struct {
	cfg   Config
	kafka broker.KafkaConfig
	rec   *history.Recorder
	fp    *failpoint.Set
	log   *slog.Logger
	rng   *rand.Rand
	// incarnation tells this process's transactions from those of the
	// same transactional.id before a restart; seq numbers them in it.
	incarnation string
	seq         int64
}

// New returns a processor reading kafka's events topic.
func New(cfg Config, kafka broker.KafkaConfig, rec *history.Recorder, fp *failpoint.Set, log *slog.Logger) (*Processor, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	return &Processor{
		cfg: cfg, kafka: kafka, rec: rec, fp: fp, log: log,
		rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5851f42d4c957f2d)),
		// Restarts of a process are at least a restart delay apart: the
		// start time in ms names each incarnation uniquely and readably.
		incarnation: strconv.FormatInt(time.Now().UnixMilli(), 36),
	}, nil
}

// historyError marks a failure to record, which must stop the worker.
type historyError struct{ error }

func (e historyError) Unwrap() error { return e.error }

// Run processes until ctx ends. A session whose transaction ended in an
// error (fenced, the broker gone too long) is closed and a new one opened
// with the same transactional.id, which aborts whatever the old one left
// open; only a failure to write the history is returned.
func (p *Processor) Run(ctx context.Context) error {
	retry := backoff.Policy{Base: 100 * time.Millisecond, Cap: 2 * time.Second}
	for failures := 0; ctx.Err() == nil; failures++ {
		began := time.Now()
		err := p.session(ctx)
		if time.Since(began) > time.Minute {
			failures = 0 // it had recovered
		}
		var herr historyError
		if errors.As(err, &herr) {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		p.log.Warn("processor session ended, opening another", "err", err)
		_ = retry.Wait(ctx, failures)
	}
	return nil
}

// session runs one GroupTransactSession until ctx ends or a transaction
// fails in a way the session cannot go on from.
func (p *Processor) session(ctx context.Context) error {
	opts := append(p.kafka.ClientOpts("processor"),
		kgo.TransactionalID(p.cfg.Name),
		kgo.TransactionTimeout(p.cfg.TransactionTimeout),
		kgo.ConsumerGroup(p.cfg.Group),
		kgo.ConsumeTopics(p.kafka.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.SessionTimeout(p.cfg.SessionTimeout),
		kgo.HeartbeatInterval(p.cfg.SessionTimeout/4),
		kgo.RebalanceTimeout(p.cfg.TransactionTimeout),
		// Each transaction is flushed before its commit: no linger.
		kgo.ProducerLinger(0),
	)
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return fmt.Errorf("processor: %w", err)
	}
	defer sess.Close()
	// Fence now: InitProducerID under our transactional.id aborts what
	// an earlier incarnation left open, which would otherwise hold our
	// group's offsets unstable (and our first poll) until the
	// coordinator's timeout aborted it.
	if _, _, err := sess.Client().ProducerID(ctx); err != nil {
		return fmt.Errorf("processor: init producer id: %w", err)
	}
	for ctx.Err() == nil {
		fs := sess.PollRecords(ctx, p.cfg.MaxBatch)
		if fs.IsClientClosed() || ctx.Err() != nil {
			return nil
		}
		fs.EachError(func(t string, part int32, err error) {
			p.log.Warn("processor fetch", "topic", t, "partition", part, "err", err)
		})
		recs := fs.Records()
		if len(recs) == 0 {
			continue
		}
		if err := p.transact(ctx, sess, recs); err != nil {
			return err
		}
	}
	return nil
}

// transact runs one transaction over the inputs ins: begin, record the
// inputs, produce their outputs and record each once acknowledged, then
// commit (with the inputs' offsets) or, for a share of them, abort, and
// record how it ended. An error means the session cannot go on.
func (p *Processor) transact(ctx context.Context, sess *kgo.GroupTransactSession, ins []*kgo.Record) error {
	p.seq++
	id := p.cfg.Name + ":" + p.incarnation + ":" + strconv.FormatInt(p.seq, 10)
	tv := history.Value{Txn: id, TransactionalID: p.cfg.Name}
	if err := sess.Begin(); err != nil {
		return fmt.Errorf("processor: begin: %w", err)
	}
	es := make([]history.Entry, 0, 1+len(ins))
	es = append(es, history.Entry{Type: history.Invoke, F: history.Txn, Value: tv})
	outs := make([]*kgo.Record, 0, len(ins)*len(p.cfg.Outputs))
	for _, in := range ins {
		v := broker.ParseOutputRecord(in) // the input's own event headers
		es = append(es, history.Entry{Type: history.OK, F: history.TxnInput, Value: history.Value{
			Txn: id, Topic: in.Topic, Partition: int64(in.Partition), Offset: in.Offset, Event: v.Event, Source: v.Source,
		}})
		for _, topic := range p.cfg.Outputs {
			outs = append(outs, output(topic, in))
		}
	}
	if err := p.rec.RecordAll(es); err != nil {
		return historyError{err}
	}
	results := sess.ProduceSync(ctx, outs...)
	es = es[:0]
	var produceErr error
	for _, r := range results {
		if r.Err != nil {
			produceErr = cmpErr(produceErr, r.Err)
			continue
		}
		o := broker.ParseOutputRecord(r.Record)
		es = append(es, history.Entry{Type: history.OK, F: history.TxnOutput, Value: history.Value{
			Txn: id, Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, Event: o.Event, Source: o.Source,
			InputPartition: o.InputPartition, InputOffset: o.InputOffset,
		}})
	}
	if err := p.rec.RecordAll(es); err != nil {
		return historyError{err}
	}
	p.fp.Hit(failpoint.ProcessorAfterProduceBeforeCommit, tv)

	abort := produceErr != nil || p.rng.Float64() < p.cfg.AbortRatio
	committed, err := sess.End(ctx, kgo.TransactionEndTry(!abort))
	end := history.Entry{Type: history.OK, F: history.Txn, Value: tv}
	switch {
	case err == nil && committed:
	case err == nil || abort:
		// Aborted: on purpose, after a failed produce, or by the session
		// because the group rebalanced since the transaction began. An
		// abort whose EndTxn failed never commits either: the
		// coordinator aborts it at its timeout, or when a restart fences it.
		end.Type = history.Fail
		switch {
		case produceErr != nil:
			end.Value.Reason, end.Value.Error = "produce-failed", produceErr.Error()
		case abort:
			end.Value.Reason = history.ReasonAbort
		default:
			end.Value.Reason = "rebalance"
		}
		if err != nil {
			end.Value.Error = errors.Join(produceErr, err).Error()
		}
	case fenced(err):
		// A newer producer with our transactional.id took over: the
		// coordinator aborted this transaction when it did.
		end.Type = history.Fail
		end.Value.Reason, end.Value.Error = "fenced", err.Error()
	default:
		end.Type = history.Info
		end.Value.Error = err.Error()
	}
	if _, rerr := p.rec.Record(end.Type, end.F, end.Value); rerr != nil {
		return historyError{rerr}
	}
	if err != nil {
		return fmt.Errorf("processor: end transaction %s: %w", id, err)
	}
	p.fp.Hit(failpoint.ProcessorAfterCommitBeforePoll, tv)
	return nil
}

// cmpErr keeps the first error.
func cmpErr(first, next error) error {
	if first != nil {
		return first
	}
	return next
}

// fenced reports whether err says a newer producer with the same
// transactional.id fenced this one.
func fenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) || errors.Is(err, kerr.TransactionalIDAuthorizationFailed)
}

// output is in's record for topic: its key and payload, its event
// headers, and the headers naming in's position.
func output(topic string, in *kgo.Record) *kgo.Record {
	hs := make([]kgo.RecordHeader, 0, len(in.Headers)+2)
	for _, h := range in.Headers {
		if h.Key != broker.HeaderInputPartition && h.Key != broker.HeaderInputOffset {
			hs = append(hs, h)
		}
	}
	hs = append(hs,
		kgo.RecordHeader{Key: broker.HeaderInputPartition, Value: []byte(strconv.FormatInt(int64(in.Partition), 10))},
		kgo.RecordHeader{Key: broker.HeaderInputOffset, Value: []byte(strconv.FormatInt(in.Offset, 10))},
	)
	// The input's key keeps one aggregate in one output partition, so
	// its order downstream is the input partition's.
	return &kgo.Record{Topic: topic, Key: in.Key, Value: in.Value, Headers: hs}
}
