package runner

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/deliverycheck/deliverycheck/nemesis"
	"github.com/deliverycheck/deliverycheck/reports"
	"github.com/deliverycheck/deliverycheck/scenarios"
)

// TestRunFolderShowsWhatHappened runs a scenario with a worker kill and a
// partition and reads the run folder Run itself wrote, not a fixture:
// results.json and report.html must show both fault windows with their
// evidence, the crash mark and the process table, and say the verdict the
// outcome says.
func TestRunFolderShowsWhatHappened(t *testing.T) {
	s, ok := scenarios.Lookup("kafka-kill-workers")
	if !ok {
		t.Fatal("no kafka-kill-workers")
	}
	s.Nemesis.Timeline = nil
	for _, step := range []string{"at 1s: kill relay-0", "at 1500ms: partition postgres for 1s"} {
		st, err := nemesis.ParseStep(step)
		if err != nil {
			t.Fatal(err)
		}
		s.Nemesis.Timeline = append(s.Nemesis.Timeline, st)
	}
	o := runScenario(t, s, 3, t.TempDir())

	b, err := os.ReadFile(filepath.Join(o.Dir, reports.ResultsFile))
	if err != nil {
		t.Fatal(err)
	}
	var res reports.Results
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if res.Verdict != o.Verdict.Validity || (res.ExpectationMet != nil && *res.ExpectationMet != o.Verdict.Met) {
		t.Errorf("results.json says %s (met %v), the outcome %s (met %v)", res.Verdict, res.ExpectationMet, o.Verdict.Validity, o.Verdict.Met)
	}
	var kinds []string
	for _, f := range res.Run.Faults {
		kinds = append(kinds, f.Name+" "+f.Target)
		if f.End == 0 {
			t.Errorf("fault %s %s has no end", f.Name, f.Target)
		}
		if !f.Missed && f.Evidence == "" {
			t.Logf("fault %s %s took effect with no evidence recorded", f.Name, f.Target)
		}
	}
	for _, want := range []string{"kill relay-0", "partition postgres"} {
		if !slices.Contains(kinds, want) {
			t.Errorf("results.json run.faults = %q, want %q among them", kinds, want)
		}
	}
	crashed := false
	for _, m := range res.Run.Marks {
		crashed = crashed || (m.Kind == reports.MarkCrash && m.Target == "relay-0")
	}
	if !crashed {
		t.Errorf("results.json run.marks has no crash of relay-0: %+v", res.Run.Marks)
	}
	relay := slices.IndexFunc(res.Run.Processes, func(p reports.Process) bool { return p.Name == "relay-0" })
	if relay < 0 || res.Run.Processes[relay].Ops == 0 || res.Run.Processes[relay].Crashes == 0 {
		t.Errorf("results.json run.processes has no relay-0 with ops and a crash: %+v", res.Run.Processes)
	}

	html, err := os.ReadFile(filepath.Join(o.Dir, reports.HTMLName))
	if err != nil {
		t.Fatal(err)
	}
	page := string(html)
	if strings.Contains(page, "No nemesis fault windows were recorded") {
		t.Error("report.html says no fault windows were recorded")
	}
	for _, want := range []string{"<td>partition</td>", "<td>kill</td>", "relay-0", "took effect?"} {
		if !strings.Contains(page, want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	if !strings.Contains(page, strings.ToUpper(string(o.Verdict.Validity))) {
		t.Errorf("report.html does not say %s", strings.ToUpper(string(o.Verdict.Validity)))
	}
}
