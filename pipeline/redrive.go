package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/pipeline/consumer"
	"github.com/deliverycheck/deliverycheck/pipeline/redrive"
	"github.com/deliverycheck/deliverycheck/pipeline/worker"
)

// The operator's side of dead letters (issue 25; docs/contract.md, "Dead
// letters and redrive"): deploy the fix a subscription's consumers need
// (DeployFix), redrive its dead-letter queue at a rate (Redrive), or
// purge it (PurgeDLQ). The nemesis runs each as a timeline step
// (nemesis.Env.Redrive, DeployFix, PurgeDLQ), on RabbitMQ (a
// subscription's dead-letter queue) and Kafka (its dead letters in the
// shared dead-letter topic, past its redrive group: broker/kafka_redrive.go).

// FixedSchemaVersions are the schema versions a subscription's consumers
// accept once its fix is deployed: the workload's new schema too.
var FixedSchemaVersions = []int64{1, 2}

// schemaState is what the deployment knows of each subscription's
// consumers' build: the schema versions they accept, changed by
// DeployFix.
type schemaState struct {
	mu       sync.Mutex
	versions map[string][]int64
	// left are the consumers a leave step stopped for good: a later
	// deploy-fix does not start them again.
	left map[string]bool
}

// dlqLocks serialize the operations on each subscription's dead-letter
// queue, as an operator's tool runs one at a time: a purge waits for a
// running redrive to finish, and a redrive for a purge. Interleaved, a
// redriver still reading would undo the purge (on Kafka its last commit
// moves its group back behind the purge's; on RabbitMQ what it holds
// unacked goes back to the queue).
type dlqLocks struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

// lock waits until no other operation runs on sub's dead-letter queue,
// or ctx ends.
func (l *dlqLocks) lock(ctx context.Context, sub string) (unlock func(), err error) {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]chan struct{}{}
	}
	ch, ok := l.m[sub]
	if !ok {
		ch = make(chan struct{}, 1)
		l.m[sub] = ch
	}
	l.mu.Unlock()
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the operation running on %s's dead-letter queue: %w", sub, ctx.Err())
	}
}

// schemaVersions are the versions sub's consumers accept now.
func (r *Deployment) schemaVersions(sub string) []int64 {
	r.schemas.mu.Lock()
	defer r.schemas.mu.Unlock()
	if v, ok := r.schemas.versions[sub]; ok {
		return slices.Clone(v)
	}
	return slices.Clone(consumer.DefaultSchemaVersions)
}

// checkOperable says whether sub can be operated on: one of the run's
// subscriptions.
func (r *Deployment) checkOperable(sub string) error {
	if !slices.Contains(r.cfg.Subscriptions, sub) {
		return fmt.Errorf("no subscription %q (the run's: %s)", sub, strings.Join(r.cfg.Subscriptions, ", "))
	}
	return nil
}

// consumersOf lists the consumer workers of sub, consumer-<sub>-<n>,
// but those that left.
func (r *Deployment) consumersOf(sub string) []string {
	r.schemas.mu.Lock()
	defer r.schemas.mu.Unlock()
	var out []string
	for _, name := range r.sup.Names() {
		n, ok := strings.CutPrefix(name, "consumer-"+sub+"-")
		if _, err := strconv.Atoi(n); ok && err == nil && !r.schemas.left[name] {
			out = append(out, name)
		}
	}
	return out
}

// DeployFix rolls out the fix to every consumer of sub but those that
// left (a leave step): each is stopped gracefully and started again
// accepting FixedSchemaVersions (a built-in one with
// consumer.Config.SchemaVersions, a team's with EnvSchemaVersions),
// which its later crash restarts keep. Each rollout
// is a restart op (detail deploy-fix). It returns once every one runs
// the new build: "consumer-email-0 redeployed accepting schema versions
// 1,2".
func (r *Deployment) DeployFix(ctx context.Context, sub string) (string, error) {
	if err := r.checkOperable(sub); err != nil {
		return "", err
	}
	r.schemas.mu.Lock()
	if r.schemas.versions == nil {
		r.schemas.versions = map[string][]int64{}
	}
	r.schemas.versions[sub] = slices.Clone(FixedSchemaVersions)
	r.schemas.mu.Unlock()
	versions := consumer.JoinVersions(FixedSchemaVersions)
	names := r.consumersOf(sub)
	if len(names) == 0 {
		return "", fmt.Errorf("%s has no consumer to deploy to", sub)
	}
	var done []string
	for _, name := range names {
		var err error
		if _, team := r.cfg.System.Consumers[sub]; team {
			err = r.sup.Redeploy(ctx, name, nil, map[string]string{EnvSchemaVersions: versions})
		} else {
			var b []byte
			if b, err = json.Marshal(r.consumerSpec(sub, name)); err == nil {
				err = r.sup.Redeploy(ctx, name, b, nil)
			}
		}
		if err != nil {
			return "", fmt.Errorf("deploy-fix %s: %w (redeployed: %s)", name, err, strings.Join(done, ", "))
		}
		if _, err := r.rec.Record(history.OK, history.Restart, history.Value{Target: name, Detail: "deploy-fix"}); err != nil {
			return "", err
		}
		done = append(done, name)
	}
	return fmt.Sprintf("%s redeployed accepting schema versions %s", strings.Join(done, ", "), versions), nil
}

