package checker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/deliverycheck/deliverycheck/history"
)

// stream is a history of commit ok ops every 1e9/perSec ns in [from, to),
// except in the gaps, where the producer's commits fail instead (the
// workload goes on, nothing commits), each applied by inv at once; and
// fault windows.
type stream struct {
	perSec   int64
	from, to int64
	gaps     [][2]int64
	faults   []Fault
}

func (s stream) history() history.History {
	var h history.History
	add := func(t int64, p string, typ history.Type, f history.F, v history.Value) {
		h = append(h, history.Op{Time: t, Process: p, Type: typ, F: f, Value: v})
	}
	add(0, "harness", history.OK, history.Setup, history.Value{Subscriptions: []string{"inv"}})
	step := int64(1e9) / s.perSec
	i := 0
	for t := s.from; t < s.to; t += step {
		id := "e" + strconv.Itoa(i)
		i++
		v := history.Value{Event: id, Key: "k" + strconv.Itoa(i%7)}
		add(t, "producer-0", history.Invoke, history.Commit, v)
		if slices.ContainsFunc(s.gaps, func(g [2]int64) bool { return t >= g[0] && t < g[1] }) {
			add(t, "producer-0", history.Fail, history.Commit, v)
			continue
		}
		add(t, "producer-0", history.OK, history.Commit, v)
		add(t, "consumer-inv-0", history.Invoke, history.Apply, history.Value{Event: id, Consumer: "inv"})
		add(t, "consumer-inv-0", history.OK, history.Apply, history.Value{Event: id, Consumer: "inv"})
	}
	for _, f := range s.faults {
		v := history.Value{Fault: f.Kind, Target: f.Target, Detail: f.Detail}
		add(f.StartNS, "harness", history.Invoke, history.Fault, v)
		typ := history.OK
		if !f.TookEffect {
			typ = history.Fail
		}
		add(f.EndNS, "harness", typ, history.Fault, v)
	}
	slices.SortStableFunc(h, func(a, b history.Op) int { return int(a.Time - b.Time) })
	for i := range h {
		h[i].Index = int64(i)
	}
	return h
}

func window(kind string, start, end int64) Fault {
	return Fault{Kind: kind, Target: "kafka-" + kind, Detail: kind, StartNS: start, EndNS: end, TookEffect: true}
}

const s1 = int64(1e9)

// TestAvailability pins the definitions on streams whose answer can be
// worked out by hand: 50 commits/s, 5 in every 100 ms tick.
func TestAvailability(t *testing.T) {
	tests := []struct {
		name string
		s    stream
		// want, per fault that took effect, for commits: normal/s,
		// during, recovery, recovery_ns or searched_to_ns; applies, the
		// same for applies when they differ.
		want, applies []string
	}{
		{
			// Commits stop at 5 s and resume at 8 s, 1 s after the 7 s
			// heal: the first window 80% full starts at 7.8 s.
			name: "an outage outlasting its fault by a second",
			s:    stream{perSec: 50, to: 20 * s1, gaps: [][2]int64{{5 * s1, 8 * s1}}, faults: []Fault{window("kill", 5*s1, 7*s1)}},
			want: []string{"normal 50 during 0 (0/s) recovered in 800ms"},
		},
		{
			name: "no dip at all: recovered at the heal",
			s:    stream{perSec: 50, to: 20 * s1, faults: []Fault{window("latency", 5*s1, 7*s1)}},
			want: []string{"normal 50 during 100 (50/s) recovered in 0s"},
		},
		{
			// Heal at 7.05 s: the first tick at or after it is 7.1 s.
			name: "a heal between ticks",
			s:    stream{perSec: 50, to: 20 * s1, faults: []Fault{window("latency", 5*s1, 7*s1+50e6)}},
			want: []string{"normal 50 during 100 (50/s) recovered in 50ms"},
		},
		{
			// Nothing commits after 6 s, though the producers go on
			// trying until 19.98 s: the last whole window measured starts
			// at 18.9 s. Nothing is applied after 6 s either: applies
			// cannot be measured past the heal at all.
			name:    "never back before the workload ended",
			s:       stream{perSec: 50, to: 20 * s1, gaps: [][2]int64{{6 * s1, 20 * s1}}, faults: []Fault{window("kill", 5*s1, 7*s1)}},
			want:    []string{"normal 50 during 50 (25/s) not recovered, searched to 18900ms"},
			applies: []string{"normal 50 during 50 (25/s) not recovered, searched to 7s"},
		},
		{
			name: "a fault before a whole fault-free second: no baseline",
			s:    stream{perSec: 50, to: 20 * s1, faults: []Fault{window("kill", s1/2, 2*s1)}},
			want: []string{"no baseline during 75 (50/s)"},
		},
		{
			// The second fault's baseline skips the first one's window
			// and every tick whose window overlaps it: only [0, 2 s) and
			// [5 s, 9 s) count, at 50/s; the outage in [2 s, 5 s) does
			// not lower it.
			name: "the baseline leaves out other faults' windows",
			s: stream{perSec: 50, to: 20 * s1, gaps: [][2]int64{{2 * s1, 5 * s1}},
				faults: []Fault{window("pause", 2*s1, 4*s1), window("kill", 10*s1, 10*s1)}},
			want: []string{"normal 50 during 0 (0/s) recovered in 800ms", "normal 50 during 0 (-) recovered in 0s"},
		},
		{
			name: "a fault that did not take effect has no window",
			s:    stream{perSec: 50, to: 20 * s1, faults: []Fault{{Kind: "kill", StartNS: 5 * s1, EndNS: 6 * s1}}},
			want: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.s.history()
			for _, shards := range []int{1, 3} {
				r := Check(h, Options{Shards: shards})
				var commits, applies []string
				for _, w := range r.Availability.Windows {
					commits = append(commits, describe(w.Commits))
					applies = append(applies, describe(w.Applies))
				}
				if !slices.Equal(commits, tt.want) {
					t.Fatalf("%d shards: commits %q\nwant %q", shards, commits, tt.want)
				}
				want := tt.applies
				if want == nil {
					want = tt.want
				}
				if !slices.Equal(applies, want) {
					t.Fatalf("%d shards: applies %q\nwant %q", shards, applies, want)
				}
			}
		})
	}
}

