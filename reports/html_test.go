package reports

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/history"
)

func statuses(v view) map[string]string {
	m := map[string]string{}
	for _, c := range v.Checks {
		m[c.Subscription+": "+c.Guarantee] = c.Status
	}
	return m
}

// The view model is what the page shows; these assert on it rather than
// on the HTML (porcupine's visualization tests).
func TestViewModel(t *testing.T) {
	tests := []struct {
		name       string
		run        func() (Record, *checker.Result)
		verdict    string
		summary    []string // substrings of the banner sentence
		checks     map[string]string
		anomalies  []string // kind in subscription
		plots      int      // the three of every run, and a lag chart per subscription
		bands      int
		marks      int
		processes  int
		noExamples bool
	}{
		{
			name:    "invalid: duplicate and loss",
			run:     func() (Record, *checker.Result) { f := fixture{drain: history.OK}; return f.run(), f.result() },
			verdict: "invalid",
			summary: []string{"No loss broke in email (1 lost)", "no duplicate effects broke in inventory (1 duplicate-effect)", "per-key order", "held"},
			checks: map[string]string{"inventory: no loss": "held", "inventory: no duplicate effects": "broken", "email: no loss": "broken",
				"email: per-key order": "held", "email: no gaps": "held", "email: no phantom effects": "held"},
			anomalies: []string{"lost in email", "duplicate-effect in inventory"},
			plots:     5, bands: 1, marks: 2, processes: 7,
		},
		{
			name: "valid",
			run: func() (Record, *checker.Result) {
				f := fixture{drain: history.OK, clean: true}
				return f.run(), f.result()
			},
			verdict: "valid",
			summary: []string{"Every promised guarantee held in email and inventory: no loss, no duplicate effects, per-key order, no gaps"},
			checks:  map[string]string{"inventory: no loss": "held", "email: no duplicate effects": "held"},
			plots:   5, bands: 1, marks: 0, processes: 7,
		},
		{
			name: "unknown: drain timed out",
			run: func() (Record, *checker.Result) {
				f := fixture{drain: history.Info, clean: true}
				return f.run(), f.result()
			},
			verdict: "unknown",
			summary: []string{"Unknown: ", "could not be established"},
			checks:  map[string]string{"inventory: no loss": "unknown", "email: no duplicate effects": "unknown"},
			plots:   5, bands: 1, processes: 7,
		},
		{
			name: "harness error after checking: valid becomes unknown",
			run: func() (Record, *checker.Result) {
				f := fixture{drain: history.OK, clean: true}
				r := f.run()
				r.HarnessError = "postgres: kill -9 did not stop pid 4242"
				return r, f.result()
			},
			verdict: "unknown",
			summary: []string{"the harness failed (postgres: kill -9 did not stop pid 4242)"},
			checks:  map[string]string{"inventory: no loss": "unknown"},
			plots:   5, bands: 1, processes: 7,
		},
		{
			name: "harness error before any history",
			run: func() (Record, *checker.Result) {
				r := fixture{}.run()
				r.HarnessError = "rabbitmq did not start: port in use"
				r.Guarantees.Subscriptions = []string{"inventory"}
				return r, nil
			},
			verdict: "unknown",
			summary: []string{"harness failed before there was a history to check (rabbitmq did not start: port in use)"},
			checks:  map[string]string{"inventory: no loss": "unknown"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run, res := tt.run()
			if res != nil {
				fillFromOps(t, &run, fixtureOpsFor(tt.name), res)
			}
			v := newView(run, res)
			if v.Verdict != tt.verdict {
				t.Errorf("verdict %q, want %q", v.Verdict, tt.verdict)
			}
			for _, s := range tt.summary {
				if !strings.Contains(v.Summary, s) {
					t.Errorf("summary %q lacks %q", v.Summary, s)
				}
			}
			got := statuses(v)
			for k, want := range tt.checks {
				if got[k] != want {
					t.Errorf("check %q: %q, want %q", k, got[k], want)
				}
			}
			var kinds []string
			for _, a := range v.Anomalies {
				kinds = append(kinds, a.Kind+" in "+a.Subscription)
				if len(a.Examples) == 0 {
					t.Errorf("%s in %s: no example", a.Kind, a.Subscription)
				}
			}
			slices.Sort(kinds)
			want := slices.Sorted(slices.Values(tt.anomalies))
			if !slices.Equal(kinds, want) {
				t.Errorf("anomalies %v, want %v", kinds, want)
			}
			if len(v.Plots) != tt.plots {
				t.Fatalf("%d plots, want %d", len(v.Plots), tt.plots)
			}
			for _, p := range v.Plots {
				if len(p.Bands) != tt.bands || len(p.Marks) != tt.marks {
					t.Errorf("plot %s: %d bands %d marks, want %d and %d", p.ID, len(p.Bands), len(p.Marks), tt.bands, tt.marks)
				}
				if p.Empty != "" {
					t.Errorf("plot %s empty: %s", p.ID, p.Empty)
				}
			}
			if len(v.Processes) != tt.processes {
				t.Errorf("%d processes, want %d: %+v", len(v.Processes), tt.processes, v.Processes)
			}
		})
	}
}

