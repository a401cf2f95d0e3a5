package checker

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"

	"github.com/deliverycheck/deliverycheck/history"
)

// Options configure a check.
type Options struct {
	Guarantees Guarantees
	// MaxEvents caps Anomaly.Events, overriding the default 100.
	MaxEvents int
	// MaxExamples caps Anomaly.Examples, overriding the default 5.
	MaxExamples int
	// MaxOps caps Example.Ops, overriding the default 20.
	MaxOps int
	// Shards is how many workers share the events, overriding the
	// default GOMAXPROCS. The result is the same for any number.
	Shards int
	// LagAlert, when set, is the alert on consumer lag a scenario
	// declares: the check says when it would have fired (lag.go). It
	// never changes the verdict.
	LagAlert *LagAlert
}

func (o Options) withDefaults() Options {
	if o.MaxEvents <= 0 {
		o.MaxEvents = 100
	}
	if o.MaxExamples <= 0 {
		o.MaxExamples = 5
	}
	if o.MaxOps <= 0 {
		o.MaxOps = 20
	}
	if o.Shards <= 0 {
		o.Shards = runtime.GOMAXPROCS(0)
	}
	o.Guarantees = o.Guarantees.Normalize()
	return o
}

// Check checks an in-memory history, ordered as [history.Merge] orders it.
func Check(h history.History, opts Options) *Result {
	a := newAnalyzer(opts, 0)
	a.observe(h)
	return a.finish(func(_ func(), fn func([]history.Op) error) error { return fn(h) })
}

// CheckFiles reads, merges and checks history files, streaming them with
// [history.ScanFiles] so memory grows with the number of events, not ops.
// Files not ordered by time are read whole and sorted instead
// ([history.ScanFilesOrSort]). The error is non-nil only when the input is
// not a readable history.
func CheckFiles(paths []string, opts Options) (*Result, error) {
	// Size the event tables from the input: a typical event takes a dozen
	// ops of ~150 bytes. A wrong guess only costs a resize or some memory.
	var size int64
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil {
			size += st.Size()
		}
	}
	hint := int(min(size/2000, 1<<24))
	a := newAnalyzer(opts, hint)
	cuts, err := history.ScanFilesOrSort(paths, func() {
		a.stop()
		a = newAnalyzer(opts, hint)
	}, func(b []history.Op) error {
		a.observe(b)
		return nil
	})
	if err != nil {
		a.stop()
		return nil, err
	}
	a.cuts = cuts
	return a.finish(func(restart func(), fn func([]history.Op) error) error {
		_, err := history.ScanFilesOrSort(paths, restart, fn)
		return err
	}), nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// finish merges the shards, judges what every subscription did with every
// event (rules.go) and decides the verdict. replay reads the history
// again, for the ops of the examples, as [history.ScanFilesOrSort] does.
func (a *analyzer) finish(replay func(restart func(), fn func([]history.Op) error) error) *Result {
	v := a.merge()
	s0 := a.shards[0]
	drain, final := s0.drain, s0.fr.state
	f := facts{drained: drain == "complete", final: final == "complete", brokerRead: s0.fr.broker == "complete", dlqRead: s0.fr.dlqRead == "complete",
		maxAttempts: s0.maxAttempts}
	for _, s := range a.shards {
		f.publishes = f.publishes || s.publishes
	}
	var end int64
	for _, s := range a.shards {
		end = max(end, s.lastTime)
	}
	faults := nonNil(s0.faults)
	var took int64
	for i := range faults {
		if faults[i].Outcome == FaultCut {
			faults[i].EndNS = end
		}
		if faults[i].TookEffect {
			took++
		}
	}
	f.failoverEnd = failoverEnd(faults)
	v.redriveTook = redriveTook(faults)
	c := Counts{Ops: a.ops, Events: int64(len(v.events)), Faults: took, Crashes: s0.crashes, Restarts: s0.restarts}
	for i := range v.events {
		f.outboxRead = f.outboxRead || v.events[i].flags&cInOutbox != 0
		if k := count(&c, &v.events[i]); k != "" {
			v.findings = append(v.findings, finding{kind: k, sub: -1, event: int32(i)})
		}
	}
	stats := make([]SubscriptionStats, 0, len(v.subs))
	var unseen int64
	for si, s := range v.subs {
		st := SubscriptionStats{Name: s.name, Declared: s.declared}
		var ei int32
		add := func(k Kind, b Boundary, st stage, detail string) {
			v.findings = append(v.findings, finding{kind: k, sub: int32(si), event: ei, boundary: b, stage: st, detail: detail})
		}
		for i := range v.events {
			e, se := &v.events[i], v.se(s, i)
			ei = int32(i)
			judge(&st, e, &se, v.facts(f, s, si, i, e, &se), add)
		}
		unseen += st.Unseen
		stats = append(stats, st)
	}
	r := &Result{
		Guarantees:    a.opts.Guarantees,
		Facts:         Facts{Drain: drain, FinalRead: final, BrokerRead: s0.fr.broker, Cuts: nonNil(a.cuts)},
		Counts:        c,
		Subscriptions: stats,
		Reasons:       []string{},
		Faults:        faults,
	}
	r.Intruder = v.intruderSection(faults, f.final)
	v.group(r, a.opts)
	v.examples(r, a.opts, replay)
	a.judgeTxnStage(v, r, replay)
	drainEnd := s0.drainEnd
	if drainEnd == 0 {
		drainEnd = end
	}
	var over []stallFinding
	pend := v.pendingSets(drainEnd)
	r.Stalls, over = v.stalls(pend, faults, drainEnd, a.opts.Guarantees.MaxStall)
	v.stallAnomalies(r, over, c.Committed, a.opts)
	v.resources(r, s0.peaks)
	r.Series = buildSeries(a.shards, v)
	// Operating the pipeline (issue 25): each section adds its figures
	// to r, its anomalies to r.Anomalies and its reasons to
	// v.opsReasons.
	a.redriveSection(v, r, f)
	a.retriesSection(v, r)
	a.backlogSection(v, r, pend, drainEnd)
	a.positionsSection(v, r, f)
	a.lagSection(v, r)
	a.tracesSection(v, r)
	r.Availability = availability(a.shards, faults)
	r.Nodes = nodes(s0.nodeOps, faults, end)
	r.Valid = v.verdict(r, unseen)
	return r
}

