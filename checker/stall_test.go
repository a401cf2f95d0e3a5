package checker

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/deliverycheck/deliverycheck/history"
)

const sec = int64(time.Second)

func TestStallSpans(t *testing.T) {
	type span struct{ start, end, pending int64 }
	for _, c := range []struct {
		name                string
		ups, downs, settles []int64
		end                 int64
		want                []span
	}{
		{name: "nothing pending", settles: []int64{5}, end: 10},
		{name: "pending until settled", ups: []int64{1, 2}, downs: []int64{4, 6}, settles: []int64{4, 6}, end: 10,
			want: []span{{1, 4, 2}, {4, 6, 1}}},
		{name: "a settle of something else ends it", ups: []int64{1}, downs: []int64{8}, settles: []int64{3, 8}, end: 10,
			want: []span{{1, 3, 1}, {3, 8, 1}}},
		{name: "open at the end", ups: []int64{1, 2}, downs: []int64{3}, settles: []int64{3}, end: 10,
			want: []span{{1, 3, 2}, {3, 10, 1}}},
		{name: "idle between", ups: []int64{1, 6}, downs: []int64{2, 7}, settles: []int64{2, 7}, end: 10,
			want: []span{{1, 2, 1}, {6, 7, 1}}},
		{name: "committed and settled at once", ups: []int64{4}, downs: []int64{4}, settles: []int64{4}, end: 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []span
			stallSpans(c.ups, c.downs, c.settles, c.end, func(sp StallSpan) {
				if sp.DurationNS != sp.EndNS-sp.StartNS || sp.Open != (sp.EndNS == c.end) {
					t.Errorf("span %+v", sp)
				}
				got = append(got, span{sp.StartNS, sp.EndNS, sp.Pending})
			})
			if !slices.Equal(got, c.want) {
				t.Errorf("spans %v, want %v", got, c.want)
			}
		})
	}
}

// stallRun is a run of inventory applying e1..e5, committed at 1s..5s:
// e1 and e2 at once, the rest only after a kill of its consumer from 3s
// to 9s, at 10s.
func stallRun() history.History {
	b := new(builder).setup([]string{"inventory"}, nil)
	ids := []string{"e1", "e2", "e3", "e4", "e5"}
	for i, id := range ids {
		at := int64(i+1) * sec
		b.at(at, "producer-1", history.Invoke, history.Commit, ev(id, "k"+id, 1))
		b.at(at+1, "producer-1", history.OK, history.Commit, ev(id, "k"+id, 1))
		if i < 2 {
			b.at(at+100, "consumer-inventory", history.OK, history.Apply, kv(id, "inventory", "k"+id, 1))
		}
	}
	b.at(3*sec+500, "nemesis", history.Invoke, history.Fault, history.Value{Fault: "kill", Target: "consumer-inventory", Detail: "at 3s: kill consumer-inventory"})
	b.at(9*sec, "nemesis", history.OK, history.Fault, history.Value{Fault: "kill", Target: "consumer-inventory", Detail: "at 3s: kill consumer-inventory", Evidence: "killed"})
	for _, id := range ids[2:] {
		b.at(10*sec, "consumer-inventory", history.OK, history.Apply, kv(id, "inventory", "k"+id, 1))
	}
	b.at(11*sec, "harness", history.OK, history.Drain, history.Value{})
	var rows []history.Value
	for _, id := range ids {
		rows = append(rows, effect(id, "inventory"))
	}
	return b.finalRead(rows...).h
}