func fixtureOpsFor(name string) history.History {
	switch {
	case strings.HasPrefix(name, "invalid"):
		return fixture{drain: history.OK}.ops()
	case strings.HasPrefix(name, "unknown"):
		return fixture{drain: history.Info, clean: true}.ops()
	}
	return fixture{drain: history.OK, clean: true}.ops()
}

// fillFromOps is Record.Complete over an in-memory history and its result.
func fillFromOps(t *testing.T, r *Record, h history.History, res *checker.Result) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "h.jsonl")
	var b []byte
	for _, op := range h {
		b = append(op.AppendJSON(b), '\n')
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.FillFromHistory([]string{p}); err != nil {
		t.Fatal(err)
	}
	r.Faults = FaultWindows(res)
}

// An example's lineage crosses every boundary in pipeline order, with the
// process, time, delivery tag and attempt of each op.
func TestLineage(t *testing.T) {
	f := fixture{drain: history.OK}
	res := f.result()
	var dup *checker.Anomaly
	for i := range res.Anomalies {
		if res.Anomalies[i].Kind == checker.DuplicateEffect {
			dup = &res.Anomalies[i]
		}
	}
	if dup == nil || len(dup.Examples) == 0 {
		t.Fatalf("no duplicate-effect example: %+v", res.Anomalies)
	}
	ex := newExampleView(dup.Examples[0], dup.Subscription)
	var stages []string
	for _, c := range ex.Chain {
		stages = append(stages, c.Stage+": "+c.Summary)
	}
	want := []string{"commit: ok", "publish: ok", "deliver: ok ×2, attempts 1–2", "apply: ok ×2, attempts 1–2", "ack: ok", "final-read: ok ×3"}
	if !slices.Equal(stages, want) {
		t.Errorf("chain %q\nwant  %q", stages, want)
	}
	var deliver []stepView
	for _, s := range ex.Steps {
		if s.Stage == "deliver" {
			deliver = append(deliver, s)
		}
	}
	if len(deliver) != 2 || deliver[1].Attempt != "2" || deliver[1].Where != "tag 3" || deliver[1].Process != "consumer-inventory-0" || deliver[1].Time == "" {
		t.Errorf("deliveries %+v", deliver)
	}
}

// A long run's series and schedule stay a bounded number of SVG nodes and
// points: downsampled to maxPoints, fault windows merged past maxBands,
// marks merged per pixel column past maxMarks.
func TestPlotsBounded(t *testing.T) {
	const buckets = 5000
	res := &checker.Result{Series: checker.Series{BucketNanos: 1e9, Buckets: buckets}}
	counts := make([]int64, buckets)
	unseen := make([]int64, buckets)
	for i := range counts {
		counts[i] = int64(1000 + i%17)
		unseen[i] = int64(i % 50)
	}
	counts[2500] = 99999 // a spike survives downsampling
	res.Series.Throughput = []checker.Rate{{F: history.Commit, Type: history.OK, Counts: counts}}
	res.Series.Unseen = []checker.Curve{{Subscription: "inventory", Values: unseen}}
	for i := range buckets {
		res.Series.Latency = append(res.Series.Latency, checker.LatencyPoint{Bucket: i, Count: 1, P50: 1e6, P95: 2e6, P99: 3e6, Max: 4e6})
	}
	var run Record
	for i := range 3000 {
		s := int64(i) * 1e9
		run.Faults = append(run.Faults, FaultWindow{Name: "latency", Start: s, End: s + 2e9})
		run.Marks = append(run.Marks, Mark{Time: s, Kind: MarkCrash}, Mark{Time: s + 5e8, Kind: MarkRestart})
	}
	ps := plots(run, res)
	for _, p := range ps {
		for _, l := range p.Lines {
			if l.N > maxPoints || strings.Count(string(l.Points), ",") != l.N {
				t.Errorf("%s/%s: %d points (counted %d)", p.ID, l.Name, l.N, strings.Count(string(l.Points), ","))
			}
		}
		if len(p.Bands) > maxBands || len(p.Marks) > 2*maxMarks {
			t.Errorf("%s: %d bands, %d marks", p.ID, len(p.Bands), len(p.Marks))
		}
	}
	if top := ps[0].YTicks[len(ps[0].YTicks)-1].Label; top != "100k" {
		t.Errorf("throughput axis tops at %s: the spike was lost", top)
	}
}

var (
	rawScript   = regexp.MustCompile(`(?i)<script`)
	rawHandler  = regexp.MustCompile(`(?i)<[a-z][^<>]*\son[a-z]+\s*=`)
	rawImgOrSVG = regexp.MustCompile(`(?i)<(img|iframe|object|embed)\b`)
)

