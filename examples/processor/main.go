// Command processor is an example of a team's own consume-transform-
// produce processor tested by deliverycheck: the "billing" stage of a
// shop, which turns every confirmed order into one invoice and one
// revenue record, exactly once, with Kafka transactions.
//
// It is written the way a team would write it, not as part of the
// harness: it imports nothing of deliverycheck's, reads its
// configuration from the environment deliverycheck gives a processor
// (docs/contract.md, "Processor"), and marks its crash windows with one
// HTTP call to DELIVERYCHECK_ENDPOINT (deliverycheck.go), a no-op
// outside a run. It records no lineage: the harness judges it from the
// output topics alone.
//
// For each polled batch it begins a transaction, writes one record per
// input to each output topic (the input's key, value and headers, plus
// input-partition and input-offset), and commits the batch's input
// offsets in the same transaction (franz-go's GroupTransactSession),
// aborting DELIVERYCHECK_ABORT_RATIO of them on purpose. Built with
// -tags buggy it commits the offsets after the transaction instead, a
// separate step (offsets_buggy.go): a crash between the two writes the
// batch's outputs again, which scenario-buggy.yaml's run must catch.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, log); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("processor failed", "err", err)
		os.Exit(1)
	}
}

// config is what the processor needs, from the environment.
type config struct {
	brokers         []string
	input, group    string
	outputs         []string
	transactionalID string
	abortRatio      float64
	seed            uint64
}

func configFromEnv() (config, error) {
	c := config{
		brokers:         strings.Split(os.Getenv("DELIVERYCHECK_KAFKA_BROKERS"), ","),
		input:           os.Getenv("DELIVERYCHECK_KAFKA_TOPIC"),
		group:           os.Getenv("DELIVERYCHECK_KAFKA_GROUP"),
		outputs:         strings.Split(os.Getenv("DELIVERYCHECK_KAFKA_OUTPUT_TOPICS"), ","),
		transactionalID: os.Getenv("DELIVERYCHECK_TRANSACTIONAL_ID"),
	}
	if c.brokers[0] == "" || c.input == "" || c.group == "" || c.outputs[0] == "" || c.transactionalID == "" {
		return c, errors.New("set DELIVERYCHECK_KAFKA_BROKERS, _KAFKA_TOPIC, _KAFKA_GROUP, _KAFKA_OUTPUT_TOPICS and DELIVERYCHECK_TRANSACTIONAL_ID")
	}
	var err error
	if s := os.Getenv("DELIVERYCHECK_ABORT_RATIO"); s != "" {
		if c.abortRatio, err = strconv.ParseFloat(s, 64); err != nil {
			return c, fmt.Errorf("DELIVERYCHECK_ABORT_RATIO: %w", err)
		}
	}
	if s := os.Getenv("DELIVERYCHECK_SEED"); s != "" {
		if c.seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			return c, fmt.Errorf("DELIVERYCHECK_SEED: %w", err)
		}
	}
	return c, nil
}

func run(ctx context.Context, log *slog.Logger) error {
	cfg, err := configFromEnv()
	if err != nil {
		return err
	}
	p := &processor{cfg: cfg, log: log, fp: newEndpoint(), rng: rand.New(rand.NewPCG(cfg.seed, uint64(time.Now().UnixNano())))}
	log.Info("processing", "input", cfg.input, "outputs", cfg.outputs, "group", cfg.group, "transactional.id", cfg.transactionalID)
	return p.run(ctx)
}

// processor is one process of the stage.
type processor struct {
	cfg config
	log *slog.Logger
	fp  *endpoint
	rng *rand.Rand
}

// clientOpts are the options of the processor's one client: a member of
// the group reading read_committed, and a transactional producer whose
// transactional.id outlives restarts, so a restarted processor fences
// the one it replaces and aborts whatever that left open.
func (p *processor) clientOpts() []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(p.cfg.brokers...),
		kgo.ConsumerGroup(p.cfg.group),
		kgo.ConsumeTopics(p.cfg.input),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.TransactionalID(p.cfg.transactionalID),
		kgo.TransactionTimeout(10 * time.Second),
		// A killed member keeps its partitions until its session times
		// out: short here so a crash stalls the stage briefly (the
		// broker's group.min.session.timeout.ms must allow it).
		kgo.SessionTimeout(2 * time.Second),
		kgo.HeartbeatInterval(500 * time.Millisecond),
		kgo.RebalanceTimeout(10 * time.Second),
		kgo.ProducerLinger(0),
	}
}

// abort says whether to abort this transaction on purpose: the harness
// asks for a share of aborts so that aborted records exist for readers
// to skip.
func (p *processor) abort() bool { return p.rng.Float64() < p.cfg.abortRatio }

// outputs are the records of one input: one per output topic, with the
// input's key, value and headers (event-id among them) and its position.
func (p *processor) outputs(in *kgo.Record) []*kgo.Record {
	out := make([]*kgo.Record, 0, len(p.cfg.outputs))
	for _, topic := range p.cfg.outputs {
		hs := append(make([]kgo.RecordHeader, 0, len(in.Headers)+2), in.Headers...)
		hs = append(hs,
			kgo.RecordHeader{Key: "input-partition", Value: []byte(strconv.FormatInt(int64(in.Partition), 10))},
			kgo.RecordHeader{Key: "input-offset", Value: []byte(strconv.FormatInt(in.Offset, 10))},
		)
		out = append(out, &kgo.Record{Topic: topic, Key: in.Key, Value: in.Value, Headers: hs})
	}
	return out
}

// produce writes the outputs of ins and waits for the broker's acks.
func produce(ctx context.Context, send func(context.Context, ...*kgo.Record) kgo.ProduceResults, p *processor, ins []*kgo.Record) error {
	var outs []*kgo.Record
	for _, in := range ins {
		outs = append(outs, p.outputs(in)...)
	}
	return send(ctx, outs...).FirstErr()
}

// eventOf is the event id of a record, for the failpoint calls.
func eventOf(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == "event-id" {
			return string(h.Value)
		}
	}
	return ""
}
