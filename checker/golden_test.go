package checker

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// golden is the sidecar of a golden history: name.want.json next to
// name.jsonl or a directory name/ of history files.
type golden struct {
	// Guarantees, as --guarantees takes them.
	Guarantees string `json:"guarantees"`
	// Error, if set, is a substring of the bad-input error CheckFiles must
	// return; the other fields are then not used.
	Error string   `json:"error"`
	Valid Validity `json:"valid"`
	// Anomalies are the kinds found, fatal or not, sorted; Shown the
	// non-anomaly kinds that must be among those shown.
	Anomalies []Kind `json:"anomalies"`
	Shown     []Kind `json:"shown"`
	// Reasons and Details are substrings some reason, or some example's
	// detail, must contain.
	Reasons []string `json:"reasons"`
	Details []string `json:"details"`
	// Stages are the stages lost events were found at, as
	// "subscription:stage", sorted; checked when given.
	Stages []string `json:"stages"`
}

// TestGolden judges every history in testdata/ against its sidecar, as
// porcupine does with its test_data: adding a case is dropping in
// name.jsonl (or a directory name/ of one file per process) and
// name.want.json. See testdata/README.md.
func TestGolden(t *testing.T) {
	c := jsonschema.NewCompiler()
	schema, err := c.Compile(filepath.Join("..", "docs", "results.schema.json") + "#/$defs/result")
	if err != nil {
		t.Fatalf("docs/results.schema.json: %v", err)
	}
	wants, err := filepath.Glob(filepath.Join("testdata", "*.want.json"))
	if err != nil || len(wants) == 0 {
		t.Fatalf("no golden histories in testdata (%v)", err)
	}
	for _, wp := range wants {
		name := strings.TrimSuffix(filepath.Base(wp), ".want.json")
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(wp)
			if err != nil {
				t.Fatal(err)
			}
			var want golden
			if err := json.Unmarshal(b, &want); err != nil {
				t.Fatalf("%s: %v", wp, err)
			}
			paths := historyPaths(t, filepath.Join("testdata", name))
			g, err := ParseGuarantees(want.Guarantees)
			if err != nil {
				t.Fatalf("%s: %v", wp, err)
			}
			r, err := CheckFiles(paths, Options{Guarantees: g})
			if want.Error != "" {
				if err == nil || !strings.Contains(err.Error(), want.Error) {
					t.Fatalf("CheckFiles error = %v, want one saying %q", err, want.Error)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// Every result validates against the published schema.
			var buf bytes.Buffer
			if err := r.WriteJSON(&buf); err != nil {
				t.Fatal(err)
			}
			inst, err := jsonschema.UnmarshalJSON(&buf)
			if err != nil {
				t.Fatal(err)
			}
			if err := schema.Validate(inst); err != nil {
				t.Errorf("result does not match docs/results.schema.json: %v", err)
			}
			if r.Valid != want.Valid {
				t.Errorf("valid = %s, want %s (reasons %q)", r.Valid, want.Valid, r.Reasons)
			}
			var kinds []Kind
			for _, an := range r.Anomalies {
				kinds = append(kinds, an.Kind)
			}
			kinds = slices.Compact(slices.Sorted(slices.Values(kinds)))
			if !slices.Equal(kinds, nonNil(want.Anomalies)) && !(len(kinds) == 0 && len(want.Anomalies) == 0) {
				t.Errorf("anomaly kinds = %v, want %v", kinds, want.Anomalies)
			}
			for _, k := range want.Shown {
				if !slices.ContainsFunc(r.Shown, func(an Anomaly) bool { return an.Kind == k }) {
					t.Errorf("%s not shown: %+v", k, r.Shown)
				}
			}
			for _, s := range want.Reasons {
				if !slices.ContainsFunc(r.Reasons, func(x string) bool { return strings.Contains(x, s) }) {
					t.Errorf("reasons %q do not say %q", r.Reasons, s)
				}
			}
			if want.Stages != nil {
				var stages []string
				for _, an := range r.Anomalies {
					for _, sc := range an.Stages {
						stages = append(stages, an.Subscription+":"+string(sc.Stage))
					}
				}
				slices.Sort(stages)
				if !slices.Equal(stages, want.Stages) {
					t.Errorf("lost at stages %q, want %q", stages, want.Stages)
				}
			}
			for _, s := range want.Details {
				if !slices.ContainsFunc(r.Anomalies, func(an Anomaly) bool {
					return slices.ContainsFunc(an.Examples, func(ex Example) bool { return strings.Contains(ex.Detail, s) })
				}) {
					t.Errorf("no example says %q", s)
				}
			}
		})
	}
}

// historyPaths returns base.jsonl, or the .jsonl files of directory base.
func historyPaths(t *testing.T, base string) []string {
	t.Helper()
	if _, err := os.Stat(base + ".jsonl"); err == nil {
		return []string{base + ".jsonl"}
	}
	paths, err := filepath.Glob(filepath.Join(base, "*.jsonl"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no history for %s: want %s.jsonl or %s/*.jsonl", base, base, base)
	}
	return paths
}