// Hostile payloads, error strings, fault details, subscription and
// process names are escaped everywhere: the page has no script element at
// all, no element carries an event handler, and no planted element exists.
func TestHTMLEscapesUntrustedText(t *testing.T) {
	f := fixture{drain: history.OK, hostile: true}
	dir := f.writeRunDir(t)
	run := f.run()
	if err := run.Complete(dir, f.result()); err != nil {
		t.Fatal(err)
	}
	if len(run.Faults) == 0 {
		t.Fatal("no fault window: the hostile fault detail would go untested")
	}
	run.HarnessError = xssScript + "\n" + xssAttr
	run.External = []External{{Workers: []string{"consumer-x-0"}, Command: "./consumer " + xssAttr, Failpoints: []string{xssScript}}}
	var b bytes.Buffer
	if err := HTML(&b, run, f.result()); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if m := rawScript.FindString(page); m != "" {
		t.Errorf("raw %q in the page", m)
	}
	if m := rawHandler.FindString(page); m != "" {
		t.Errorf("event handler attribute in the page: %q", m)
	}
	if m := rawImgOrSVG.FindString(page); m != "" {
		t.Errorf("planted element in the page: %q", m)
	}
	// Every planted string is shown, escaped.
	for _, s := range []string{"&lt;script&gt;alert(", "&lt;img src=x onerror=alert(1)&gt;", "&lt;svg onload=alert(2)&gt;"} {
		if !strings.Contains(page, s) {
			t.Errorf("page does not show %q escaped", s)
		}
	}
	// The stage's words carry the hostile subscription name, escaped.
	for _, s := range []string{"<b>never-delivered</b>", "in the broker, never delivered to email&#39;&#34;&gt;&lt;svg onload=alert(2)&gt;"} {
		if !strings.Contains(page, s) {
			t.Errorf("page does not show where e4 was lost: %q\n%s", s, grepLines(page, "never"))
		}
	}
	if !strings.Contains(page, "Components under test") {
		t.Error("the external component is not shown")
	}
	if !strings.Contains(page, `href="logs/consumer-email%27%22%3e%3csvg%20onload=alert%282%29%3e-0.log"`) {
		t.Errorf("log link not URL-escaped:\n%s", grepLines(page, "href="))
	}
	if t.Failed() {
		p := filepath.Join(t.TempDir(), "report.html")
		os.WriteFile(p, b.Bytes(), 0o644)
		t.Logf("page: %s", p)
	}
}

func mustHistoryFiles(t *testing.T, dir string) []string {
	t.Helper()
	p, err := HistoryFiles(dir)
	if err != nil || len(p) == 0 {
		t.Fatalf("history files in %s: %v %v", dir, p, err)
	}
	return p
}

func grepLines(s, sub string) string {
	var out []string
	for l := range strings.Lines(s) {
		if strings.Contains(l, sub) {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return strings.Join(out, "\n")
}

// A team's consumer that writes no lineage, or acks inside its library,
// has effects but no deliver or ack ops: the page says those were not
// observed instead of showing 0 acked; a subscription whose acks were
// recorded still shows its count.
func TestUnobservedAcksAreNotZero(t *testing.T) {
	f := fixture{drain: history.OK, clean: true}
	res := f.result()
	if len(res.Subscriptions) < 2 {
		t.Fatalf("fixture has %d subscriptions, want 2", len(res.Subscriptions))
	}
	team := &res.Subscriptions[0]
	team.Applied, team.Effects, team.Acked, team.Deliveries, team.Delivered, team.Redelivered = 7, 7, 0, 0, 0, 0
	ours := &res.Subscriptions[1]
	ours.Applied, ours.Effects, ours.Acked, ours.Deliveries, ours.Delivered = 5, 5, 4321, 5, 5
	var b bytes.Buffer
	if err := HTML(&b, f.run(), res); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	_, table, ok := strings.Cut(page, "<h2>Deliveries, redeliveries and dead letters</h2>")
	if !ok {
		t.Fatal("no deliveries table in the page")
	}
	table, _, _ = strings.Cut(table, "</table>")
	rows := regexp.MustCompile(`(?s)<tr>\s*<td>([^<]+)</td>(.*?)</tr>`).FindAllStringSubmatch(table, -1)
	seen := map[string]string{}
	for _, r := range rows {
		if r[1] == team.Name || r[1] == ours.Name {
			if _, dup := seen[r[1]]; !dup {
				seen[r[1]] = r[2]
			}
		}
	}
	if row := seen[team.Name]; !strings.Contains(row, ">not observed<") || !strings.Contains(row, "deliveries not observed") {
		t.Errorf("%s row does not say acks and deliveries were not observed: %q", team.Name, row)
	}
	if row := seen[ours.Name]; strings.Contains(row, "not observed") || !strings.Contains(row, "4,321") {
		t.Errorf("%s row: want its ack count 4,321 and nothing unobserved: %q", ours.Name, row)
	}
}