// FaultFailover is the fault kind of a database failover (the nemesis's
// "failover"): the primary killed, a standby promoted. What the old
// primary acknowledged and the standby had not replayed is gone after it
// ([LostInFailover]).
const FaultFailover = "failover"

// failoverEnd is when the last failover among faults that took effect
// ended, 0 if none did.
func failoverEnd(faults []Fault) int64 {
	var end int64
	for _, f := range faults {
		if f.Kind == FaultFailover && f.TookEffect {
			end = max(end, f.EndNS)
		}
	}
	return end
}

// verdict decides r's verdict and adds to r.Reasons why it is not valid:
// Invalid if an anomaly the guarantees do not allow was found; otherwise
// Valid only if the facts are established (drain and final read complete)
// and something was exercised; Unknown if not. unseen counts the events
// not applied that the facts do not tell lost from late.
func (v *view) verdict(r *Result, unseen int64) Validity {
	drain, final, g, c := r.Facts.Drain, r.Facts.FinalRead, r.Guarantees, r.Counts
	established := final == "complete" && (drain == "complete" || drain == DrainQuiet)
	for _, an := range r.Anomalies {
		if an.Fatal {
			r.Reasons = append(r.Reasons, fmt.Sprintf("%d %s in %s", an.Count, an.Kind, an.Where()))
		}
	}
	unknown := func(reason string) {
		r.Reasons = append(r.Reasons, reason)
		established = false
	}
	switch {
	case drain == DrainQuiet && unseen > 0:
		unknown(fmt.Sprintf("drain ended after a quiet window with %d events not applied, and nothing shows nothing was pending: they are lost or still on their way", unseen))
	case drain != "complete" && drain != DrainQuiet:
		unknown("drain " + drain)
	}
	if final != "complete" {
		unknown("final read " + final)
	}
	if c.Committed > 0 && len(v.subs) == 0 {
		unknown("no subscriptions declared or observed")
	}
	if c.Committed == 0 {
		unknown("nothing was exercised: no commit took effect")
	}
	for _, why := range v.txnReasons {
		unknown(why)
	}
	for _, why := range v.intruderReasons {
		unknown(why)
	}
	for _, why := range v.resourceReasons {
		unknown(why)
	}
	for _, why := range v.opsReasons {
		unknown(why)
	}
	var randomDone, randomTook int
	for _, f := range r.Faults {
		switch {
		case f.Random && f.Outcome != FaultCut:
			randomDone++
			if f.TookEffect {
				randomTook++
			}
		case !f.Random && f.Outcome == FaultNoEffect:
			step := f.Detail
			if step == "" {
				step = strings.TrimSpace(f.Kind + " " + f.Target)
			}
			why := f.Error
			if why == "" {
				why = "no reason recorded"
			}
			unknown(fmt.Sprintf("scheduled fault %s did not take effect: %s", step, why))
		}
	}
	if randomDone > 0 && randomTook == 0 {
		unknown("no random fault took effect")
	}
	if g.Order == PerKey || g.Gaps == None {
		for i, s := range v.subs {
			if v.subEffects[i] && !v.subApplied[i] && !v.subTimed[i] {
				unknown("order in " + s.name + " not judged: its effect rows carry no commit_time and its consumers wrote no apply ops (row order is insert order, not commit order)")
			}
		}
	}
	switch {
	case slices.ContainsFunc(r.Anomalies, func(an Anomaly) bool { return an.Fatal }):
		return Invalid
	case !established:
		return Unknown
	}
	return Valid
}
