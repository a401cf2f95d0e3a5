package reports

import (
	"fmt"
	"strconv"
	"time"

	"github.com/deliverycheck/deliverycheck/checker"
)

// The run-wide guarantee of the consumers' retries (checker/retries.go):
// its JUnit testcase is named after every consumer together.
const (
	retryGuarantee = "retries not synchronized"
	allConsumers   = "consumers"
)

// retryChecks is the retry-storm guarantee, run-wide: one check for
// every consumer together when max-retry-sync is promised or the figure
// was measured, none otherwise.
func retryChecks(res *checker.Result, established bool) []Check {
	promised := res.Guarantees.Fatal(checker.RetryStorm)
	if !promised && (res.Retries == nil || !res.Retries.Measured) {
		return nil
	}
	c := Check{Subscription: allConsumers, Guarantee: retryGuarantee, Kind: checker.RetryStorm, Promised: promised}
	for _, a := range res.Anomalies {
		if a.Kind == checker.RetryStorm {
			c.Count = a.Count
		}
	}
	// Not measured while promised: unknown, whatever else held.
	c.Status = c.status(established && (res.Retries != nil && res.Retries.Measured))
	return []Check{c}
}

// runWideCheck names the check of a run-wide kind's finding: every
// consumer for a retry storm, "" for the others.
func runWideCheck(k checker.Kind) string {
	if k == checker.RetryStorm {
		return allConsumers
	}
	return ""
}

// retriesView is the report's Retries section: the synchronization figure
// against its limit, and per subscription what its consumers retried and
// refused.
type retriesView struct {
	Figure, Limit, Class string
	Rows                 []retryRow
}

// retryRow is one subscription's retries. Class is bad when it refused an
// event past its limit.
type retryRow struct {
	Subscription, Class                        string
	Transient, Permanent, MaxSeen, Over, Limit int64
}

// newRetriesView lays out res.Retries, nil without it.
func newRetriesView(res *checker.Result) *retriesView {
	rt := res.Retries
	if rt == nil {
		return nil
	}
	v := &retriesView{Figure: retryFigureWords(rt), Limit: "not promised"}
	if g := res.Guarantees.MaxRetrySync; g > 0 {
		v.Limit = strconv.FormatFloat(g, 'g', -1, 64)
		if rt.Measured && rt.Sync > g {
			v.Class = "bad"
		}
	}
	for _, s := range rt.Subscriptions {
		row := retryRow{Subscription: s.Subscription, Transient: s.Transient, Permanent: s.Permanent, MaxSeen: s.MaxAttemptsSeen, Over: s.OverRetried, Limit: s.MaxAttempts}
		if s.OverRetried > 0 {
			row.Class = "bad"
		}
		v.Rows = append(v.Rows, row)
	}
	return v
}

// retryFigureWords says the figure, or why it was not measured.
func retryFigureWords(rt *checker.Retries) string {
	if !rt.Measured {
		return fmt.Sprintf("not measured: %d retries after the first second of retrying (it needs %d, from at least 2 processes)", rt.Counted, checker.MinSyncRetries)
	}
	return fmt.Sprintf("%.1f: at most %d retriers in one %s bin (from %s), %.1f on average while retrying; %d retries by %d retriers in %d processes",
		rt.Sync, rt.Peak, time.Duration(rt.BinNS), fmtNs(rt.PeakNS), rt.Mean, rt.Retries, rt.Retriers, rt.Processes)
}

// retryPlots are the Retries plots: each subscription's transient
// failures per bucket, and the retriers retrying in each bin of the
// figure's window, on the run's time axis with the fault windows shaded;
// none without retries.
func retryPlots(run Record, res *checker.Result) []plotView {
	rt, s := res.Retries, res.Series
	if rt == nil || len(s.Retries) == 0 {
		return nil
	}
	bucketNs := max(s.BucketNanos, 1)
	a := newAxis(int64(max(s.Buckets, 1)) * bucketNs)
	a.bucketNs = bucketNs
	var fails []series
	for _, c := range s.Retries {
		v := make([]float64, len(c.Values))
		for i, x := range c.Values {
			v[i] = float64(x)
		}
		fails = append(fails, series{name: c.Subscription, values: v})
	}
	out := []plotView{layout("retries", "Transient failures retried", "apply failures per "+time.Duration(bucketNs).String(), a, fails, run)}
	if len(rt.Bins) == 0 {
		return out
	}
	b := a
	b.bucketNs = rt.BinNS
	n := int(b.tmax / rt.BinNS)
	vals := make([]float64, n)
	for i, c := range rt.Bins {
		if j := int((rt.Window.StartNS + int64(i)*rt.BinNS) / rt.BinNS); j < n {
			vals[j] = float64(c)
		}
	}
	ss := []series{{name: "retriers per " + time.Duration(rt.BinNS).String(), values: vals}}
	if m := rt.Mean; m > 0 {
		mean := make([]float64, n)
		for i := range mean {
			mean[i] = m
		}
		ss = append(ss, series{name: "mean while retrying", values: mean, dash: "4 3"})
		if g := res.Guarantees.MaxRetrySync; g > 0 {
			limit := make([]float64, n)
			for i := range limit {
				limit[i] = g * m
			}
			ss = append(ss, series{name: "max-retry-sync × mean", values: limit, dash: "2 3"})
		}
	}
	return append(out, layout("retry-sync", "Retriers retrying together (after the first second)", "retriers per "+time.Duration(rt.BinNS).String(), b, ss, run))
}