// A subscription that settles nothing while events wait, for longer than
// max-stall, is a stall, fatal; without max-stall it is only measured.
func TestStall(t *testing.T) {
	h := stallRun()
	r := Check(h, Options{})
	if r.Valid != Valid {
		t.Fatalf("without max-stall: %s %v", r.Valid, r.Reasons)
	}
	if len(r.Stalls) != 1 || !r.Stalls[0].Measured || r.Stalls[0].Longest == nil {
		t.Fatalf("stalls %+v", r.Stalls)
	}
	l := r.Stalls[0].Longest
	// e3 committed at 3s, pending until the applies at 10s.
	if l.StartNS != 3*sec+1 || l.EndNS != 10*sec || l.Pending != 3 || l.Open {
		t.Errorf("longest %+v", l)
	}
	if len(l.Faults) != 1 || l.Faults[0] != "at 3s: kill consumer-inventory" {
		t.Errorf("faults %q", l.Faults)
	}

	g, err := ParseGuarantees("effectively-once,max-stall=5s")
	if err != nil {
		t.Fatal(err)
	}
	r = Check(h, Options{Guarantees: g})
	if r.Valid != Invalid {
		t.Fatalf("max-stall 5s: %s %v", r.Valid, r.Reasons)
	}
	i := slices.IndexFunc(r.Anomalies, func(a Anomaly) bool { return a.Kind == Stall })
	if i < 0 {
		t.Fatalf("no stall anomaly: %+v", r.Anomalies)
	}
	a := r.Anomalies[i]
	if !a.Fatal || a.Count != 1 || a.Subscription != "inventory" || len(a.Examples) != 1 || r.Stalls[0].Over != 1 {
		t.Fatalf("anomaly %+v", a)
	}
	for _, want := range []string{"settled nothing for 7s", "from 3.000s to 10.000s", "3 events pending", "max-stall is 5s", "at 3s: kill consumer-inventory"} {
		if !strings.Contains(a.Examples[0].Detail, want) {
			t.Errorf("detail %q lacks %q", a.Examples[0].Detail, want)
		}
	}
	if !slices.Contains(r.Reasons, "1 stall in inventory") {
		t.Errorf("reasons %q", r.Reasons)
	}

	// A longer max-stall holds.
	g.MaxStall = 8 * time.Second
	if r := Check(h, Options{Guarantees: g}); r.Valid != Valid {
		t.Errorf("max-stall 8s: %s %v", r.Valid, r.Reasons)
	}
}

// A consumer that never settles anything leaves a stall open to the
// drain's end; one that records no settle at all cannot be measured, and
// with max-stall the run is unknown.
func TestStallOpenAndUnmeasured(t *testing.T) {
	b := new(builder).setup([]string{"inventory"}, nil)
	b.at(1*sec, "producer-1", history.OK, history.Commit, ev("e1", "k", 1))
	b.at(2*sec, "consumer-inventory", history.OK, history.Apply, kv("e1", "inventory", "k", 1))
	b.at(3*sec, "producer-1", history.OK, history.Commit, ev("e2", "k", 2))
	b.at(4*sec, "consumer-inventory", history.OK, history.Deliver, sv("e2", "inventory"))
	b.at(9*sec, "harness", history.Info, history.Drain, history.Value{})
	h := b.finalRead(effect("e1", "inventory")).h
	r := Check(h, Options{Guarantees: Guarantees{MaxStall: time.Second}})
	l := r.Stalls[0].Longest
	if l == nil || l.StartNS != 3*sec || l.EndNS != 9*sec || !l.Open || l.Pending != 1 {
		t.Fatalf("longest %+v", l)
	}
	if r.Valid != Invalid {
		t.Errorf("%s %v", r.Valid, r.Reasons)
	}

	// A consumer that records its deliveries and settles nothing
	// stalled from the first commit to the drain's end.
	b = new(builder).setup([]string{"inventory"}, []string{"inventory"})
	b.at(1*sec, "producer-1", history.OK, history.Commit, ev("e1", "k", 1))
	b.at(2*sec, "consumer-inventory", history.OK, history.Deliver, sv("e1", "inventory"))
	b.at(6*sec, "harness", history.Info, history.Drain, history.Value{})
	h = b.finalRead().h
	r = Check(h, Options{Guarantees: Guarantees{MaxStall: time.Second}})
	if l := r.Stalls[0].Longest; !r.Stalls[0].Measured || l == nil || l.StartNS != sec || l.EndNS != 6*sec || !l.Open || r.Valid != Invalid ||
		!slices.ContainsFunc(r.Anomalies, func(a Anomaly) bool { return a.Kind == Stall }) {
		t.Errorf("stuck from the start: %+v %+v: %s %q", r.Stalls, l, r.Valid, r.Reasons)
	}

	// Effects rows only: not measured.
	b = new(builder).setup([]string{"inventory"}, nil)
	b.at(1*sec, "producer-1", history.OK, history.Commit, ev("e1", "k", 1))
	b.at(2*sec, "harness", history.OK, history.Drain, history.Value{})
	h = b.finalRead(effect("e1", "inventory")).h
	r = Check(h, Options{Guarantees: Guarantees{MaxStall: time.Second}})
	if r.Stalls[0].Measured || r.Valid != Unknown || !slices.ContainsFunc(r.Reasons, func(s string) bool { return strings.HasPrefix(s, "stall in inventory not judged") }) {
		t.Errorf("stalls %+v: %s %q", r.Stalls, r.Valid, r.Reasons)
	}
	if r := Check(h, Options{}); r.Valid != Valid {
		t.Errorf("without max-stall: %s %q", r.Valid, r.Reasons)
	}
}

