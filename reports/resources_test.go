package reports

import (
	"bytes"
	"encoding/xml"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/history"
)

// resourcesHistory is a run of inventory applying e1..e3, committed at
// 1s..3s: e1 at once, e2 and e3 only at 9s (a stall of 7s), after a kill of its consumer
// from 2s to 8s; and the resources ops of a consumer that peaks at
// 400 MiB and of a process with a hostile name.
func resourcesHistory(hostile string) history.History {
	var h history.History
	add := func(ms int64, p string, typ history.Type, f history.F, v history.Value) {
		h = append(h, history.Op{Index: int64(len(h)), Time: ms * int64(time.Millisecond), Process: p, Type: typ, F: f, Value: v})
	}
	add(0, "harness", history.OK, history.Setup, history.Value{Subscriptions: []string{"inventory"}})
	for i, id := range []string{"e1", "e2", "e3"} {
		add(int64(i+1)*1000, "producer-0", history.OK, history.Commit, history.Value{Event: id, Key: "k" + id, Version: 1})
		if i == 0 {
			add(1100, "consumer-inventory-0", history.OK, history.Apply, history.Value{Event: id, Key: "k" + id, Version: 1, Consumer: "inventory"})
		}
	}
	kill := history.Value{Fault: "kill", Target: "consumer-inventory-0", Detail: "at 2s: kill consumer-inventory-0"}
	add(2000, "nemesis", history.Invoke, history.Fault, kill)
	add(2500, "harness", history.OK, history.Resources, history.Value{Target: "consumer-inventory-0", RSS: 300 << 20})
	add(2600, "harness", history.OK, history.Resources, history.Value{Target: "consumer-inventory-0", RSS: 400 << 20})
	add(2700, "harness", history.OK, history.Resources, history.Value{Target: hostile, RSS: 20 << 20})
	kill.Evidence = "consumer-inventory-0 exited: signal: killed"
	add(8000, "nemesis", history.OK, history.Fault, kill)
	for _, id := range []string{"e2", "e3"} {
		add(9000, "consumer-inventory-0", history.OK, history.Apply, history.Value{Event: id, Key: "k" + id, Version: 1, Consumer: "inventory"})
	}
	add(10000, "harness", history.OK, history.Drain, history.Value{})
	add(10100, "harness", history.Invoke, history.FinalRead, history.Value{})
	for _, id := range []string{"e1", "e2", "e3"} {
		add(10200, "harness", history.OK, history.FinalRead, history.Value{Table: history.TableEffects, Event: id, Consumer: "inventory"})
	}
	add(10300, "harness", history.OK, history.FinalRead, history.Value{})
	return h
}

