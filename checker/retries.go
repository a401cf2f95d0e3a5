package checker

// This file is the consumers' retries (issue 25, "Retries that do not
// storm"). What the checker makes of them, and where:
//
//   - A transient failure is an apply fail (or info) with an error and no
//     reason: the consumer retries it in-process. A retry is the apply
//     invoke a process writes for an event whose last apply by that
//     process failed so (the first failure of a delivery coincides with
//     the fault by nature and is not one). A batch's invokes, written
//     together (one time), are one retry, by one retrier: the process
//     and the batch's first event (retryRec, retryUnits).
//   - The synchronization figure: over every consumer of every
//     subscription, the retries after the first second of retrying (the
//     fault's own burst: every retrier failed at once, and any backoff's
//     first quick retries land there, jitter or not), binned in 100 ms
//     bins: the most distinct retriers in one bin over their mean per bin
//     while retrying (syncFigure). Retriers that keep retrying in step put all of them
//     in one bin per period; full jitter spreads them. With
//     max-retry-sync, a figure over it is a retry-storm; one that could
//     not be measured (fewer than 20 retries or 2 processes) makes the
//     run unknown.
//   - over-retried: a refusal (an apply fail with a reason that is not a
//     duplicate, a stale skip or a spent retry budget) at an attempt past
//     the run's max attempts (the setup op's attempt): the consumer went
//     on refusing instead of dead-lettering (rules.go:judge, from
//     facts.refusedAt).
//   - [Result.Retries] has the figure and per subscription the transient
//     failures, refusals and the highest attempt; [Series.Retries] the
//     transient failures per bucket.

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/deliverycheck/deliverycheck/history"
)

// Retries is what the consumers' retries did in a run.
type Retries struct {
	// Measured says whether Sync was: at least MinSyncRetries retries
	// in Window, from at least two processes.
	Measured bool `json:"measured"`
	// Sync is the synchronization figure (absent when not measured): the
	// most distinct retriers in one BinNS bin of Window over their mean
	// per bin while retrying. Peak is that most, PeakNS when its bin
	// starts, Mean the mean (over Retrying bins).
	Sync   float64 `json:"sync,omitempty"`
	Peak   int64   `json:"peak"`
	PeakNS int64   `json:"peak_ns"`
	Mean   float64 `json:"mean"`
	BinNS  int64   `json:"bin_ns"`
	// BurstNS is how long after the first retry retries are left out of
	// the figure: the fault's own burst.
	BurstNS int64 `json:"burst_ns"`
	// Window runs from the first retry plus BurstNS to the last retry;
	// Counted is the retries in it.
	Window  Window `json:"window"`
	Counted int64  `json:"counted"`
	// Bins has the distinct retriers of each bin of Window, in order
	// (absent when not measured, or over MaxBuckets bins); Retrying
	// counts the bins some retrier was retrying in, from its first
	// retry in Window to its last: what Mean is over.
	Bins     []int64 `json:"bins,omitempty"`
	Retrying int64   `json:"retrying"`
	// Retries counts every retry of the run (a batch's is one),
	// Retriers the distinct retriers, Processes the processes they
	// belong to.
	Retries   int64 `json:"retries"`
	Retriers  int   `json:"retriers"`
	Processes int   `json:"processes"`
	// Subscriptions has each subscription with a transient failure or a
	// refusal, in name order.
	Subscriptions []SubscriptionRetries `json:"subscriptions"`
}

// Window is a stretch of the run, in ns since it started.
type Window struct {
	StartNS int64 `json:"start_ns"`
	EndNS   int64 `json:"end_ns"`
}

// SubscriptionRetries is what one subscription's consumers retried and
// refused.
type SubscriptionRetries struct {
	Subscription string `json:"subscription"`
	// Transient counts its apply fail (and info) ops with an error and no
	// reason (a failed batch has one per event in it): what it retried
	// in-process.
	Transient int64 `json:"transient"`
	// Permanent counts its refusals: apply fails with a reason that is
	// not a duplicate, a stale skip or a spent retry budget (handed back
	// to the broker, or retried by a consumer that retries them).
	Permanent int64 `json:"permanent"`
	// MaxAttemptsSeen is the highest attempt of its refusals and dead
	// letters, and MaxAttempts the run's limit (the setup op's attempt, 0
	// if it gives none).
	MaxAttemptsSeen int64 `json:"max_attempts_seen"`
	MaxAttempts     int64 `json:"max_attempts,omitempty"`
	// OverRetried counts its events refused past MaxAttempts.
	OverRetried int64 `json:"over_retried"`
}