// RedriveWorker names the redriver of sub: the worker a failpoint of
// the redrive's targets (redrive.after-publish-before-ack).
func RedriveWorker(sub string) string { return "redrive-" + sub }

// Redrive runs sub's redriver (package pipeline/redrive, the variant
// Config.RedriveVariant) to completion: its dead letters republished at
// most rate per second, as a worker process a failpoint can kill and
// the supervisor starts again. It is bounded by max(1m, 3 × dead
// letters / rate). It returns the redriver's account, or why it
// redrove nothing: an empty queue, nothing compatible, a canary
// dead-lettered again.
func (r *Deployment) Redrive(ctx context.Context, sub string, rate int64) (string, error) {
	if err := r.checkOperable(sub); err != nil {
		return "", err
	}
	if rate < 1 {
		return "", fmt.Errorf("rate %d per second, want at least 1", rate)
	}
	if v := r.cfg.RedriveVariant; v != "" {
		// A bad variant would only crash-loop the worker.
		if _, err := redrive.ParseVariant(string(v)); err != nil {
			return "", err
		}
	}
	unlock, err := r.dlqLocks.lock(ctx, sub)
	if err != nil {
		return "", err
	}
	defer unlock()
	n, err := r.broker.DeadLetterCount(ctx, sub)
	if err != nil {
		return "", err
	}
	if n == 0 {
		return "", fmt.Errorf("%s's dead-letter queue is empty: nothing to redrive", sub)
	}
	ctx, cancel := context.WithTimeout(ctx, max(time.Minute, time.Duration(3*int64(n)/rate)*time.Second))
	defer cancel()
	name := RedriveWorker(sub)
	spec := r.spec(worker.RoleRedrive, name)
	spec.Redrive = redrive.Config{
		Variant: r.cfg.RedriveVariant, Subscription: sub, Rate: rate,
		SchemaVersions: r.schemaVersions(sub), DeadLetters: n, Since: int64(time.Since(r.base)),
	}
	if _, team := r.cfg.System.Consumers[sub]; team {
		spec.Redrive.EffectsQuery, spec.Redrive.DeadLettersQuery = r.cfg.System.EffectsQuery, r.cfg.System.DeadLettersQuery
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return "", fmt.Errorf("pipeline: %w", err)
	}
	done, err := r.sup.StartOnce(ctx, name, b)
	if err != nil {
		return "", err
	}
	select {
	case err = <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		stopCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer stop()
		return "", errors.Join(fmt.Errorf("redriver did not finish: %w", err), r.sup.Stop(stopCtx, name))
	}
	return redriveOutcome(r.sup.Notes(name))
}

// redriveOutcome reads the redriver's outcome from its last note.
func redriveOutcome(notes []string, _ <-chan struct{}) (string, error) {
	for _, n := range slices.Backward(notes) {
		if ev, ok := strings.CutPrefix(n, redrive.NoteDone); ok {
			return ev, nil
		}
		if why, ok := strings.CutPrefix(n, redrive.NoteFailed); ok {
			return "", errors.New(why)
		}
	}
	return "", errors.New("the redriver ended without saying how its redrive went")
}

// PurgeDLQ empties sub's dead-letter queue: "purged 15 messages from
// email's dead-letter queue". An empty queue purged nothing: an error.
// A redrive of sub still running is waited for (dlqLocks).
func (r *Deployment) PurgeDLQ(ctx context.Context, sub string) (string, error) {
	if err := r.checkOperable(sub); err != nil {
		return "", err
	}
	unlock, err := r.dlqLocks.lock(ctx, sub)
	if err != nil {
		return "", err
	}
	defer unlock()
	n, err := r.broker.PurgeDLQ(ctx, sub)
	if err != nil {
		return "", err
	}
	if n == 0 {
		return "", fmt.Errorf("%s's dead-letter queue was empty: nothing purged", sub)
	}
	return fmt.Sprintf("purged %d messages from %s's dead-letter queue", n, sub), nil
}
