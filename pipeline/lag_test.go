package pipeline

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/internal/testenv"
	"github.com/deliverycheck/deliverycheck/pipeline/worker"
)

// The lag sampler writes an ok per figure at every round, one fail per
// stretch the broker does not answer, dead-letter queues marked; and
// stops when its context ends.
func TestSampleLags(t *testing.T) {
	path := filepath.Join(t.TempDir(), "harness.jsonl")
	rec, err := history.NewRecorder(path, "harness", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	// email's look-ups: a figure, two failures, then figures; inventory
	// answers two partitions every time.
	answers := []int64{7, -1, -1, 3}
	var mu sync.Mutex
	calls := 0
	lookup := func(ctx context.Context, sub string) ([]worker.LagSample, error) {
		if sub == "inventory" {
			return []worker.LagSample{
				{Subscription: sub, Target: "run.inventory", Topic: "run.events", Partition: 0, Lag: 1},
				{Subscription: sub, Target: "run.inventory", Topic: "run.events", Partition: 1, Lag: 2},
			}, nil
		}
		mu.Lock()
		defer mu.Unlock()
		a := answers[min(calls, len(answers)-1)]
		calls++
		if a < 0 {
			return nil, errors.New("broker down")
		}
		return []worker.LagSample{{Subscription: sub, Target: "run.email", Lag: a}, {Subscription: sub, Target: "run.email.dlq", Lag: 1, DLQ: true}}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sampleLags(ctx, []string{"email", "inventory"}, time.Millisecond, lookup, rec) }()
	testenv.Eventually(t, ctx, 10*time.Second, "the sampler looking up email's lag past its answers", func() error {
		mu.Lock()
		defer mu.Unlock()
		if calls < len(answers) {
			return fmt.Errorf("%d look-ups", calls)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	h, _, err := history.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, op := range h {
		if op.F != history.Lag {
			t.Fatalf("op %v is no lag op", op)
		}
		if op.Value.Consumer != "email" {
			continue
		}
		got = append(got, fmt.Sprintf("%s %s %d %s%s", op.Type, op.Value.Target, op.Value.Lag, op.Value.Detail, op.Value.Error))
	}
	want := []string{"ok run.email 7 ", "ok run.email.dlq 1 dlq", "fail  0 broker down", "ok run.email 3 ", "ok run.email.dlq 1 dlq"}
	if len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
		t.Errorf("email's lag ops %q\nwant them to start %q", got, want)
	}
	var parts []int64
	for _, op := range h {
		if op.Value.Consumer == "inventory" && len(parts) < 2 {
			if op.Value.Topic != "run.events" {
				t.Errorf("inventory's op %v: no topic", op)
			}
			parts = append(parts, op.Value.Partition)
		}
	}
	if !slices.Equal(parts, []int64{0, 1}) {
		t.Errorf("inventory's first round: partitions %v", parts)
	}
}