// The synchronization figure's parameters (docs/results.md, Retries).
const (
	retryBinNS   = int64(100e6)
	retryBurstNS = second
	// MinSyncRetries is the fewest retries after the burst the figure
	// is measured on.
	MinSyncRetries = 20
)

// retryAcc is what one shard keeps of the retries of its events.
type retryAcc struct {
	// failed holds each (process, event) whose last apply failed with an
	// error: its next apply invoke is a retry.
	failed map[pendKey]struct{}
	recs   []retryRec
}

// retryRec is one retry invoke.
type retryRec struct {
	t       int64
	pos     int64 // position in the history
	process string
	event   string
}

// subRetries is what one shard keeps of one subscription's retries and
// refusals.
type subRetries struct {
	transient []int64 // the times of its transient failures
	permanent int64
	maxSeen   int64
	// refusedAt is the highest attempt each event was refused at (rare:
	// poison events, a map).
	refusedAt map[int32]int64
}

func (sub *subscription) retries() *subRetries {
	if sub.retry == nil {
		sub.retry = &subRetries{}
	}
	return sub.retry
}

// transientFailure reports whether op, an apply op, failed with an error
// and no reason: a transient failure the consumer retries.
func transientFailure(op *history.Op) bool {
	return (op.Type == history.Fail || op.Type == history.Info) && op.Value.Error != "" && op.Value.Reason == ""
}

// refusal reports whether op, an apply op, is a refusal: a fail with a
// reason that is not a duplicate, a stale skip or a spent retry budget.
func refusal(op *history.Op) bool {
	r := op.Value.Reason
	return op.Type == history.Fail && r != "" && !duplicateReason(r) && !strings.HasPrefix(r, "stale") && !strings.HasPrefix(r, history.ReasonRetryBudget)
}

// retryOp folds an apply or dlq op of subscription sub for the shard's
// event ei into the retries.
func (s *shard) retryOp(op *history.Op, ei int32, sub *subscription) {
	if op.F == history.DLQ {
		if op.Type == history.OK && op.Value.Attempt > 0 {
			rs := sub.retries()
			rs.maxSeen = max(rs.maxSeen, op.Value.Attempt)
		}
		return
	}
	acc := &s.retries
	k := pendKey{op.Process, ei}
	switch {
	case op.Type == history.Invoke:
		if _, ok := acc.failed[k]; ok {
			delete(acc.failed, k)
			acc.recs = append(acc.recs, retryRec{t: op.Time, pos: op.Index, process: op.Process, event: op.Value.Event})
		}
	case transientFailure(op):
		if acc.failed == nil {
			acc.failed = map[pendKey]struct{}{}
		}
		acc.failed[k] = struct{}{}
		rs := sub.retries()
		rs.transient = append(rs.transient, op.Time)
	case refusal(op):
		rs := sub.retries()
		rs.permanent++
		rs.maxSeen = max(rs.maxSeen, op.Value.Attempt)
		if rs.refusedAt == nil {
			rs.refusedAt = map[int32]int64{}
		}
		rs.refusedAt[ei] = max(rs.refusedAt[ei], op.Value.Attempt)
	}
}

// refusedAt returns the highest attempt subscription s refused event i
// at, 0 if it never refused it.
func (v *view) refusedAt(s *gsub, i int) int64 {
	r := v.refs[i]
	if p := s.parts[r.shard]; p != nil && p.retry != nil {
		return p.retry.refusedAt[r.local]
	}
	return 0
}

// overRetriedDetail says how far past its limit an event was refused:
// "refused at attempt 37, never dead-lettered (limit 5)".
func overRetriedDetail(attempt, limit int64, dlq bool) string {
	s := "refused at attempt " + strconv.FormatInt(attempt, 10)
	if !dlq {
		s += ", never dead-lettered"
	}
	return s + " (limit " + strconv.FormatInt(limit, 10) + ")"
}

// retryUnit is one retry as the figure counts it: the invokes one process
// wrote together, by one retrier.
type retryUnit struct {
	t       int64
	retrier string // the process and the first event of its invokes
	process string
}

