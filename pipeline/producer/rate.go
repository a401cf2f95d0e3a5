package producer

import (
	"context"
	"math"
	"time"
)

// rateAt is the rate at t ns since the run's base under steps (sorted,
// not overlapping; Config.RateSteps), base outside them, and when it
// next changes (math.MaxInt64: never).
func rateAt(steps []RateStep, base float64, t int64) (rate float64, next int64) {
	rate, next = base, math.MaxInt64
	for _, s := range steps {
		switch {
		case t < s.AtNS:
			return rate, min(next, s.AtNS)
		case s.ForNS <= 0:
			rate, next = s.Rate, math.MaxInt64 // until the next step
		case t < s.AtNS+s.ForNS:
			rate, next = s.Rate, s.AtNS+s.ForNS
		default:
			rate, next = base, math.MaxInt64
		}
	}
	return rate, next
}

// pacer paces a producer's ops on the run's clock: a ticker at the rate
// of the moment, re-armed when a rate step starts or ends, so a producer
// restarted mid-step resumes at the step's rate.
type pacer struct {
	steps []RateStep
	base  float64   // Config.Rate
	t0    time.Time // the run's base
	rate  float64
	tick  *time.Ticker
	// change fires when the rate next changes; nil if it never does.
	change *time.Timer
}

// newPacer paces at rate outside steps, timed from t0, the run's base.
func newPacer(steps []RateStep, rate float64, t0 time.Time) *pacer {
	p := &pacer{steps: steps, base: rate, t0: t0, rate: -1}
	p.arm()
	return p
}

// arm sets the ticker to the rate of now and the change timer to when it
// next changes.
func (p *pacer) arm() {
	now := time.Since(p.t0).Nanoseconds()
	rate, next := rateAt(p.steps, p.base, now)
	if rate != p.rate {
		if p.tick != nil {
			p.tick.Stop()
			p.tick = nil
		}
		if rate > 0 {
			p.tick = time.NewTicker(time.Duration(float64(time.Second) / rate))
		}
		p.rate = rate
	}
	if p.change != nil {
		p.change.Stop()
		p.change = nil
	}
	if next != math.MaxInt64 {
		p.change = time.NewTimer(time.Duration(next - now))
	}
}

// wait waits for the next op's turn; false when ctx ended. At rate 0 it
// does not wait (as fast as possible).
func (p *pacer) wait(ctx context.Context) bool {
	for {
		var change <-chan time.Time
		if p.change != nil {
			change = p.change.C
		}
		if p.tick == nil {
			select {
			case <-ctx.Done():
				return false
			case <-change:
				p.arm()
				continue
			default:
				return true
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-change:
			p.arm()
		case <-p.tick.C:
			return true
		}
	}
}

func (p *pacer) stop() {
	if p.tick != nil {
		p.tick.Stop()
	}
	if p.change != nil {
		p.change.Stop()
	}
}
