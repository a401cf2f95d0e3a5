package checker

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/deliverycheck/deliverycheck/history"
)

// Trimming limits: a golden history keeps the keys of the first
// examples of each fatal anomaly (at most goldenAnomalyKeys per kind) up
// to goldenVersionsPast versions past the highest example, and the first
// goldenVersions versions of goldenOtherKeys other keys, so a correct run
// stays correct and every golden stays small.
const (
	goldenAnomalyKeys  = 1
	goldenVersionsPast = 2
	goldenOtherKeys    = 2
	goldenVersions     = 5
)

// TestWriteGoldenFromRuns turns real runs into golden histories: set
// DELIVERYCHECK_GOLDEN_FROM to a folder of run folders (<scenario>/<time>/,
// as `make matrix` with DELIVERYCHECK_KEEP or the detection matrix leave
// them) and it writes testdata/scenario-<name>/ and its sidecar for the
// first run of each scenario, trimmed by whole keys (so versions stay
// contiguous and order and gaps mean what they meant). A trimmed history
// must keep the run's verdict and its anomaly kinds, or nothing is
// written. Without the variable it is skipped; TestGolden judges what it
// wrote.
func TestWriteGoldenFromRuns(t *testing.T) {
	src := os.Getenv("DELIVERYCHECK_GOLDEN_FROM")
	if src == "" {
		t.Skip("set DELIVERYCHECK_GOLDEN_FROM to a folder of run folders to write golden histories from them")
	}
	scenarios, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range scenarios {
		if !sc.IsDir() {
			continue
		}
		runs, _ := filepath.Glob(filepath.Join(src, sc.Name(), "2*", "results.json"))
		if len(runs) == 0 {
			continue
		}
		slices.Sort(runs)
		t.Run(sc.Name(), func(t *testing.T) { writeGolden(t, sc.Name(), filepath.Dir(runs[0])) })
	}
}

// runResults is what a golden needs of a run folder's results.json.
type runResults struct {
	Verdict Validity `json:"verdict"`
	Result  *Result  `json:"result"`
}

func writeGolden(t *testing.T, name, dir string) {
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rr runResults
	if err := json.Unmarshal(b, &rr); err != nil || rr.Result == nil {
		t.Fatalf("%s: results.json: %v", dir, err)
	}
	orig := rr.Result
	paths, err := filepath.Glob(filepath.Join(dir, "history", "*.jsonl"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("%s: no history", dir)
	}
	files := map[string]history.History{}
	keyOf := map[string]string{}
	verOf := map[string]int64{}
	for _, p := range paths {
		h, _, err := history.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(p)] = h
		for _, op := range h {
			if op.Value.Event != "" && op.Value.Key != "" {
				keyOf[op.Value.Event] = op.Value.Key
			}
			if op.Value.Event != "" && op.Value.Version > 0 {
				verOf[op.Value.Event] = op.Value.Version
			}
		}
	}
	keep := trimKeys(orig, keyOf, verOf)

	out := filepath.Join("testdata", "scenario-"+name)
	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	var written []string
	for base, h := range files {
		var buf []byte
		n := int64(0)
		for _, op := range h {
			if !keepOp(&op, keyOf, verOf, keep) {
				continue
			}
			op.Index = n
			n++
			buf = append(op.AppendJSON(buf), '\n')
		}
		if n == 0 {
			continue
		}
		p := filepath.Join(out, base)
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			t.Fatal(err)
		}
		written = append(written, p)
	}
	g := orig.Guarantees
	r, err := CheckFiles(written, Options{Guarantees: g})
	if err != nil {
		t.Fatal(err)
	}
	if r.Valid != orig.Valid || !slices.Equal(fatalKinds(r), fatalKinds(orig)) {
		os.RemoveAll(out)
		t.Fatalf("trimmed history judged %s %v, the run %s %v: widen the trim", r.Valid, fatalKinds(r), orig.Valid, fatalKinds(orig))
	}
	want := golden{Guarantees: guaranteesFlag(g), Valid: r.Valid, Anomalies: kindsOf(r)}
	if r.Valid != Valid {
		want.Reasons = r.Reasons[:min(1, len(r.Reasons))]
	}
	wb, err := json.MarshalIndent(want, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out+".want.json", append(wb, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s %v from %s (%d files)", name, r.Valid, want.Anomalies, dir, len(written))
}

// trimKeys picks the aggregate keys a golden keeps, with how many of
// their first versions: the keys of each fatal anomaly's first examples,
// up to a few versions past the highest one shown (what an order
// regression or a gap needs: the version above), and a few other keys'
// first versions.
func trimKeys(r *Result, keyOf map[string]string, verOf map[string]int64) map[string]int64 {
	keep := map[string]int64{}
	for _, a := range r.Anomalies {
		if !a.Fatal {
			continue
		}
		n := 0
		for _, e := range a.Events {
			k := keyOf[e]
			if k == "" {
				continue
			}
			if _, ok := keep[k]; !ok {
				if n == goldenAnomalyKeys {
					continue
				}
				n++
			}
			keep[k] = max(keep[k], verOf[e]+goldenVersionsPast)
		}
	}
	var others []string
	for _, k := range keyOf {
		if _, ok := keep[k]; !ok {
			others = append(others, k)
		}
	}
	slices.Sort(others)
	others = slices.Compact(others)
	for _, k := range others[:min(goldenOtherKeys, len(others))] {
		keep[k] = goldenVersions
	}
	return keep
}

// keepOp keeps every run-level op (no event, or a fault, crash or
// restart naming the event in flight) and every op of an event of a kept
// key within its kept versions (an op without a version, a publish or an
// ack, follows its event's).
func keepOp(op *history.Op, keyOf map[string]string, verOf map[string]int64, keep map[string]int64) bool {
	if op.Value.Event == "" || op.F == history.Crash || op.F == history.Restart || op.F == history.Fault {
		return true
	}
	limit, ok := keep[keyOf[op.Value.Event]]
	if !ok {
		return false
	}
	return verOf[op.Value.Event] <= limit
}

func fatalKinds(r *Result) []Kind {
	var ks []Kind
	for _, a := range r.Anomalies {
		if a.Fatal {
			ks = append(ks, a.Kind)
		}
	}
	return slices.Compact(slices.Sorted(slices.Values(ks)))
}

func kindsOf(r *Result) []Kind {
	var ks []Kind
	for _, a := range r.Anomalies {
		ks = append(ks, a.Kind)
	}
	return slices.Compact(slices.Sorted(slices.Values(ks)))
}

// guaranteesFlag writes g as --guarantees reads it.
func guaranteesFlag(g Guarantees) string {
	g = g.Normalize()
	s := fmt.Sprintf("loss=%s,duplicate-effects=%s,order=%s,gaps=%s", g.Loss, g.DuplicateEffects, g.Order, g.Gaps)
	if len(g.Subscriptions) > 0 {
		s += ",subscriptions=" + strings.Join(g.Subscriptions, "+")
	}
	// The limits, when promised: without them a run they made invalid
	// would be judged valid.
	if g.MaxStall > 0 {
		s += ",max-stall=" + g.MaxStall.String()
	}
	if g.MaxRSS > 0 {
		s += ",max-rss=" + strconv.FormatInt(g.MaxRSS, 10)
	}
	if g.MaxRetrySync > 0 {
		s += ",max-retry-sync=" + strconv.FormatFloat(g.MaxRetrySync, 'g', -1, 64)
	}
	if g.MaxBacklogAge > 0 {
		s += ",max-backlog-age=" + g.MaxBacklogAge.String()
	}
	return s
}