// retryUnits groups the shards' retry invokes into retries, in time
// order: the invokes of one process at one time are one retry (a batch),
// whose retrier is the process and its first invoke's event.
func retryUnits(shards []*shard) []retryUnit {
	var recs []retryRec
	for _, s := range shards {
		recs = append(recs, s.retries.recs...)
	}
	slices.SortFunc(recs, func(x, y retryRec) int {
		return cmp.Or(cmp.Compare(x.t, y.t), cmp.Compare(x.process, y.process), cmp.Compare(x.pos, y.pos))
	})
	var out []retryUnit
	for i, r := range recs {
		if i > 0 && recs[i-1].t == r.t && recs[i-1].process == r.process {
			continue
		}
		out = append(out, retryUnit{t: r.t, retrier: r.process + "\x00" + r.event, process: r.process})
	}
	return out
}

// syncFigure measures units (in time order) into r: the window after the
// burst, and in it the most distinct retriers in one bin over their mean
// per bin, the mean taken over the bins some retrier was retrying in
// (from its first retry in the window to its last): a transient failure
// long after the outage, a deadlock retried once, adds its own bins and
// not the quiet ones between.
func syncFigure(r *Retries, units []retryUnit) {
	r.BinNS, r.BurstNS = retryBinNS, retryBurstNS
	if len(units) == 0 {
		return
	}
	start := units[0].t + retryBurstNS
	i, _ := slices.BinarySearchFunc(units, start, func(u retryUnit, t int64) int { return cmp.Compare(u.t, t) })
	counted := units[i:]
	r.Counted = int64(len(counted))
	if len(counted) == 0 {
		return
	}
	r.Window = Window{StartNS: start, EndNS: counted[len(counted)-1].t}
	procs := map[string]bool{}
	for _, u := range counted {
		procs[u.process] = true
	}
	if len(counted) < MinSyncRetries || len(procs) < 2 {
		return
	}
	n := int((r.Window.EndNS-start)/retryBinNS) + 1
	bins := make([]map[string]bool, n)
	spans := map[string][2]int{} // per retrier, its first and last bin
	var total int64
	for _, u := range counted {
		b := int((u.t - start) / retryBinNS)
		if bins[b] == nil {
			bins[b] = map[string]bool{}
		}
		if !bins[b][u.retrier] {
			bins[b][u.retrier] = true
			total++
		}
		sp, ok := spans[u.retrier]
		if !ok {
			sp[0] = b
		}
		sp[1] = b
		spans[u.retrier] = sp
	}
	covered := make([]bool, n)
	for _, sp := range spans {
		for b := sp[0]; b <= sp[1]; b++ {
			covered[b] = true
		}
	}
	var nCovered int64
	for b, m := range bins {
		if covered[b] {
			nCovered++
		}
		if int64(len(m)) > r.Peak {
			r.Peak, r.PeakNS = int64(len(m)), start+int64(b)*retryBinNS
		}
	}
	r.Measured = true
	r.Retrying = nCovered
	r.Mean = float64(total) / float64(nCovered)
	if n <= MaxBuckets {
		r.Bins = make([]int64, n)
		for b, m := range bins {
			r.Bins[b] = int64(len(m))
		}
	}
	r.Sync = float64(r.Peak) / r.Mean
}

