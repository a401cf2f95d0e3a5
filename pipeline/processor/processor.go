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
//
// Config.Variant swaps in known-bad processors for the checker to catch:
// OffsetsAfter and OffsetsBefore commit their offsets outside their
// transactions, Idempotent has no transaction at all, RandomID takes a
// new transactional.id on every start and sends its offsets to the
// transaction by group id alone.
// Config.Effect has it also write an effect to PostgreSQL per input
// inside its loop (effect.go): the boundary of Kafka's exactly-once.
//
// A processor paused by the nemesis's zombie fault (failpoint.Set.ArmZombie)
// is replaced while stopped; resumed, it ends the transaction in hand (its
// late write, which must be fenced) and Run returns a [*ZombieError]
// saying how that ended, so that its process exits for good.
package processor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/failpoint"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/internal/backoff"
)

// Variant is how the processor commits its input offsets.
type Variant string

const (
	// Transactional is correct: the input offsets are committed in the
	// transaction that writes the outputs (franz-go's
	// GroupTransactSession), so both happen or neither does.
	Transactional Variant = "transactional"
	// OffsetsAfter is known-bad: the outputs are written in a transaction
	// (retried until one commits), and the input offsets committed after
	// it, outside it. A crash between the two (failpoint
	// processor.after-commit-before-poll) has the restarted processor
	// read the inputs again and write their outputs twice.
	OffsetsAfter Variant = "offsets-after"
	// OffsetsBefore is known-bad: the input offsets are committed first,
	// outside any transaction, and the outputs written after, in
	// transactions until one commits. A crash between the two (failpoint
	// processor.after-produce-before-commit: the outputs acknowledged,
	// their transaction open) has the restart fence and abort that
	// transaction and go on past the committed offsets: those inputs'
	// outputs are lost.
	OffsetsBefore Variant = "offsets-before"
	// Idempotent is known-bad: no transactions at all. An idempotent
	// producer (franz-go's default without a transactional.id: no
	// duplicates from its own retries) in the group, auto-commit off,
	// produces each batch's outputs and then commits the batch's input
	// offsets (CommitRecords). Its records are visible once acknowledged
	// and it cannot abort, so a crash between the two (failpoint
	// processor.after-produce-before-commit) has the restarted processor
	// read the batch again and write its outputs twice: at least once,
	// the stage the transactional one is measured against.
	Idempotent Variant = "idempotent"
	// RandomID is known-bad: a new random transactional.id on every
	// start, so a replacement fences nobody, and the input offsets sent
	// to the transaction by the group's id alone (AddOffsetsToTxn, then
	// TxnOffsetCommit with generation -1 and no member id: how clients
	// before KIP-447 did it). A zombie (paused while its transaction is
	// open, replaced meanwhile, resumed before the transaction timeout)
	// commits its late transaction, and the inputs its replacement also
	// processed come out twice. Both halves are needed: on Kafka >= 2.5
	// the group generation fences a zombie even with a random
	// transactional.id (franz-go's GroupTransactSession commits the
	// offsets with it and aborts once its membership is gone: on Kafka
	// 4.1.1 such a zombie's late transaction ended fail, reason
	// rebalance, and the run was valid); with offsets committed by group
	// id alone it does not (docs/pipeline.md, "Transactional stage").
	RandomID Variant = "random-id"
)

// Variants lists every processor variant, the correct one first.
func Variants() []Variant {
	return []Variant{Transactional, OffsetsAfter, Idempotent, RandomID, OffsetsBefore}
}

// VariantNames lists the variants for an error message.
func VariantNames() string {
	names := make([]string, 0, len(Variants()))
	for _, v := range Variants() {
		names = append(names, string(v))
	}
	return strings.Join(names, ", ")
}

