package checker

import (
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/deliverycheck/deliverycheck/history"
)

// Availability is what each fault window did to the pipeline's
// throughput: commits/s (commit ok ops) and applies/s (apply ok ops, all
// subscriptions together), before, during and after it, and how long
// after its heal each was back to normal. It is computed from the
// history alone, in ticks of TickNS.
//
// The rate at a tick t is the count of ok ops in [t, t+WindowNS),
// per second. A rate is measured only while its ops flow: from the first
// op of its f (commit or apply, any type) to the last one, so the ramp
// before the workload and the drain after it are not read as outages.
//
// Normal throughput, for a fault, is the median rate at the fault-free
// ticks before it started: ticks whose whole window lies before the
// fault's start and overlaps no fault window that took effect (at most
// the last BaselineNS of them). With none, or a median of 0, there is no
// normal to recover to: the recovery is "no-baseline".
//
// Recovered, after a heal, is the first tick t at or after it such that
// the rate at t and at every tick up to t+SustainNS is at least
// RecoveredFraction of normal: back, and staying back. If no such tick is
// found before the rate stops being measurable (the workload ended) or
// within RecoveryLimitNS of the heal, the recovery is "not-recovered",
// with how far the search went; never a made-up number.
type Availability struct {
	TickNS            int64   `json:"tick_ns"`
	WindowNS          int64   `json:"window_ns"`
	BaselineNS        int64   `json:"baseline_ns"`
	SustainNS         int64   `json:"sustain_ns"`
	RecoveryLimitNS   int64   `json:"recovery_limit_ns"`
	RecoveredFraction float64 `json:"recovered_fraction"`
	// Windows has one entry per fault that took effect, in the order of
	// Result.Faults.
	Windows []FaultAvailability `json:"windows"`
}

// FaultAvailability is the throughput around one fault window.
type FaultAvailability struct {
	Fault   int        `json:"fault"` // index in Result.Faults
	Commits RateChange `json:"commits"`
	Applies RateChange `json:"applies"`
}

// RateChange is one rate (commits/s or applies/s) around a fault window.
type RateChange struct {
	// NormalPerS is normal throughput before the fault, null with no
	// baseline.
	NormalPerS *float64 `json:"normal_per_s"`
	// During counts the ok ops in the window; DuringPerS is that per
	// second, null for a window shorter than a tick.
	During     int64    `json:"during"`
	DuringPerS *float64 `json:"during_per_s"`
	// Recovery is "recovered", "not-recovered" or "no-baseline" (see
	// [Availability]).
	Recovery string `json:"recovery"`
	// RecoveryNS is the time from the heal to the recovered tick
	// (recovered only).
	RecoveryNS *int64 `json:"recovery_ns,omitempty"`
	// SearchedToNS is where the search for a recovery stopped: the last
	// tick measurable, or the recovery limit (not-recovered only).
	SearchedToNS *int64 `json:"searched_to_ns,omitempty"`
}

// The recoveries of a [RateChange].
const (
	RecoveryRecovered    = "recovered"
	RecoveryNotRecovered = "not-recovered"
	RecoveryNoBaseline   = "no-baseline"
)

// The availability definitions' constants (see [Availability]).
const (
	availTick         = int64(100e6)
	availWindow       = int64(1e9)
	availBaseline     = int64(60e9)
	availSustain      = int64(1e9)
	availLimit        = int64(600e9)
	recoveredFraction = 0.8
	// maxTicks bounds the tick counts of one shard (36 h of 100 ms,
	// as secondOf bounds the seconds); later ops count in the last tick.
	maxTicks = maxSeconds * int(second/availTick)
)

// rateAcc counts one f's ok ops per tick and where its ops begin and end.
type rateAcc struct {
	ticks       []int32
	first, last int64 // times of the first and last op of any type, once ticks is not nil
}

func (r *rateAcc) op(op *history.Op) {
	if r.ticks == nil {
		r.first = op.Time
	}
	r.first, r.last = min(r.first, op.Time), max(r.last, op.Time)
	k := int(min(max(op.Time, 0)/availTick, int64(maxTicks-1)))
	for k >= len(r.ticks) {
		r.ticks = append(r.ticks, 0)
	}
	if op.Type == history.OK {
		r.ticks[k]++
	}
}

