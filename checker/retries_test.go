package checker

import (
	"fmt"
	"slices"
	"strconv"
	"testing"

	"pgregory.net/rapid"

	"github.com/deliverycheck/deliverycheck/history"
)

func init() {
	// OverRetried: dead-lettered poison events of one subscription also
	// refused at an attempt past the run's limit.
	plants[OverRetried] = func(t *rapid.T, g *genHistory) (history.History, []string, bool) {
		s, es, ok := pickApplied(t, g, g.dlq)
		if !ok {
			return nil, nil, false
		}
		h := slices.Clone(g.h)
		h[0].Value.Attempt = 3 // the setup op
		var ops []history.Op
		for _, e := range es {
			ops = append(ops, history.Op{Process: "consumer-" + s + "-0", Type: history.Fail, F: history.Apply,
				Value: history.Value{Event: e.id, Consumer: s, Attempt: 4, Reason: "payload does not match the schema"}})
		}
		return withOps(h, ops...), ids(s, es), true
	}
}

// retriers writes n retriers' retry invokes: each failed at time 0 and
// retries at the times next(retrier, k) gives for its k-th retry, until
// end; returned as units, in time order.
func retriers(n int, end int64, next func(r, k int) int64) []retryUnit {
	var out []retryUnit
	for r := range n {
		t := int64(0)
		for k := 0; ; k++ {
			t += next(r, k)
			if t > end {
				break
			}
			p := "consumer-s-" + strconv.Itoa(r/4)
			out = append(out, retryUnit{t: t, retrier: p + "\x00e" + strconv.Itoa(r), process: p})
		}
	}
	slices.SortFunc(out, func(x, y retryUnit) int { return int(x.t - y.t) })
	return out
}

// Sixteen retriers retrying every second in step give a figure near the
// bins in a period (10); full jitter on a doubling ceiling from 10 ms to
// 1 s stays under 5, the limit the retry-storm built-ins promise (it
// reaches 4.4 now and then: 4 was too tight a bound).
func TestSyncFigure(t *testing.T) {
	fixed := retriers(16, 5*second, func(r, k int) int64 { return second + int64(r)*1e6 })
	var rt Retries
	syncFigure(&rt, fixed)
	if !rt.Measured || rt.Sync < 6 || rt.Peak != 16 {
		t.Errorf("fixed 1s retries: %+v, want a figure over 6 with all 16 retriers in one bin", rt)
	}
	rapid.Check(t, func(t *rapid.T) {
		jitter := retriers(16, 5*second, func(r, k int) int64 {
			ceiling := min(int64(10e6)<<min(k, 20), second)
			return rapid.Int64Range(0, ceiling).Draw(t, fmt.Sprintf("wait-%d-%d", r, k))
		})
		var rt Retries
		syncFigure(&rt, jitter)
		if !rt.Measured || rt.Sync > 5 {
			t.Fatalf("full jitter: %+v, want a figure of at most 5", rt)
		}
	})
}

// Fewer than minSyncRetries retries after the burst, or retries of one
// process, are not measured.
func TestSyncFigureNotMeasured(t *testing.T) {
	for _, tc := range []struct {
		name  string
		units []retryUnit
	}{
		{"few", retriers(2, 5*second, func(r, k int) int64 { return second })},
		{"one process", retriers(4, 10*second, func(r, k int) int64 { return 100e6 })},
	} {
		var rt Retries
		syncFigure(&rt, tc.units)
		if rt.Measured || rt.Sync != 0 {
			t.Errorf("%s: %+v, want not measured", tc.name, rt)
		}
	}
}

// A batch's retry invokes, written together, are one retry by one
// retrier: the process and the batch's first event.
func TestRetryUnits(t *testing.T) {
	s := &shard{}
	s.retries.recs = []retryRec{
		{t: 5, pos: 11, process: "c-0", event: "b"}, {t: 5, pos: 10, process: "c-0", event: "a"},
		{t: 5, pos: 12, process: "c-1", event: "x"}, {t: 9, pos: 20, process: "c-0", event: "a"},
	}
	got := retryUnits([]*shard{s})
	want := []retryUnit{{5, "c-0\x00a", "c-0"}, {5, "c-1\x00x", "c-1"}, {9, "c-0\x00a", "c-0"}}
	if !slices.Equal(got, want) {
		t.Errorf("retryUnits = %+v, want %+v", got, want)
	}
}