// Config tunes one processor process.
type Config struct {
	// Variant is how input offsets are committed, overriding the default
	// Transactional.
	Variant Variant `json:"variant,omitempty"`
	// Name is the processor's transactional.id (for RandomID, its
	// prefix) and the prefix of its transactions' ids; the harness gives
	// it the process's name, and a replacement the name of the process
	// it replaces (processor-0 for processor-0.r1).
	Name string `json:"name"`
	// Group is the consumer group the processors share.
	Group string `json:"group"`
	// Outputs are the output topics: each input gets one record in each.
	Outputs []string `json:"outputs"`
	// AbortRatio is the share of transactions aborted on purpose, in
	// [0, 1); 0 aborts none. Idempotent ignores it: without a
	// transaction there is nothing to abort.
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
	// Effect is what the processor also writes to the database per
	// input, inside its loop, before its transaction ends, overriding
	// the default NoEffect (effect.go). It needs SetDatabase.
	Effect Effect `json:"effect,omitempty"`
	// Subscription names the effect: the consumer of its effects rows,
	// inbox marks and apply ops (the stage's consumer group as its
	// txn-stage op names it, so the checker judges the effect as that
	// subscription's). Required with an effect.
	Subscription string `json:"subscription,omitempty"`
}

func (c *Config) defaults() error {
	if c.Name == "" || c.Group == "" || len(c.Outputs) == 0 {
		return errors.New("processor: a name, a group and output topics are required")
	}
	if c.AbortRatio < 0 || c.AbortRatio >= 1 {
		return fmt.Errorf("processor: abort ratio %g is not in [0, 1)", c.AbortRatio)
	}
	if c.Variant == "" {
		c.Variant = Transactional
	}
	if !slices.Contains(Variants(), c.Variant) {
		return fmt.Errorf("processor: unknown variant %q (valid: %s)", c.Variant, VariantNames())
	}
	if err := c.checkEffect(); err != nil {
		return err
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
	lastTxn     string // the id of the last transaction begun
	// tid is the transactional.id: Name, or for RandomID Name and a
	// random suffix.
	tid string
	// lastEnd is how the last transaction (or batch) ended, for a
	// zombie's account of its late one.
	lastEnd history.Entry
	// lastEndErr is the error ending the last transaction, if any.
	lastEndErr error
	// db is where Config.Effect is written; effectFailures counts the
	// effects that failed in a row, each aborting its transaction and
	// waiting a backoff before the next poll.
	db             *pgxpool.Pool
	effectFailures int
}

// New returns a processor reading kafka's events topic.
func New(cfg Config, kafka broker.KafkaConfig, rec *history.Recorder, fp *failpoint.Set, log *slog.Logger) (*Processor, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	p := &Processor{
		cfg: cfg, kafka: kafka, rec: rec, fp: fp, log: log,
		rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5851f42d4c957f2d)),
		// Restarts of a process are at least a restart delay apart: the
		// start time in ms names each incarnation uniquely and readably.
		incarnation: strconv.FormatInt(time.Now().UnixMilli(), 36),
		tid:         cfg.Name,
	}
	if cfg.Variant == RandomID {
		// Random, not seeded: two starts of one seed must differ.
		p.tid = cfg.Name + "-" + strconv.FormatUint(rand.Uint64(), 36)
	}
	return p, nil
}

// TransactionalID is the processor's transactional.id.
func (p *Processor) TransactionalID() string { return p.tid }

// ZombieError ends Run when the processor was paused by the zombie fault
// and replaced while stopped (failpoint.Set.Zombie): it says how the
// late transaction it had in hand ended.
type ZombieError struct {
	// Txn is the late transaction, "" if none ended after the pause.
	Txn string
	// Fenced: the coordinator refused it (a newer producer had its
	// transactional.id); Committed: it committed, unfenced.
	Fenced, Committed bool
	// Outcome is how it ended otherwise ("fail rebalance", "info"), and
	// Err what ended it or the session.
	Outcome string
	Err     error
}

