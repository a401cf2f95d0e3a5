package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/pipeline/worker"
	"github.com/deliverycheck/deliverycheck/process/supervisor"
)

// Consumer groups (issue 25, docs/pipeline.md): consumers that join a
// subscription's group or leave it while the run goes on (the nemesis's
// join and leave steps), and late subscriptions, whose group starts at
// its first join and must replay every event from the start.

// consumerName names consumer i of subscription sub.
func consumerName(sub string, i int) string { return fmt.Sprintf("consumer-%s-%d", sub, i) }

// checkGroups checks the consumer-group settings: each late
// subscription is one of the run's subscriptions, on Kafka, and the
// offset reset is one Kafka knows.
func (c *Config) checkGroups() error {
	for _, sub := range c.LateSubscriptions {
		if !slices.Contains(c.Subscriptions, sub) {
			return fmt.Errorf("pipeline: late subscription %s is not one of the subscriptions (%s)", sub, strings.Join(c.Subscriptions, ", "))
		}
	}
	if len(c.LateSubscriptions) > 0 && c.Broker != "kafka" {
		return fmt.Errorf("pipeline: late subscriptions are Kafka's, not %s's", c.Broker)
	}
	switch c.OffsetReset {
	case "", broker.OffsetEarliest, broker.OffsetLatest:
	default:
		return fmt.Errorf("pipeline: unknown offset reset %q (valid: %s, %s)", c.OffsetReset, broker.OffsetEarliest, broker.OffsetLatest)
	}
	return nil
}

// late reports whether sub's consumers start at its first join, not with
// the run.
func (c *Config) late(sub string) bool { return slices.Contains(c.LateSubscriptions, sub) }

// consumersAtStart is how many consumers of sub Start starts.
func (c *Config) consumersAtStart(sub string) int {
	if c.late(sub) {
		return 0
	}
	return c.Consumers
}

// startConsumer starts consumer name of sub: the team's command if it
// brings its own consumer of sub, else the built-in one.
func (r *Deployment) startConsumer(ctx context.Context, sub, name string) error {
	if ext, ok := r.cfg.System.Consumers[sub]; ok {
		return r.startExternal(ctx, name, worker.RoleConsumer, sub, ext)
	}
	return r.start(ctx, r.consumerSpec(sub, name))
}

// Join starts one more consumer of subscription sub, consumer-<sub>-<n>
// with n the next free index, for the nemesis's join step: its group
// rebalances, or, for a late subscription's first join, starts (from the
// earliest offset unless broker.offset_reset says otherwise). The
// supervisor keeps it running until the deployment stops; it is not one
// of the deployment's named workers. It returns the consumer's name.
func (r *Deployment) Join(ctx context.Context, sub string) (string, error) {
	if !slices.Contains(r.cfg.Subscriptions, sub) {
		return "", fmt.Errorf("pipeline: join: no subscription %s (have %s)", sub, strings.Join(r.cfg.Subscriptions, ", "))
	}
	have := r.sup.Names()
	n := 0
	for slices.Contains(have, consumerName(sub, n)) {
		n++
	}
	name := consumerName(sub, n)
	// Kept running (restarted after a crash) until the deployment
	// stops, not only while the caller's context lasts.
	ctx = context.WithoutCancel(ctx)
	if ext, ok := r.cfg.System.Consumers[sub]; ok {
		c, err := r.externalCommand(name, worker.RoleConsumer, sub, ext)
		if err != nil {
			return "", err
		}
		c.Seed ^= nameSeed(name)
		if err := r.sup.StartCommand(ctx, name, c); err != nil {
			return "", fmt.Errorf("pipeline: join: %w", err)
		}
	} else {
		spec := r.consumerSpec(sub, name)
		// Its own seed: the deployment's list of workers is not touched
		// while the run goes on.
		spec.Seed ^= nameSeed(name)
		b, err := json.Marshal(spec)
		if err != nil {
			return "", fmt.Errorf("pipeline: join: %w", err)
		}
		if err := r.sup.Start(ctx, name, b); err != nil {
			return "", fmt.Errorf("pipeline: join: %w", err)
		}
	}
	return name, nil
}

// nameSeed is a joined worker's seed, from its name.
func nameSeed(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64()
}

// leaveTimeout bounds a leave: the consumer finishes what it holds,
// commits and leaves its group, or is killed.
const leaveTimeout = 30 * time.Second

// Leave stops consumer worker for good, for the nemesis's leave step:
// "stop" on its stdin (a team's consumer gets SIGTERM), so it finishes
// and leaves its group cleanly, and the supervisor never restarts it. It
// returns the evidence; a consumer that had to be killed did not leave
// cleanly, which is an error.
func (r *Deployment) Leave(ctx context.Context, name string) (string, error) {
	sub, ok := r.consumerSubscription(name)
	if !ok {
		return "", fmt.Errorf("pipeline: leave: %s is not a consumer of this run (consumer-<subscription>-<n>)", name)
	}
	if !slices.Contains(r.sup.Names(), name) {
		return "", fmt.Errorf("pipeline: leave: no worker %s (have %s)", name, strings.Join(r.sup.Names(), ", "))
	}
	if down, err := r.sup.Stopped(name); errors.Is(err, supervisor.ErrNotRunning) {
		return "", fmt.Errorf("pipeline: leave: %s is not running", name)
	} else if err == nil && down {
		return "", fmt.Errorf("pipeline: leave: %s is paused", name)
	}
	ctx, cancel := context.WithTimeout(ctx, leaveTimeout)
	defer cancel()
	if err := r.sup.Stop(ctx, name); err != nil {
		return "", fmt.Errorf("pipeline: leave: %w", err)
	}
	r.schemas.mu.Lock()
	if r.schemas.left == nil {
		r.schemas.left = map[string]bool{}
	}
	r.schemas.left[name] = true
	r.schemas.mu.Unlock()
	return fmt.Sprintf("%s left %s (%s)", name, sub, r.sup.ExitStatus(name)), nil
}

// consumerSubscription is the subscription of consumer worker name,
// consumer-<subscription>-<n>.
func (r *Deployment) consumerSubscription(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, "consumer-")
	if !ok {
		return "", false
	}
	i := strings.LastIndexByte(rest, '-')
	if i < 0 {
		return "", false
	}
	sub := rest[:i]
	return sub, slices.Contains(r.cfg.Subscriptions, sub)
}