// retriesSection builds [Result.Retries], [Series.Retries] and the
// retry-storm anomaly, and says in v.opsReasons when max-retry-sync is
// promised and the figure could not be measured. r.Series must be built,
// and r's anomalies grouped (it reads their over-retried counts).
func (a *analyzer) retriesSection(v *view, r *Result) {
	maxAttempts := a.shards[0].maxAttempts
	units := retryUnits(a.shards)
	rt := &Retries{Retries: int64(len(units)), Subscriptions: []SubscriptionRetries{}}
	retriers, procs := map[string]bool{}, map[string]bool{}
	for _, u := range units {
		retriers[u.retrier], procs[u.process] = true, true
	}
	rt.Retriers, rt.Processes = len(retriers), len(procs)
	syncFigure(rt, units)
	v.retryCurves(r)
	for _, s := range v.subs {
		sr := SubscriptionRetries{Subscription: s.name, MaxAttempts: maxAttempts}
		for _, p := range s.parts {
			if p == nil || p.retry == nil {
				continue
			}
			sr.Transient += int64(len(p.retry.transient))
			sr.Permanent += p.retry.permanent
			sr.MaxAttemptsSeen = max(sr.MaxAttemptsSeen, p.retry.maxSeen)
		}
		if i := slices.IndexFunc(r.Anomalies, func(a Anomaly) bool { return a.Kind == OverRetried && a.Subscription == s.name }); i >= 0 {
			sr.OverRetried = int64(r.Anomalies[i].Count)
		}
		if sr.Transient > 0 || sr.Permanent > 0 {
			rt.Subscriptions = append(rt.Subscriptions, sr)
		}
	}
	g := r.Guarantees
	if len(units) > 0 || len(rt.Subscriptions) > 0 {
		r.Retries = rt
	}
	if g.MaxRetrySync <= 0 {
		return
	}
	if !rt.Measured {
		v.opsReasons = append(v.opsReasons, "retry synchronization not measured: "+retryCountWords(rt))
		return
	}
	if rt.Sync > g.MaxRetrySync {
		r.Anomalies = append(r.Anomalies, Anomaly{Kind: RetryStorm, Fatal: g.Fatal(RetryStorm), Count: 1,
			Events:   []string{fmtSeconds(rt.PeakNS) + "–" + fmtSeconds(rt.PeakNS+rt.BinNS)},
			Examples: []Example{{Detail: RetryStormDetail(rt, g.MaxRetrySync), Ops: []history.Op{}}}})
	}
}

// retryCountWords says how many retries the figure had to go on: "7
// retries after the first second of retrying (9 in all, from 1
// process); it needs 20 from 2 processes".
func retryCountWords(rt *Retries) string {
	if rt.Retries == 0 {
		return "no consumer retried a transient failure"
	}
	return fmt.Sprintf("%d %s after the first second of retrying (%d in all, from %d %s); it needs %d from 2 processes",
		rt.Counted, plural(rt.Counted, "retry", "retries"), rt.Retries, rt.Processes, plural(int64(rt.Processes), "process", "processes"), MinSyncRetries)
}

// RetryStormDetail says the synchronization figure against its limit,
// the wording results, the report and junit.xml share: "retries in step:
// 16 of 16 retriers in the 100ms from 3.100s, 1.6 per bin on average:
// 10.0 times the mean, over max-retry-sync 4".
func RetryStormDetail(rt *Retries, limit float64) string {
	s := fmt.Sprintf("retries in step: %d of %d retriers in the %s from %s, %.1f per bin on average: %.1f times the mean",
		rt.Peak, rt.Retriers, fmtDuration(rt.BinNS), fmtSeconds(rt.PeakNS), rt.Mean, rt.Sync)
	if limit > 0 {
		s += ", over max-retry-sync " + strconv.FormatFloat(limit, 'g', -1, 64)
	}
	return s
}

// RetriesSummary says the synchronization figure in one line, "sync 2.3
// (peak 5 retriers per 100ms, mean 2.2; 412 retries by 16 retriers in 4
// processes)", the wording the command line uses; "" without retries.
func RetriesSummary(rt *Retries) string {
	if rt == nil || rt.Retries == 0 {
		return ""
	}
	who := fmt.Sprintf("%d %s by %d %s in %d %s", rt.Retries, plural(rt.Retries, "retry", "retries"), rt.Retriers, plural(int64(rt.Retriers), "retrier", "retriers"),
		rt.Processes, plural(int64(rt.Processes), "process", "processes"))
	if !rt.Measured {
		return "sync not measured (" + who + ")"
	}
	return fmt.Sprintf("sync %.1f (peak %d retriers per %s, mean %.1f; %s)", rt.Sync, rt.Peak, fmtDuration(rt.BinNS), rt.Mean, who)
}

// retryCurves fills r.Series.Retries: per subscription, its transient
// failures per bucket.
func (v *view) retryCurves(r *Result) {
	n := r.Series.Buckets
	width := max(1, int(r.Series.BucketNanos/second))
	r.Series.Retries = []Curve{}
	for _, s := range v.subs {
		var values []int64
		for _, p := range s.parts {
			if p == nil || p.retry == nil {
				continue
			}
			for _, t := range p.retry.transient {
				if values == nil {
					values = make([]int64, n)
				}
				values[min(n-1, secondOf(t)/width)]++
			}
		}
		if values != nil {
			r.Series.Retries = append(r.Series.Retries, Curve{Subscription: s.name, Values: values})
		}
	}
}