func (z *ZombieError) Error() string {
	var b strings.Builder
	b.WriteString("zombie: late transaction ")
	b.WriteString(cmp.Or(z.Txn, "(none ended)"))
	switch {
	case z.Fenced:
		b.WriteString(" fenced: yes")
	case z.Committed:
		b.WriteString(" fenced: no, committed")
	default:
		b.WriteString(" fenced: no, ended " + cmp.Or(z.Outcome, "unknown"))
	}
	if z.Err != nil {
		b.WriteString(" (" + z.Err.Error() + ")")
	}
	return b.String()
}

// zombieError is the ZombieError of a processor resumed after a zombie
// pause, from the last transaction it ended and err, what ended its
// session (nil if none did). A history error stays one: it must stop the
// worker.
func (p *Processor) zombieError(err error) error {
	if _, ok := errors.AsType[historyError](err); ok {
		return err
	}
	z := &ZombieError{Txn: p.lastEnd.Value.Txn, Err: err}
	switch v := p.lastEnd.Value; {
	case p.lastEnd.Type == history.OK:
		z.Committed = true
	case v.Reason == "fenced" || fenced(p.lastEndErr):
		z.Fenced = true
	case p.lastEnd.Type != 0:
		z.Outcome = strings.TrimSpace(p.lastEnd.Type.String() + " " + v.Reason)
	}
	return z
}

// historyError marks a failure to record, which must stop the worker.
type historyError struct{ error }

func (e historyError) Unwrap() error { return e.error }