// resourcesRun is a valid run with resources ops of two processes.
func resourcesRun() history.History {
	b := new(builder).setup([]string{"inventory"}, nil).commit("e1", "k", 1, history.OK).consume("e1", "inventory")
	res := func(p string, rss int64) {
		b.op("harness", history.OK, history.Resources, history.Value{Target: p, RSS: rss})
	}
	res("consumer-inventory-0", 20<<20)
	res("relay-0", 10<<20)
	res("consumer-inventory-0", 300<<20)
	res("consumer-inventory-0", 400<<20)
	res("relay-0", 12<<20)
	return b.drain().finalRead(effect("e1", "inventory")).h
}

// A process whose peak exceeds max-rss is a memory finding, fatal; each
// process's peak is reported whatever the guarantees.
func TestMemory(t *testing.T) {
	h := resourcesRun()
	r := Check(h, Options{})
	if r.Valid != Valid {
		t.Fatalf("without max-rss: %s %v", r.Valid, r.Reasons)
	}
	want := []ProcessResources{{Process: "consumer-inventory-0", PeakRSS: 400 << 20, Ops: 3}, {Process: "relay-0", PeakRSS: 12 << 20, Ops: 2}}
	if len(r.Resources) != 2 {
		t.Fatalf("resources %+v", r.Resources)
	}
	for i, p := range r.Resources {
		p.PeakNS = 0
		if p != want[i] {
			t.Errorf("resources[%d] = %+v, want %+v", i, p, want[i])
		}
	}
	g, _ := ParseGuarantees("max-rss=256MiB")
	r = Check(h, Options{Guarantees: g})
	if r.Valid != Invalid {
		t.Fatalf("max-rss 256MiB: %s %v", r.Valid, r.Reasons)
	}
	i := slices.IndexFunc(r.Anomalies, func(a Anomaly) bool { return a.Kind == Memory })
	if i < 0 || len(r.Anomalies) != 1 {
		t.Fatalf("anomalies %+v", r.Anomalies)
	}
	a := r.Anomalies[i]
	if a.Process != "consumer-inventory-0" || a.Where() != "consumer-inventory-0" || !a.Fatal || len(a.Examples) != 1 || len(a.Examples[0].Ops) != 2 {
		t.Fatalf("anomaly %+v", a)
	}
	if d := a.Examples[0].Detail; !strings.Contains(d, "peaked at 400.0 MiB") || !strings.Contains(d, "over max-rss 256MiB") || !strings.Contains(d, "with 300.0 MiB") {
		t.Errorf("detail %q", d)
	}
	if a.Examples[0].Ops[0].Value.RSS != 300<<20 || a.Examples[0].Ops[1].Value.RSS != 400<<20 {
		t.Errorf("ops %v", a.Examples[0].Ops)
	}
	if !slices.Contains(r.Reasons, "1 memory in consumer-inventory-0") {
		t.Errorf("reasons %q", r.Reasons)
	}
	g.MaxRSS = 1 << 30
	if r := Check(h, Options{Guarantees: g}); r.Valid != Valid {
		t.Errorf("max-rss 1GiB: %s %v", r.Valid, r.Reasons)
	}

	// Nothing measured: max-rss cannot be judged.
	h = new(builder).setup([]string{"inventory"}, nil).commit("e1", "k", 1, history.OK).consume("e1", "inventory").drain().finalRead(effect("e1", "inventory")).h
	r = Check(h, Options{Guarantees: g})
	if r.Valid != Unknown || r.Resources != nil || !slices.ContainsFunc(r.Reasons, func(s string) bool { return strings.HasPrefix(s, "memory not measured") }) {
		t.Errorf("%s %q %+v", r.Valid, r.Reasons, r.Resources)
	}
}