// The stalls and the peaks reach every output: the report's tables
// (hostile names escaped), a junit testcase per promised guarantee, and
// results.json (valid against the schema); without the guarantees they
// are shown and nothing is judged.
func TestResourcesReported(t *testing.T) {
	sch := compileSchema(t)
	h := resourcesHistory(xssScript)
	for _, tc := range []struct {
		name, guarantees string
		verdict          checker.Validity
		junit            map[string]string
	}{
		{"not promised", "effectively-once", checker.Valid, map[string]string{"inventory: no loss": "pass"}},
		{"promised and broken", "effectively-once,max-stall=5s,max-rss=256MiB", checker.Invalid, map[string]string{
			"inventory: " + stallGuarantee:             "failure",
			"consumer-inventory-0: " + memoryGuarantee: "failure",
			xssScript + ": " + memoryGuarantee:         "pass",
		}},
		{"promised and held", "effectively-once,max-stall=10s,max-rss=1GiB", checker.Valid, map[string]string{
			"inventory: " + stallGuarantee:             "pass",
			"consumer-inventory-0: " + memoryGuarantee: "pass",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := checker.ParseGuarantees(tc.guarantees)
			if err != nil {
				t.Fatal(err)
			}
			res := checker.Check(h, checker.Options{Guarantees: g})
			run := Record{Scenario: "resources", Guarantees: g}
			if res.Valid != tc.verdict {
				t.Fatalf("verdict %s %q, want %s", res.Valid, res.Reasons, tc.verdict)
			}
			v := newView(run, res)
			if len(v.Stalls) != 1 || v.Stalls[0].Longest != "7s" || v.Stalls[0].Span != "2.000s – 9.000s" || v.Stalls[0].Pending != 2 ||
				v.Stalls[0].Faults != "at 2s: kill consumer-inventory-0" {
				t.Errorf("stalls %+v", v.Stalls)
			}
			if len(v.Resources) != 2 || v.Resources[0].Process != xssScript || v.Resources[1].Peak != "400.0 MiB" {
				t.Errorf("resources %+v", v.Resources)
			}
			var page bytes.Buffer
			if err := HTML(&page, run, res); err != nil {
				t.Fatal(err)
			}
			_, section, ok := strings.Cut(page.String(), `<h2 id="resources">Stalls and memory</h2>`)
			if !ok {
				t.Fatal("the page has no Stalls and memory section")
			}
			section, _, _ = strings.Cut(section, "<h2")
			for _, s := range []string{"7s", "400.0 MiB", "&lt;script&gt;alert(&#34;script&#34;)&lt;/script&gt;"} {
				if !strings.Contains(section, s) {
					t.Errorf("the section lacks %q:\n%s", s, section)
				}
			}
			if m := rawScript.FindString(page.String()); m != "" {
				t.Errorf("raw %q in the page", m)
			}
			var j bytes.Buffer
			if err := JUnit(&j, run, res); err != nil {
				t.Fatal(err)
			}
			var suites xSuites
			if err := xml.Unmarshal(j.Bytes(), &suites); err != nil {
				t.Fatal(err)
			}
			got := map[string]xCase{}
			for _, c := range suites.Suites[0].Cases {
				got[c.Name] = c
			}
			for name, want := range tc.junit {
				c, ok := got[name]
				if !ok {
					t.Errorf("no testcase %q", name)
					continue
				}
				if o := outcome(c); o != want {
					t.Errorf("%s: %s, want %s", name, o, want)
				}
			}
			if c, ok := got["inventory: "+stallGuarantee]; ok && c.Failure != nil {
				if !strings.Contains(c.Failure.Message, "settled nothing for 7s") || !strings.Contains(c.Failure.Body, "at 2s: kill consumer-inventory-0") {
					t.Errorf("stall failure %+v", c.Failure)
				}
			}
			if c, ok := got["consumer-inventory-0: "+memoryGuarantee]; ok && c.Failure != nil && !strings.Contains(c.Failure.Message, "peaked at 400.0 MiB") {
				t.Errorf("memory failure %+v", c.Failure)
			}
			if tc.name == "not promised" {
				for name := range got {
					if strings.Contains(name, stallGuarantee) || strings.Contains(name, memoryGuarantee) {
						t.Errorf("testcase %q for a guarantee not promised", name)
					}
				}
			}
			var b bytes.Buffer
			if err := WriteResultsJSON(&b, run, res); err != nil {
				t.Fatal(err)
			}
			validate(t, sch, b.Bytes())
			for _, s := range []string{`"stalls": [`, `"resources": [`} {
				if !strings.Contains(b.String(), s) {
					t.Errorf("results.json lacks %s", s)
				}
			}
		})
	}
}

// max-rss with nothing measured is a check not established.
func TestMemoryNotMeasured(t *testing.T) {
	var h history.History
	for _, op := range resourcesHistory("x") {
		if op.F != history.Resources {
			op.Index = int64(len(h))
			h = append(h, op)
		}
	}
	g, _ := checker.ParseGuarantees("max-rss=1GiB")
	res := checker.Check(h, checker.Options{Guarantees: g})
	cs := Checks(Record{Guarantees: g}, res)
	last := cs[len(cs)-1]
	if res.Valid != checker.Unknown || last.Subscription != allProcesses || last.Guarantee != memoryGuarantee || last.Status != NotEstablished {
		t.Errorf("%s %q; last check %+v", res.Valid, res.Reasons, last)
	}
}