// merge adds o into r.
func (r *rateAcc) merge(o *rateAcc) {
	if o.ticks == nil {
		return
	}
	if r.ticks == nil {
		r.first = o.first
	}
	r.first, r.last = min(r.first, o.first), max(r.last, o.last)
	for len(r.ticks) < len(o.ticks) {
		r.ticks = append(r.ticks, 0)
	}
	for k, c := range o.ticks {
		r.ticks[k] += c
	}
}

// rates are one f's rates at each tick, where measurable.
type rates struct {
	at       []float64 // per second, at tick k
	from, to int       // ticks k in [from, to) are measurable
}

func newRates(r *rateAcc) rates {
	w := int(availWindow / availTick)
	if r.ticks == nil {
		return rates{}
	}
	// Ticks whose window lies within [first, last].
	from := int((r.first + availTick - 1) / availTick)
	to := int((r.last-availWindow)/availTick) + 1
	if r.last < availWindow {
		to = 0
	}
	prefix := make([]int64, len(r.ticks)+1)
	for k, c := range r.ticks {
		prefix[k+1] = prefix[k] + int64(c)
	}
	at := make([]float64, max(to, 0))
	for k := from; k < to; k++ {
		hi := min(k+w, len(r.ticks))
		at[k] = float64(prefix[hi]-prefix[min(k, hi)]) * float64(second) / float64(availWindow)
	}
	return rates{at: at, from: from, to: max(to, from)}
}

// availability computes r's availability from the shards' tick counts
// and r.Faults.
func availability(shards []*shard, faults []Fault) Availability {
	out := Availability{TickNS: availTick, WindowNS: availWindow, BaselineNS: availBaseline, SustainNS: availSustain,
		RecoveryLimitNS: availLimit, RecoveredFraction: recoveredFraction, Windows: []FaultAvailability{}}
	var commits, applies rateAcc
	for _, sh := range shards {
		commits.merge(&sh.series.commits)
		applies.merge(&sh.series.applies)
	}
	cr, ar := newRates(&commits), newRates(&applies)
	free := faultFree(faults, max(cr.to, ar.to))
	for i, f := range faults {
		if !f.TookEffect {
			continue
		}
		out.Windows = append(out.Windows, FaultAvailability{Fault: i,
			Commits: rateChange(cr, &commits, free, f), Applies: rateChange(ar, &applies, free, f)})
	}
	return out
}

