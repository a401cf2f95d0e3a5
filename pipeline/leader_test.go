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
)

// The leader sampler writes an op when sampling starts and when the
// answer changes, one fail per stretch without an answer, nothing while
// nothing changes; and stops when its context ends.
func TestSampleLeaders(t *testing.T) {
	path := filepath.Join(t.TempDir(), "harness.jsonl")
	rec, err := history.NewRecorder(path, "harness", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	// What kafka's look-ups answer, one per sample, then the last
	// forever; postgres always has postgres-0.
	answers := []string{"kafka-0", "kafka-0", "", "", "kafka-2", "kafka-2", "kafka-2"}
	var mu sync.Mutex
	calls := 0
	lookup := func(ctx context.Context, svc string) (string, string, error) {
		if svc == "postgres" {
			return "postgres-0", "primary", nil
		}
		mu.Lock()
		defer mu.Unlock()
		a := answers[min(calls, len(answers)-1)]
		calls++
		if a == "" {
			return "", "", errors.New("no leader now")
		}
		return a, "partition 0 of run.events", nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sampleLeaders(ctx, []string{"kafka", "postgres"}, time.Millisecond, lookup, rec) }()
	testenv.Eventually(t, ctx, 10*time.Second, "the sampler looking up kafka's leader past its last answer", func() error {
		mu.Lock()
		defer mu.Unlock()
		if calls <= 2*len(answers) {
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
		if op.F != history.Leader {
			t.Fatalf("op %v is no leader op", op)
		}
		got = append(got, op.Type.String()+" "+op.Value.Target+" "+op.Value.Detail+op.Value.Error)
	}
	want := []string{"ok kafka-0 partition 0 of run.events", "ok postgres-0 primary", "fail kafka no leader now", "ok kafka-2 partition 0 of run.events"}
	if !slices.Equal(got, want) {
		t.Errorf("leader ops %q\nwant %q", got, want)
	}
}
