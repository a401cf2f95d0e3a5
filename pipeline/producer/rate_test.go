package producer

import (
	"context"
	"math"
	"testing"
	"time"
)

func TestRateAt(t *testing.T) {
	const s = int64(time.Second)
	steps := []RateStep{{AtNS: 2 * s, Rate: 150, ForNS: 2 * s}, {AtNS: 6 * s, Rate: 80}}
	for _, c := range []struct {
		t    int64
		rate float64
		next int64
	}{
		{0, 20, 2 * s},
		{2 * s, 150, 4 * s},
		{3 * s, 150, 4 * s},
		{4 * s, 20, 6 * s},
		{6 * s, 80, math.MaxInt64},
		{60 * s, 80, math.MaxInt64},
	} {
		rate, next := rateAt(steps, 20, c.t)
		if rate != c.rate || next != c.next {
			t.Errorf("at %v: rate %v next %v, want %v %v", time.Duration(c.t), rate, next, c.rate, c.next)
		}
	}
	if rate, next := rateAt(nil, 50, 0); rate != 50 || next != math.MaxInt64 {
		t.Errorf("no steps: %v %v", rate, next)
	}
}

// The pacer follows the steps on the run's clock: a base rate of 5/s,
// whose first tick would come at 200ms, and a step of 200/s from 100ms
// to 250ms, ~30 ops. Counted until a deadline, not slept on; the bounds
// leave room for a loaded machine.
func TestPacerFollowsSteps(t *testing.T) {
	base := time.Now()
	ms := int64(time.Millisecond)
	p := newPacer([]RateStep{{AtNS: 100 * ms, Rate: 200, ForNS: 150 * ms}}, 5, base)
	defer p.stop()
	ctx, cancel := context.WithDeadline(context.Background(), base.Add(300*time.Millisecond))
	defer cancel()
	var inStep, outside int
	for p.wait(ctx) {
		at := time.Since(base)
		if at >= 100*time.Millisecond {
			inStep++
		} else {
			outside++
		}
	}
	if inStep < 5 || outside > 0 {
		t.Errorf("%d ops from the step's start (want ~30), %d before it (want 0)", inStep, outside)
	}
}
