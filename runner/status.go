package runner

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/deliverycheck/deliverycheck/nemesis"
	"github.com/deliverycheck/deliverycheck/pipeline"
)

// startStatus shows a live line until ctx ends or the returned stop is
// called: committed events per second, events in flight (committed, not
// yet applied by every subscription), dead letters and active faults. On
// a TTY the line is rewritten in place; otherwise a plain line is logged
// every 5 seconds, which is what CI logs want.
func startStatus(ctx context.Context, opts Options, r *pipeline.Deployment, env *nemesis.Env) (stop func()) {
	if opts.Status == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		every := 5 * time.Second
		if opts.TTY {
			every = time.Second
		}
		t := time.NewTicker(every)
		defer t.Stop()
		start := time.Now()
		var last pipeline.Counts
		subs := int64(max(1, len(r.Subscriptions())))
		for {
			select {
			case <-ctx.Done():
				if opts.TTY {
					fmt.Fprintln(opts.Status)
				}
				return
			case <-t.C:
			}
			qctx, qcancel := context.WithTimeout(ctx, time.Second)
			c, err := r.Counts(qctx)
			qcancel()
			if err != nil {
				continue
			}
			rate := float64(c.Committed-last.Committed) / every.Seconds()
			last = c
			inFlight := c.Committed*subs - c.Effects - c.DeadLetters
			faults := strings.Join(activeFaults(env), ",")
			if faults == "" {
				faults = "none"
			}
			line := fmt.Sprintf("%5.0fs  %6.0f commits/s  %6d committed  %6d in flight  %4d dead-lettered  faults: %s",
				time.Since(start).Seconds(), rate, c.Committed, max(inFlight, 0), c.DeadLetters, faults)
			if opts.TTY {
				fmt.Fprintf(opts.Status, "\r\033[K%s", line)
			} else {
				fmt.Fprintln(opts.Status, line)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// activeFaults lists the faults in force, as the nemesis tracks them.
func activeFaults(env *nemesis.Env) []string {
	var out []string
	for _, a := range env.Active() {
		out = append(out, a.String())
	}
	return out
}