// faultFree reports, for each of the first n ticks, whether its window
// overlaps no fault window that took effect: [k·tick, k·tick+window)
// against [start, end], an instant fault included.
func faultFree(faults []Fault, n int) []bool {
	cover := make([]int, n+1) // a difference array of the faults over each tick
	w := availWindow / availTick
	for _, f := range faults {
		if !f.TookEffect {
			continue
		}
		// Ticks k with k·tick < end+1 (k ≤ end/tick) and
		// k·tick+window > start (k > (start-window)/tick).
		lo := max(0, floorDiv(f.StartNS, availTick)-w+1)
		hi := min(int64(n), f.EndNS/availTick+1)
		if lo < hi {
			cover[lo]++
			cover[hi]--
		}
	}
	free := make([]bool, n)
	c := 0
	for k := range n {
		c += cover[k]
		free[k] = c == 0
	}
	return free
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// rateChange measures one rate around fault f.
func rateChange(r rates, acc *rateAcc, free []bool, f Fault) RateChange {
	var c RateChange
	// During: the ok ops in [start, end), whole ticks.
	s, e := int(f.StartNS/availTick), int(f.EndNS/availTick)
	for k := s; k < min(e, len(acc.ticks)); k++ {
		c.During += int64(acc.ticks[k])
	}
	if e > s {
		c.DuringPerS = ptr(round3(float64(c.During) * float64(second) / float64(int64(e-s)*availTick)))
	}
	// Normal: the median of the fault-free rates before the start.
	var base []float64
	limit := int(availBaseline / availTick)
	for k := min(r.to, s-int(availWindow/availTick)+1) - 1; k >= r.from && len(base) < limit; k-- {
		if free[k] {
			base = append(base, r.at[k])
		}
	}
	if len(base) == 0 {
		c.Recovery = RecoveryNoBaseline
		return c
	}
	slices.Sort(base)
	normal := base[len(base)/2]
	if len(base)%2 == 0 {
		normal = (base[len(base)/2-1] + normal) / 2
	}
	c.NormalPerS = ptr(round3(normal))
	if normal == 0 {
		c.Recovery = RecoveryNoBaseline
		return c
	}
	// Recovered: the first tick from the heal on from which the rate
	// stays at least the fraction of normal for the sustain.
	want := recoveredFraction * normal
	heal := int((f.EndNS + availTick - 1) / availTick)
	sustain := int(availSustain / availTick)
	stop := min(r.to, heal+int(availLimit/availTick)+sustain+1)
	run := 0 // consecutive good ticks ending at k
	for k := max(heal, r.from); k < stop; k++ {
		if r.at[k] >= want {
			run++
		} else {
			run = 0
		}
		if run == sustain+1 {
			c.Recovery = RecoveryRecovered
			c.RecoveryNS = ptr(int64(k-sustain)*availTick - f.EndNS)
			return c
		}
	}
	c.Recovery = RecoveryNotRecovered
	c.SearchedToNS = ptr(int64(max(stop-1, heal)) * availTick)
	return c
}

func ptr[T any](v T) *T { return &v }

// round3 rounds to three decimals, so results.json reads 39.5, not
// 39.500000000000004.
func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// Rates says c's rates in words: normal, then during the window
// ("120.0/s → 4.2/s"), a dash for one not measured.
func (c RateChange) Rates() string {
	perS := func(v *float64) string {
		if v == nil {
			return "–"
		}
		return strconv.FormatFloat(*v, 'f', 1, 64) + "/s"
	}
	return perS(c.NormalPerS) + " → " + perS(c.DuringPerS)
}

// Back says in words when c's rate was back to normal after a heal at
// heal, a in force: the one wording the command line and the report
// share.
func (c RateChange) Back(a *Availability, heal int64) string {
	switch c.Recovery {
	case RecoveryRecovered:
		return "back to normal in " + seconds(*c.RecoveryNS)
	case RecoveryNotRecovered:
		switch {
		case *c.SearchedToNS <= heal:
			return "not measurable after the heal (its ops had ended)"
		case a.RecoveryLimitNS > 0 && *c.SearchedToNS >= heal+a.RecoveryLimitNS:
			return "not back to normal within " + seconds(a.RecoveryLimitNS) + " of the heal"
		}
		return "did not get back to normal (measured to " + seconds3(*c.SearchedToNS) + ", where its ops end)"
	}
	return "no baseline (no fault-free second before the fault)"
}

// Summary says window w of a result with faults in one line: "kill
// kafka:leader 4.661s → 8.987s: commits 120.0/s → 120.0/s, back to
// normal in 0.0s; applies 119.0/s → 4.2/s, back to normal in 4.3s".
func (a *Availability) Summary(w FaultAvailability, faults []Fault) string {
	if w.Fault < 0 || w.Fault >= len(faults) {
		return ""
	}
	f := faults[w.Fault]
	return strings.TrimSpace(f.Kind+" "+f.Target) + " " + seconds3(f.StartNS) + " → " + seconds3(f.EndNS) +
		": commits " + w.Commits.Rates() + ", " + w.Commits.Back(a, f.EndNS) +
		"; applies " + w.Applies.Rates() + ", " + w.Applies.Back(a, f.EndNS)
}

func seconds(ns int64) string { return strconv.FormatFloat(float64(ns)/1e9, 'f', 1, 64) + "s" }

func seconds3(ns int64) string { return strconv.FormatFloat(float64(ns)/1e9, 'f', 3, 64) + "s" }