func TestGuaranteesStallAndRSS(t *testing.T) {
	g, err := ParseGuarantees("max-stall=2s,max-rss=1GiB,at-least-once,subscriptions=a")
	if err != nil {
		t.Fatal(err)
	}
	if g.MaxStall != 2*time.Second || g.MaxRSS != 1<<30 || g.DuplicateEffects != Allowed || !slices.Equal(g.Subscriptions, []string{"a"}) {
		t.Errorf("%+v: a preset must keep max-stall and max-rss", g)
	}
	if !g.Fatal(Stall) || !g.Fatal(Memory) || (Guarantees{}).Fatal(Stall) || (Guarantees{}).Fatal(Memory) {
		t.Error("stall and memory are fatal exactly when their guarantee is set")
	}
	for _, bad := range []string{"max-stall=soon", "max-rss=lots", "max-rss=1.5GiB", "max-rss=-1", "max-rss=20GB"} {
		if _, err := ParseGuarantees(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
	if err := (Guarantees{MaxStall: -1}).Validate(); err == nil {
		t.Error("negative max-stall validates")
	}
	for s, n := range map[string]int64{"0": 0, "1000": 1000, "4096B": 4096, "512KiB": 512 << 10, "256MiB": 256 << 20, "1GiB": 1 << 30, "2TiB": 2 << 40} {
		got, err := ParseSize(s)
		if err != nil || got != n {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", s, got, err, n)
		}
		if back, _ := ParseSize(FormatSize(n)); back != n {
			t.Errorf("FormatSize(%d) = %q reads back as %d", n, FormatSize(n), back)
		}
	}
	if FormatSize(256<<20) != "256MiB" || FormatSize(1000) != "1000B" {
		t.Errorf("FormatSize: %s %s", FormatSize(256<<20), FormatSize(1000))
	}
}

// The longest stall the checker reports is the one a brute force finds:
// the longest [a, b] between the first commit and the drain's end with
// events pending at every moment of [a, b) and no settle inside (a, b).
func TestStallProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 12).Draw(t, "events")
		type rec struct {
			at   int64
			p    string
			typ  history.Type
			f    history.F
			v    history.Value
			stem bool // a settle
		}
		var recs []rec
		commit := map[string]int64{}
		for i := range n {
			id := "e" + string(rune('a'+i))
			c := rapid.Int64Range(0, 50).Draw(t, "commit")
			recs = append(recs, rec{at: c, p: "producer-1", typ: history.OK, f: history.Commit, v: ev(id, "k"+id, 1)})
			commit[id] = c
			for range rapid.IntRange(0, 3).Draw(t, "ops") {
				at := rapid.Int64Range(0, 60).Draw(t, "at")
				v := kv(id, "inventory", "k"+id, 1)
				switch rapid.IntRange(0, 5).Draw(t, "what") {
				case 0:
					recs = append(recs, rec{at, "c", history.OK, history.Apply, v, true})
				case 1:
					v.Reason = "duplicate: already in the inbox"
					recs = append(recs, rec{at, "c", history.Fail, history.Apply, v, true})
				case 2:
					recs = append(recs, rec{at, "c", history.OK, history.SkipStale, v, true})
				case 3:
					recs = append(recs, rec{at, "c", history.OK, history.DLQ, v, true})
				case 4:
					v.Reason = "transient"
					recs = append(recs, rec{at, "c", history.Fail, history.Apply, v, false})
				case 5:
					recs = append(recs, rec{at, "c", history.OK, history.Deliver, v, false})
				}
			}
		}
		end := rapid.Int64Range(1, 70).Draw(t, "drain")
		recs = append(recs, rec{at: end, p: "harness", typ: history.OK, f: history.Drain},
			rec{at: 0, p: "harness", typ: history.OK, f: history.Setup, v: history.Value{Subscriptions: []string{"inventory"}}})
		slices.SortStableFunc(recs, func(x, y rec) int { return int(x.at - y.at) })
		var h history.History
		for _, r := range recs {
			h = append(h, history.Op{Index: int64(len(h)), Time: r.at * sec, Process: r.p, Type: r.typ, F: r.f, Value: r.v})
		}
		r := Check(h, Options{Shards: rapid.IntRange(1, 3).Draw(t, "shards")})

		// Brute force, in whole seconds.
		first := map[string]int64{}
		var settles []int64
		for _, x := range recs {
			if !x.stem {
				continue
			}
			if f, ok := first[x.v.Event]; !ok || x.at < f {
				first[x.v.Event] = x.at
			}
			if x.at <= end {
				settles = append(settles, x.at)
			}
		}
		pending := func(t int64) int {
			k := 0
			for id, c := range commit {
				f, ok := first[id]
				if !ok {
					f = math.MaxInt64
				}
				if c <= t && t < f && c <= end {
					k++
				}
			}
			return k
		}
		var want int64
		for a := int64(0); a <= end; a++ {
			for b := a + 1; b <= end; b++ {
				ok := true
				for x := a; x < b && ok; x++ {
					ok = pending(x) > 0
				}
				for _, s := range settles {
					ok = ok && !(s > a && s < b)
				}
				if ok {
					want = max(want, b-a)
				}
			}
		}
		// Any op of its consumer says it records what it does.
		measured := slices.ContainsFunc(recs, func(x rec) bool { return x.p == "c" })
		if len(r.Stalls) != 1 || r.Stalls[0].Measured != measured {
			t.Fatalf("stalls %+v, want inventory measured %v", r.Stalls, measured)
		}
		if !measured {
			return // its consumer recorded nothing: not measured
		}
		var got int64
		if r.Stalls[0].Longest != nil {
			got = r.Stalls[0].Longest.DurationNS / sec
		}
		if got != want {
			t.Fatalf("longest stall %ds, brute force %ds (stalls %+v)", got, want, r.Stalls)
		}
	})
}