// Run processes until ctx ends. A session whose transaction ended in an
// error (fenced, the broker gone too long) is closed and a new one opened
// with the same transactional.id, which aborts whatever the old one left
// open; only a failure to write the history is returned.
func (p *Processor) Run(ctx context.Context) error {
	if p.cfg.Effect.Writes() && p.db == nil {
		return fmt.Errorf("processor: effect %s without a database", p.cfg.Effect)
	}
	retry := backoff.Policy{Base: 100 * time.Millisecond, Cap: 2 * time.Second}
	for failures := 0; ctx.Err() == nil; failures++ {
		began := time.Now()
		session := p.session
		switch p.cfg.Variant {
		case OffsetsAfter:
			session = p.sessionOffsetsAfter
		case Idempotent:
			session = p.sessionIdempotent
		case RandomID:
			session = p.sessionRandomID
		case OffsetsBefore:
			session = p.sessionOffsetsBefore
		}
		err := session(ctx)
		if time.Since(began) > time.Minute {
			failures = 0 // it had recovered
		}
		var herr historyError
		var zerr *ZombieError
		if errors.As(err, &herr) || errors.As(err, &zerr) {
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

// clientOpts are the options of the processor's client, consumer and
// transactional producer in one.
func (p *Processor) clientOpts() []kgo.Opt {
	return append(p.groupOpts(),
		kgo.TransactionalID(p.tid),
		kgo.TransactionTimeout(p.cfg.TransactionTimeout),
	)
}

// groupOpts are the options of the processor's client as a group
// consumer and a producer, transactional or not.
func (p *Processor) groupOpts() []kgo.Opt {
	return append(p.kafka.ClientOpts("processor"),
		kgo.ConsumerGroup(p.cfg.Group),
		kgo.ConsumeTopics(p.kafka.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.SessionTimeout(p.cfg.SessionTimeout),
		kgo.HeartbeatInterval(p.cfg.SessionTimeout/4),
		kgo.RebalanceTimeout(p.cfg.TransactionTimeout),
		// Each batch is flushed before its commit: no linger.
		kgo.ProducerLinger(0),
		// A produce answered CONCURRENT_TRANSACTIONS (on three nodes,
		// often the first produce to a partition right after a commit,
		// its markers not yet written there) or NOT_LEADER is retried
		// after a metadata refresh, which the default 5s minimum age
		// held back: the transaction stalled 5s, or 10s and more after a
		// leader moved.
		kgo.MetadataMinAge(250*time.Millisecond),
	)
}

// session runs one GroupTransactSession until ctx ends or a transaction
// fails in a way the session cannot go on from.
func (p *Processor) session(ctx context.Context) error {
	sess, err := kgo.NewGroupTransactSession(p.clientOpts()...)
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
	return p.batches(ctx, sess.PollRecords, func(recs []*kgo.Record) error {
		committed, err := p.transact(ctx, groupSession{sess}, recs)
		if err != nil {
			return err
		}
		if committed {
			p.fp.Hit(failpoint.ProcessorAfterCommitBeforePoll, history.Value{Txn: p.lastTxn, TransactionalID: p.tid})
		}
		return nil
	})
}

// batches polls up to MaxBatch records at a time with poll, logging
// fetch errors, and hands each non-empty batch to handle, until ctx ends
// or the client is closed (nil) or handle fails (its error): the loop
// every variant's session runs. A processor resumed after a zombie pause
// returns a *ZombieError once the batch in hand is done.
func (p *Processor) batches(ctx context.Context, poll func(context.Context, int) kgo.Fetches, handle func([]*kgo.Record) error) error {
	for ctx.Err() == nil {
		fs := poll(ctx, p.cfg.MaxBatch)
		if fs.IsClientClosed() || ctx.Err() != nil {
			return nil
		}
		fs.EachError(func(t string, part int32, err error) {
			p.log.Warn("processor fetch", "topic", t, "partition", part, "err", err)
		})
		if recs := fs.Records(); len(recs) > 0 {
			err := handle(recs)
			if p.fp.Zombie() {
				return p.zombieError(err)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// plainTransactional opens the known-bad variants' client: a plain
// transactional client in the group, auto-commit off (their offsets are
// theirs to commit), its producer id initialised, which fences what an
// earlier incarnation under the same transactional.id left open.
func (p *Processor) plainTransactional(ctx context.Context) (*kgo.Client, error) {
	cl, err := kgo.NewClient(append(p.clientOpts(), kgo.DisableAutoCommit())...)
	if err != nil {
		return nil, fmt.Errorf("processor: %w", err)
	}
	if _, _, err := cl.ProducerID(ctx); err != nil {
		cl.Close()
		return nil, fmt.Errorf("processor: init producer id: %w", err)
	}
	return cl, nil
}

// untilCommitted writes recs' outputs in transactions through tx until
// one commits (each abort on purpose reads nothing again: the batch is
// in hand), for the variants that commit their offsets outside the
// group session.
func (p *Processor) untilCommitted(ctx context.Context, tx transactor, recs []*kgo.Record) error {
	for committed := false; !committed; {
		var err error
		if committed, err = p.transact(ctx, tx, recs); err != nil {
			return err
		}
	}
	return nil
}

// sessionOffsetsAfter is session for the known-bad OffsetsAfter: a plain
// transactional client in the group, auto-commit off; each batch's
// outputs are written in transactions until one commits, and only then
// are its offsets committed, outside any transaction.
func (p *Processor) sessionOffsetsAfter(ctx context.Context) error {
	cl, err := p.plainTransactional(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	return p.batches(ctx, cl.PollRecords, func(recs []*kgo.Record) error {
		if err := p.untilCommitted(ctx, plainClient{cl}, recs); err != nil {
			return err
		}
		p.fp.Hit(failpoint.ProcessorAfterCommitBeforePoll, history.Value{Txn: p.lastTxn, TransactionalID: p.tid})
		if err := cl.CommitRecords(ctx, recs...); err != nil {
			return fmt.Errorf("processor: commit offsets after %s: %w", p.lastTxn, err)
		}
		return nil
	})
}

// sessionIdempotent is session for the known-bad Idempotent: a client
// with no transactional.id (so an idempotent producer) in the group,
// auto-commit off; each batch's outputs are produced and then its input
// offsets committed, two steps nothing joins.
func (p *Processor) sessionIdempotent(ctx context.Context) error {
	cl, err := kgo.NewClient(append(p.groupOpts(), kgo.DisableAutoCommit())...)
	if err != nil {
		return fmt.Errorf("processor: %w", err)
	}
	defer cl.Close()
	return p.batches(ctx, cl.PollRecords, func(recs []*kgo.Record) error {
		if err := p.produceThenCommit(ctx, cl, recs); err != nil {
			return err
		}
		p.fp.Hit(failpoint.ProcessorAfterCommitBeforePoll, history.Value{Txn: p.lastTxn, TransactionalID: p.tid})
		return nil
	})
}

// produceThenCommit is Idempotent's batch over the inputs ins, recorded
// as a txn the way the contract has a transaction recorded: invoke, the
// inputs, the acknowledged outputs, then ok once the input offsets are
// committed. It never ends in fail: a producer without a transaction
// cannot abort, and whatever it wrote is visible at once. A failed
// produce or offset commit ends it info (its outputs, some or all, are
// out; its inputs will be read again) and the session with an error, so
// that a new one resumes from the committed offsets.
func (p *Processor) produceThenCommit(ctx context.Context, cl *kgo.Client, ins []*kgo.Record) error {
	tv := p.nextTxn()
	outs, err := p.recordInputs(tv, ins)
	if err != nil {
		return err
	}
	produceErr, err := p.recordOutputs(tv, cl.ProduceSync(ctx, outs...))
	if err != nil {
		return err
	}
	var effectErr error
	if produceErr == nil {
		if effectErr, err = p.effect(ctx, tv, ins); err != nil {
			return err
		}
	}
	p.fp.Hit(failpoint.ProcessorAfterProduceBeforeCommit, tv)
	err = cmpErr(produceErr, effectErr)
	if err == nil {
		err = cl.CommitRecords(ctx, ins...)
	}
	end := tv
	typ := history.OK
	if err != nil {
		typ, end.Error = history.Info, err.Error()
	}
	p.lastEnd, p.lastEndErr = history.Entry{Type: typ, F: history.Txn, Value: end}, err
	if _, rerr := p.rec.Record(typ, history.Txn, end); rerr != nil {
		return historyError{rerr}
	}
	switch {
	case produceErr != nil:
		return fmt.Errorf("processor: produce %s: %w", tv.Txn, err)
	case effectErr != nil:
		return fmt.Errorf("processor: effect of %s: %w", tv.Txn, err)
	case err != nil:
		return fmt.Errorf("processor: commit offsets of %s: %w", tv.Txn, err)
	}
	return nil
}

// transactor is what transact needs of a transactional client.
type transactor interface {
	begin() error
	produce(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults
	// end commits (or aborts) the transaction and says whether it
	// committed.
	end(ctx context.Context, commit bool) (bool, error)
}

// groupSession commits the polled offsets in each transaction.
type groupSession struct{ s *kgo.GroupTransactSession }

func (g groupSession) begin() error { return g.s.Begin() }
func (g groupSession) produce(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	return g.s.ProduceSync(ctx, rs...)
}
func (g groupSession) end(ctx context.Context, commit bool) (bool, error) {
	return g.s.End(ctx, kgo.TransactionEndTry(commit))
}

// plainClient commits no offsets in its transactions.
type plainClient struct{ cl *kgo.Client }

func (c plainClient) begin() error { return c.cl.BeginTransaction() }
func (c plainClient) produce(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	return c.cl.ProduceSync(ctx, rs...)
}
func (c plainClient) end(ctx context.Context, commit bool) (bool, error) {
	if commit {
		if err := c.cl.Flush(ctx); err != nil {
			return false, err
		}
	} else if err := c.cl.AbortBufferedRecords(ctx); err != nil {
		return false, err
	}
	err := c.cl.EndTransaction(ctx, kgo.TransactionEndTry(commit))
	return commit && err == nil, err
}

// transact runs one transaction over the inputs ins: begin, record the
// inputs, produce their outputs and record each once acknowledged, then
// commit (with the inputs' offsets, in a group session) or, for a share
// of them, abort, and record how it ended; it says whether it committed.
// An error means the session cannot go on.
func (p *Processor) transact(ctx context.Context, sess transactor, ins []*kgo.Record) (bool, error) {
	tv := p.nextTxn()
	if err := sess.begin(); err != nil {
		return false, fmt.Errorf("processor: begin: %w", err)
	}
	outs, err := p.recordInputs(tv, ins)
	if err != nil {
		return false, err
	}
	produceErr, err := p.recordOutputs(tv, sess.produce(ctx, outs...))
	if err != nil {
		return false, err
	}
	var effectErr error
	if produceErr == nil {
		// The database effect, before the transaction ends: Kafka's
		// transaction does not cover it (effect.go).
		if effectErr, err = p.effect(ctx, tv, ins); err != nil {
			return false, err
		}
	}
	id := tv.Txn
	p.fp.Hit(failpoint.ProcessorAfterProduceBeforeCommit, tv)

	// A zombie, resumed here, tries to commit: its late commit is what
	// the zombie fault tests.
	abort := produceErr != nil || effectErr != nil || p.rng.Float64() < p.cfg.AbortRatio && !p.fp.Zombie()
	committed, err := sess.end(ctx, !abort)
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
		case effectErr != nil:
			end.Value.Reason, end.Value.Error = "effect-failed", effectErr.Error()
		case abort:
			end.Value.Reason = history.ReasonAbort
		default:
			end.Value.Reason = "rebalance"
		}
		if err != nil {
			end.Value.Error = errors.Join(produceErr, effectErr, err).Error()
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
	p.lastEnd, p.lastEndErr = end, err
	if _, rerr := p.rec.Record(end.Type, end.F, end.Value); rerr != nil {
		return false, historyError{rerr}
	}
	if err != nil {
		return false, fmt.Errorf("processor: end transaction %s: %w", id, err)
	}
	p.effectBackoff(ctx, effectErr)
	return end.Type == history.OK, nil
}

// nextTxn names the next transaction (or batch) and returns the value
// its ops carry.
func (p *Processor) nextTxn() history.Value {
	p.seq++
	p.lastTxn = p.cfg.Name + ":" + p.incarnation + ":" + strconv.FormatInt(p.seq, 10)
	return history.Value{Txn: p.lastTxn, TransactionalID: p.tid}
}

// recordInputs records the invoke of the transaction tv and one
// txn-input per input, in one write, and returns the outputs to produce:
// one per input and output topic.
func (p *Processor) recordInputs(tv history.Value, ins []*kgo.Record) ([]*kgo.Record, error) {
	es := make([]history.Entry, 0, 1+len(ins))
	es = append(es, history.Entry{Type: history.Invoke, F: history.Txn, Value: tv})
	outs := make([]*kgo.Record, 0, len(ins)*len(p.cfg.Outputs))
	for _, in := range ins {
		v := broker.ParseOutputRecord(in) // the input's own event headers
		es = append(es, history.Entry{Type: history.OK, F: history.TxnInput, Value: history.Value{
			Txn: tv.Txn, Topic: in.Topic, Partition: int64(in.Partition), Offset: in.Offset, Event: v.Event, Source: v.Source,
		}})
		for _, topic := range p.cfg.Outputs {
			outs = append(outs, output(topic, in))
		}
	}
	if err := p.rec.RecordAll(es); err != nil {
		return nil, historyError{err}
	}
	return outs, nil
}

// recordOutputs records a txn-output per output the broker acknowledged,
// and returns the first produce error, if any (err is a failure to
// record).
func (p *Processor) recordOutputs(tv history.Value, results kgo.ProduceResults) (produceErr, err error) {
	es := make([]history.Entry, 0, len(results))
	for _, r := range results {
		if r.Err != nil {
			produceErr = cmpErr(produceErr, r.Err)
			continue
		}
		o := broker.ParseOutputRecord(r.Record)
		es = append(es, history.Entry{Type: history.OK, F: history.TxnOutput, Value: history.Value{
			Txn: tv.Txn, Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, Event: o.Event, Source: o.Source,
			InputPartition: o.InputPartition, InputOffset: o.InputOffset,
		}})
	}
	if err := p.rec.RecordAll(es); err != nil {
		return produceErr, historyError{err}
	}
	return produceErr, nil
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
