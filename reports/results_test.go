package reports

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/history"
)

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	sch, err := c.Compile(filepath.Join("..", "docs", "results.schema.json"))
	if err != nil {
		t.Fatalf("docs/results.schema.json: %v", err)
	}
	return sch
}

// Every shape of results.json the package writes validates against the
// published schema; so does a folder's results.json named by
// $DELIVERYCHECK_RUN_DIR (e.g. a real run's).
func TestResultsSchema(t *testing.T) {
	sch := compileSchema(t)
	hostile := fixture{drain: history.OK, hostile: true}
	cases := map[string]func() (Record, *checker.Result){
		"invalid": func() (Record, *checker.Result) { f := fixture{drain: history.OK}; return f.run(), f.result() },
		"valid": func() (Record, *checker.Result) {
			f := fixture{drain: history.OK, clean: true}
			return f.run(), f.result()
		},
		"unknown":   func() (Record, *checker.Result) { f := fixture{drain: history.Info}; return f.run(), f.result() },
		"hostile":   func() (Record, *checker.Result) { return hostile.run(), hostile.result() },
		"no result": func() (Record, *checker.Result) { return Record{Scenario: "x", HarnessError: "boom"}, nil },
		"from a run folder": func() (Record, *checker.Result) {
			run, res, err := ReadRunDir(fixture{drain: history.OK}.writeRunDir(t))
			if err != nil {
				t.Fatal(err)
			}
			return run, res
		},
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			run, res := mk()
			var b bytes.Buffer
			if err := WriteResultsJSON(&b, run, res); err != nil {
				t.Fatal(err)
			}
			validate(t, sch, b.Bytes())
		})
	}
	if dir := os.Getenv("DELIVERYCHECK_RUN_DIR"); dir != "" {
		b, err := os.ReadFile(filepath.Join(dir, ResultsFile))
		if err != nil {
			t.Fatal(err)
		}
		validate(t, sch, b)
	}
}

func validate(t *testing.T, sch *jsonschema.Schema, b []byte) {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(v); err != nil {
		t.Errorf("results.json does not match docs/results.schema.json: %v", err)
	}
}

// The schema rejects what a dashboard must never see: a verdict outside
// the three, a missing version, an unknown field.
func TestResultsSchemaRejects(t *testing.T) {
	sch := compileSchema(t)
	f := fixture{drain: history.OK}
	var b bytes.Buffer
	if err := WriteResultsJSON(&b, f.run(), f.result()); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(m map[string]any){
		"verdict":        func(m map[string]any) { m["verdict"] = "probably-fine" },
		"no version":     func(m map[string]any) { delete(m, "schema_version") },
		"version 2":      func(m map[string]any) { m["schema_version"] = 2 },
		"unknown field":  func(m map[string]any) { m["run"].(map[string]any)["colour"] = "red" },
		"check status":   func(m map[string]any) { m["checks"].([]any)[0].(map[string]any)["status"] = "passed" },
		"result verdict": func(m map[string]any) { m["result"].(map[string]any)["valid"] = true },
	} {
		t.Run(name, func(t *testing.T) {
			var m map[string]any
			if err := json.Unmarshal(b.Bytes(), &m); err != nil {
				t.Fatal(err)
			}
			mutate(m)
			out, _ := json.Marshal(m)
			v, _ := jsonschema.UnmarshalJSON(bytes.NewReader(out))
			if sch.Validate(v) == nil {
				t.Errorf("schema accepted %s", name)
			}
		})
	}
}

// WriteAll then ReadRunDir gives back the run and the result; a folder
// without results.json is checked again from its history; a bare checker
// result (deliverycheck check) is read too.
func TestRunDirRoundTrip(t *testing.T) {
	f := fixture{drain: history.OK}
	dir := f.writeRunDir(t)
	run0, res0, err := ReadRunDir(dir) // no run.json, no results.json: re-check
	if err != nil {
		t.Fatal(err)
	}
	if res0.Valid != checker.Invalid || len(run0.Faults) != 1 || len(run0.Marks) != 2 || run0.Processes[0].Log != "logs/consumer-email-0.log" {
		t.Fatalf("re-checked folder: %s, faults %+v, marks %+v, processes %+v", res0.Valid, run0.Faults, run0.Marks, run0.Processes)
	}

	run := f.run()
	run.Faults, run.Marks, run.Processes = run0.Faults, run0.Marks, run0.Processes
	res := f.result()
	var rj bytes.Buffer
	if err := WriteRunJSON(&rj, run); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, RunFile), rj.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteAll(dir, run, res); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{ResultsFile, HTMLName, JUnitName, LagFile} {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Size() == 0 {
			t.Errorf("%s not written: %v", name, err)
		}
	}
	run2, res2, err := ReadRunDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(run2, run.normalized()) {
		t.Errorf("run read back\n%+v\nwant\n%+v", run2, run.normalized())
	}
	a, _ := json.Marshal(res)
	b, _ := json.Marshal(res2)
	if !bytes.Equal(a, b) {
		t.Errorf("result read back differs")
	}

	// Without results.json, the re-check applies run.json's lag alert.
	os.Rename(filepath.Join(dir, ResultsFile), filepath.Join(dir, ResultsFile+".away"))
	if _, res4, err := ReadRunDir(dir); err != nil || res4.Lag == nil || res4.Lag.Alert == nil || len(res4.Lag.Alerts) != len(res.Lag.Alerts) {
		t.Errorf("re-checked without results.json: %v, lag %+v", err, res4.Lag)
	}

	// A bare checker result, as deliverycheck check writes it.
	bare := t.TempDir()
	var rb bytes.Buffer
	res.WriteJSON(&rb)
	os.WriteFile(filepath.Join(bare, ResultsFile), rb.Bytes(), 0o644)
	run3, res3, err := ReadRunDir(bare)
	if err != nil || res3.Valid != checker.Invalid || run3.Scenario != filepath.Base(bare) {
		t.Errorf("bare result: %v %+v %+v", err, run3, res3)
	}

	if _, _, err := ReadRunDir(t.TempDir()); err == nil {
		t.Errorf("an empty folder read as a run")
	}
}