func describe(c RateChange) string {
	during := "-"
	if c.DuringPerS != nil {
		during = strconv.FormatFloat(*c.DuringPerS, 'g', -1, 64) + "/s"
	}
	s := fmt.Sprintf("during %d (%s)", c.During, during)
	if c.NormalPerS == nil {
		s = "no baseline " + s
	} else {
		s = "normal " + strconv.FormatFloat(*c.NormalPerS, 'g', -1, 64) + " " + s
	}
	switch c.Recovery {
	case RecoveryRecovered:
		s += " recovered in " + fmtDur(*c.RecoveryNS)
	case RecoveryNotRecovered:
		s += " not recovered, searched to " + fmtDur(*c.SearchedToNS)
	}
	return s
}

func fmtDur(ns int64) string {
	if ns%1e9 == 0 {
		return strconv.FormatInt(ns/1e9, 10) + "s"
	}
	return strconv.FormatInt(ns/1e6, 10) + "ms"
}

// The one line the command line prints per window.
func TestAvailabilitySummary(t *testing.T) {
	s := stream{perSec: 50, to: 20 * s1, gaps: [][2]int64{{5 * s1, 8 * s1}, {13 * s1, 20 * s1}},
		faults: []Fault{window("kill", 5*s1, 7*s1), window("pause", 12*s1, 13*s1), window("latency", s1/2, s1)}}
	r := Check(s.history(), Options{})
	var got []string
	for _, w := range r.Availability.Windows {
		got = append(got, r.Availability.Summary(w, r.Faults))
	}
	want := []string{
		"kill kafka-kill 5.000s → 7.000s: commits 50.0/s → 0.0/s, back to normal in 0.8s; applies 50.0/s → 0.0/s, back to normal in 0.8s",
		"pause kafka-pause 12.000s → 13.000s: commits 50.0/s → 50.0/s, did not get back to normal (measured to 18.900s, where its ops end); " +
			"applies 50.0/s → 50.0/s, not measurable after the heal (its ops had ended)",
		"latency kafka-latency 0.500s → 1.000s: commits – → 50.0/s, no baseline (no fault-free second before the fault); " +
			"applies – → 50.0/s, no baseline (no fault-free second before the fault)",
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("summaries:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestPropertyAvailability checks the availability of random streams
// against a direct reading of its definitions, tick by tick: the count
// during each window, normal as the median of the fault-free rates
// before it, and recovery as the first sustained tick after the heal (or
// none up to where the search stopped). The number of shards changes
// nothing.
func TestPropertyAvailability(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		end := rapid.Int64Range(1, 30).Draw(t, "seconds") * s1
		s := stream{perSec: rapid.Int64Range(1, 120).Draw(t, "rate"), from: rapid.Int64Range(0, 2*s1).Draw(t, "from"), to: end}
		for range rapid.IntRange(0, 3).Draw(t, "gaps") {
			a := rapid.Int64Range(0, end).Draw(t, "gap")
			s.gaps = append(s.gaps, [2]int64{a, a + rapid.Int64Range(0, 5*s1).Draw(t, "gap-len")})
		}
		for range rapid.IntRange(0, 4).Draw(t, "faults") {
			a := rapid.Int64Range(0, end).Draw(t, "start")
			f := window("kill", a, a+rapid.Int64Range(0, 4*s1).Draw(t, "len"))
			f.TookEffect = rapid.IntRange(0, 4).Draw(t, "took") > 0
			s.faults = append(s.faults, f)
		}
		h := s.history()
		r := Check(h, Options{Shards: rapid.IntRange(1, 4).Draw(t, "shards")})
		a1, _ := json.Marshal(Check(h, Options{Shards: 1}).Availability)
		if a, _ := json.Marshal(r.Availability); !bytes.Equal(a, a1) {
			t.Fatalf("shards change the availability:\n%s\n%s", a1, a)
		}
		checkAvailability(t, h, r)
	})
}

// checkAvailability recomputes r's availability from h by the definitions.
func checkAvailability(t *rapid.T, h history.History, r *Result) {
	const tick, w, sustain = int64(100e6), int64(1e9), int64(1e9)
	var okTimes []int64
	first, last := int64(-1), int64(-1)
	for _, op := range h {
		if op.F != history.Commit {
			continue
		}
		if first < 0 {
			first = op.Time
		}
		last = op.Time
		if op.Type == history.OK {
			okTimes = append(okTimes, op.Time)
		}
	}
	count := func(a, b int64) int64 { // ok ops in [a, b)
		var n int64
		for _, x := range okTimes {
			if x >= a && x < b {
				n++
			}
		}
		return n
	}
	measurable := func(k int64) bool { return first >= 0 && k*tick >= first && k*tick+w <= last }
	rate := func(k int64) float64 { return float64(count(k*tick, k*tick+w)) }
	var took []Fault
	for _, f := range r.Faults {
		if f.TookEffect {
			took = append(took, f)
		}
	}
	free := func(k int64) bool {
		for _, f := range took {
			if f.StartNS < k*tick+w && f.EndNS >= k*tick {
				return false
			}
		}
		return true
	}
	if len(r.Availability.Windows) != len(took) {
		t.Fatalf("%d windows for %d faults that took effect", len(r.Availability.Windows), len(took))
	}
	for i, fw := range r.Availability.Windows {
		f := r.Faults[fw.Fault]
		if f != took[i] {
			t.Fatalf("window %d is of fault %d, %+v, want %+v", i, fw.Fault, f, took[i])
		}
		c := fw.Commits
		if want := count(f.StartNS/tick*tick, f.EndNS/tick*tick); c.During != want {
			t.Fatalf("fault %d: during %d, want %d", fw.Fault, c.During, want)
		}
		var base []float64
		for k := f.StartNS/tick - w/tick; k >= 0 && len(base) < 600; k-- {
			if measurable(k) && free(k) {
				base = append(base, rate(k))
			}
		}
		slices.Sort(base)
		if len(base) == 0 {
			if c.Recovery != RecoveryNoBaseline || c.NormalPerS != nil {
				t.Fatalf("fault %d: no fault-free second before it, got %s", fw.Fault, describe(c))
			}
			continue
		}
		normal := base[len(base)/2]
		if len(base)%2 == 0 {
			normal = (base[len(base)/2-1] + normal) / 2
		}
		if c.NormalPerS == nil || *c.NormalPerS != round3(normal) {
			t.Fatalf("fault %d: %s, want normal %v of %v", fw.Fault, describe(c), normal, base)
		}
		if normal == 0 {
			if c.Recovery != RecoveryNoBaseline {
				t.Fatalf("fault %d: normal 0, got %s", fw.Fault, describe(c))
			}
			continue
		}
		sustained := func(k int64) bool {
			for j := k; j <= k+sustain/tick; j++ {
				if !measurable(j) || rate(j) < 0.8*normal {
					return false
				}
			}
			return true
		}
		heal := (f.EndNS + tick - 1) / tick
		switch c.Recovery {
		case RecoveryRecovered:
			at := (f.EndNS + *c.RecoveryNS) / tick
			if *c.RecoveryNS < 0 || (f.EndNS+*c.RecoveryNS)%tick != 0 || !sustained(at) {
				t.Fatalf("fault %d: %s, but tick %d is not sustained", fw.Fault, describe(c), at)
			}
			for k := heal; k < at; k++ {
				if sustained(k) {
					t.Fatalf("fault %d: %s, but tick %d already was", fw.Fault, describe(c), k)
				}
			}
		case RecoveryNotRecovered:
			for k := heal; k*tick <= *c.SearchedToNS; k++ {
				if sustained(k) {
					t.Fatalf("fault %d: %s, but tick %d was sustained", fw.Fault, describe(c), k)
				}
			}
			if k := *c.SearchedToNS/tick + 1; measurable(k + sustain/tick) {
				t.Fatalf("fault %d: %s, yet tick %d could still be measured", fw.Fault, describe(c), k)
			}
		default:
			t.Fatalf("fault %d: recovery %q with a baseline", fw.Fault, c.Recovery)
		}
	}
}
