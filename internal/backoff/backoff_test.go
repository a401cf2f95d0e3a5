package backoff_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/internal/backoff"
)

// The relay's backoff: no jitter, doubling from 10ms to 1s.
func TestNoJitterDoublesToCap(t *testing.T) {
	p := backoff.Policy{Base: 10 * time.Millisecond, Cap: time.Second, Jitter: backoff.NoJitter}
	want := []time.Duration{10, 20, 40, 80, 160, 320, 640, 1000, 1000}
	for n, w := range want {
		if got := p.Delay(n); got != w*time.Millisecond {
			t.Errorf("Delay(%d) = %v, want %v", n, got, w*time.Millisecond)
		}
	}
	if got := p.Delay(1 << 20); got != time.Second {
		t.Errorf("Delay(2^20) = %v, want the cap", got)
	}
}

func TestCeilingEdges(t *testing.T) {
	for _, c := range []struct {
		p    backoff.Policy
		n    int
		want time.Duration
	}{
		{backoff.Policy{}, 5, 0},
		{backoff.Policy{Base: time.Second, Cap: time.Millisecond}, 0, time.Millisecond},
		{backoff.Policy{Base: time.Second}, 62, math.MaxInt64},
		{backoff.Policy{Base: time.Nanosecond}, 62, 1 << 62},
		{backoff.Policy{Base: time.Nanosecond}, 63, math.MaxInt64},
		{backoff.Policy{Base: time.Millisecond, Cap: time.Second}, -1, time.Millisecond},
	} {
		if got := c.p.Ceiling(c.n); got != c.want {
			t.Errorf("%+v.Ceiling(%d) = %v, want %v", c.p, c.n, got, c.want)
		}
	}
}

// Full jitter stays within [0, ceiling] and covers it.
func TestFullJitterWithinCeiling(t *testing.T) {
	p := backoff.Policy{Base: 50 * time.Millisecond, Cap: 2 * time.Second}
	for n := range 8 {
		ceil := p.Ceiling(n)
		var lo, hi time.Duration = ceil, 0
		for range 2000 {
			d := p.Delay(n)
			if d < 0 || d > ceil {
				t.Fatalf("Delay(%d) = %v, outside [0, %v]", n, d, ceil)
			}
			lo, hi = min(lo, d), max(hi, d)
		}
		if lo > ceil/10 || hi < ceil*9/10 {
			t.Errorf("Delay(%d) drew only from [%v, %v] of [0, %v]", n, lo, hi, ceil)
		}
	}
	if d := (backoff.Policy{Base: math.MaxInt64}).Delay(0); d < 0 {
		t.Errorf("Delay at the largest ceiling = %v", d)
	}
}

// A seeded source gives the same waits again.
func TestSeededRandRepeats(t *testing.T) {
	draw := func() []time.Duration {
		p := backoff.Policy{Base: time.Millisecond, Cap: time.Second, Rand: rand.New(rand.NewPCG(1, 2))}
		var ds []time.Duration
		for n := range 10 {
			ds = append(ds, p.Delay(n))
		}
		return ds
	}
	a, b := draw(), draw()
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("seeded draws differ: %v and %v", a, b)
		}
	}
}

func TestSleep(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	if err := backoff.Sleep(ctx, 0); err != nil {
		t.Errorf("Sleep(0) = %v", err)
	}
	if err := backoff.Sleep(ctx, time.Millisecond); err != nil {
		t.Errorf("Sleep(1ms) = %v", err)
	}
	go func() { time.Sleep(10 * time.Millisecond); cancel() }()
	start := time.Now()
	if err := backoff.Sleep(ctx, time.Minute); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep cut short by ctx = %v, want context.Canceled", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Sleep cut short by ctx took %v", took)
	}
	if err := backoff.Sleep(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep(0) after ctx ended = %v, want context.Canceled", err)
	}
	p := backoff.Policy{Base: time.Hour}
	if err := p.Wait(ctx, 3); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait after ctx ended = %v, want context.Canceled", err)
	}
}
