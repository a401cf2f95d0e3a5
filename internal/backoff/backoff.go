// Package backoff is the capped exponential backoff the pipeline's retry
// loops wait with: the relay's, the consumer's and the RabbitMQ adapter's
// redial.
//
// A [Policy] gives the wait before each retry; [Policy.Wait] and [Sleep]
// wait it out unless a context ends first.
package backoff

import (
	"context"
	"math"
	"math/rand/v2"
	"time"
)

// Jitter says how a wait is drawn from its ceiling.
type Jitter uint8

const (
	// FullJitter draws each wait uniformly from [0, ceiling], so clients
	// that failed together do not retry together.
	FullJitter Jitter = iota
	// NoJitter waits the ceiling itself: the same failures give the same
	// waits.
	NoJitter
)

// Policy is a capped exponential backoff. The ceiling of the wait before
// retry n (from 0) is Base·2ⁿ, at most Cap; the wait is drawn from it as
// Jitter says. The zero Policy never waits.
type Policy struct {
	// Base is the ceiling of retry 0's wait.
	Base time.Duration
	// Cap bounds every ceiling; 0 means no bound.
	Cap time.Duration
	// Jitter is FullJitter (the default) or NoJitter.
	Jitter Jitter
	// Rand draws the jitter, overriding the default math/rand/v2 top-level
	// source, for a caller that needs reproducible waits (a *rand.Rand
	// over a seeded PCG). A *rand.Rand is not safe for concurrent use:
	// such a caller must not call Delay from several goroutines at once.
	Rand *rand.Rand
}

// Ceiling is the longest wait before retry n: Base·2ⁿ, at most Cap.
func (p Policy) Ceiling(n int) time.Duration {
	limit := p.Cap
	if limit <= 0 {
		limit = math.MaxInt64
	}
	switch {
	case p.Base <= 0:
		return 0
	case n <= 0:
		return min(p.Base, limit)
	case n >= 63 || p.Base > limit>>n:
		return limit
	}
	return p.Base << n
}

// Delay is the wait before retry n (from 0).
func (p Policy) Delay(n int) time.Duration {
	c := p.Ceiling(n)
	if p.Jitter == NoJitter || c <= 0 {
		return c
	}
	if c == math.MaxInt64 {
		c-- // so that c+1 below does not overflow
	}
	if p.Rand != nil {
		return time.Duration(p.Rand.Int64N(int64(c) + 1))
	}
	return rand.N(c + 1)
}

// Wait waits Delay(n), or until ctx ends; see [Sleep].
func (p Policy) Wait(ctx context.Context, n int) error {
	return Sleep(ctx, p.Delay(n))
}

// Sleep waits d, or until ctx ends. It returns ctx's error if ctx ended
// before or during the wait, nil otherwise; a d of 0 or less does not
// wait.
func Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil || d <= 0 {
		return err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
