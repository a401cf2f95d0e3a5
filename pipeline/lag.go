package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/pipeline/worker"
)

// StartLagSampler samples every subscription's consumer lag every
// interval, as a group-lag metric would (docs/history.md "Lag"): its
// group's lag on each partition of the events topic (Kafka), or the
// ready messages of its queue and of its dead-letter queue (RabbitMQ),
// each recorded as a lag op; a subscription whose figures the broker
// does not give gets one fail op per stretch without them. Each look-up
// gets the interval twice over, so a frozen broker delays the next
// sample rather than piling them up. It samples until Drain returns, so
// the drain's catching up is in the history and nothing after it; until
// ctx ends, or Close, on a path that does not drain. A second call does
// nothing.
func (r *Deployment) StartLagSampler(ctx context.Context, every time.Duration) {
	if r.stopLag != nil {
		return
	}
	reader, err := worker.NewBacklogReader(r.broker)
	if err != nil {
		r.log.Warn("record lag: not sampled", "err", err)
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer reader.Close()
		if err := sampleLags(ctx, r.broker.Subscriptions, every, reader.Lags, r.rec); err != nil {
			r.log.Warn("record lag: sampling stopped", "err", err)
		}
	}()
	r.stopLag = func() {
		cancel()
		<-done
	}
}

// stopLagSampler stops the lag sampler, if it runs, and waits until it
// has recorded its last op.
func (r *Deployment) stopLagSampler() {
	if r.stopLag != nil {
		r.stopLag()
		r.stopLag = func() {}
	}
}

// sampleLags is the sampler with the look-up given: it returns nil when
// ctx ends (a look-up that ctx cut short is not recorded), or the error
// recording an op.
func sampleLags(ctx context.Context, subs []string, every time.Duration,
	lookup func(ctx context.Context, sub string) ([]worker.LagSample, error), rec *history.Recorder) error {
	if len(subs) == 0 {
		return nil
	}
	failing := map[string]bool{} // subscriptions whose last look-up failed
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		for _, sub := range subs {
			lctx, cancel := context.WithTimeout(ctx, 2*every)
			samples, err := lookup(lctx, sub)
			cancel()
			if ctx.Err() != nil {
				return nil
			}
			if err := recordLags(rec, sub, samples, err, failing); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// recordLags records one look-up of sub: an ok per sample, or a fail
// when the look-up failed and the one before did not.
func recordLags(rec *history.Recorder, sub string, samples []worker.LagSample, lerr error, failing map[string]bool) error {
	if lerr != nil {
		if failing[sub] {
			return nil
		}
		failing[sub] = true
		if _, err := rec.Record(history.Fail, history.Lag, history.Value{Consumer: sub, Error: lerr.Error()}); err != nil {
			return fmt.Errorf("record the lag of %s: %w", sub, err)
		}
		return nil
	}
	failing[sub] = false
	for _, s := range samples {
		v := history.Value{Consumer: sub, Target: s.Target, Topic: s.Topic, Partition: int64(s.Partition), Lag: s.Lag}
		if s.DLQ {
			v.Detail = history.DetailDLQ
		}
		if _, err := rec.Record(history.OK, history.Lag, v); err != nil {
			return fmt.Errorf("record the lag of %s: %w", sub, err)
		}
	}
	return nil
}
