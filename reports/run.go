package reports

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/internal/logtail"
	"github.com/deliverycheck/deliverycheck/verdict"
)

// Record is a run's account of itself, beside the checker's findings:
// what ran, where, and what happened to it (faults, crashes, processes).
// run.json holds it, and results.json embeds it. (It is not named Run:
// runner.Run runs one, and a run folder holds more than this.) The
// run command fills it; [Record.FillFromHistory] derives what is missing
// (faults, crashes, processes) from the history, so a folder written by an
// older harness or a test still renders a complete report.
type Record struct {
	// Scenario names the scenario (built-in name or file).
	Scenario    string `json:"scenario"`
	Description string `json:"description,omitempty"`
	// Seed drives the nemesis schedule; with Command it replays the run.
	Seed int64 `json:"seed"`
	// Command is the exact command line that reproduces the run, seed
	// included, as a user would paste it into a shell.
	Command     string      `json:"command,omitempty"`
	Started     time.Time   `json:"started,omitzero"`
	Finished    time.Time   `json:"finished,omitzero"`
	Environment Environment `json:"environment"`
	// Guarantees are what the scenario promised; the checker's result
	// repeats them as it applied them.
	Guarantees checker.Guarantees `json:"guarantees"`
	// LagAlert is the scenario's alert on consumer lag, if any, so a
	// report re-checked from the history says when it would have fired.
	LagAlert *checker.LagAlert `json:"lag_alert,omitempty"`
	// Faults are the nemesis windows, in start order.
	Faults []FaultWindow `json:"faults"`
	// Marks are instant events: crashes and restarts, in time order.
	Marks []Mark `json:"marks"`
	// Processes are every process that took part, sorted by name.
	Processes []Process `json:"processes"`
	// External lists the components that are not deliverycheck's own
	// code (a team's commands, Debezium), and how crash faults reach them.
	External []External `json:"external,omitempty"`
	// HarnessError is set when the harness itself failed (a server did not
	// start, the run was interrupted): the verdict is then at best unknown.
	HarnessError string `json:"harness_error,omitempty"`
	// CrashLoops name each component that kept exiting on its own (no
	// fault and no failpoint killed it), with its last log lines: when the
	// verdict is not valid they are among its reasons, since a drain that
	// timed out behind a crash-looping consumer is explained by it.
	CrashLoops []string `json:"crash_loops,omitempty"`
	// Expect is what the scenario expects of this run (a correct pipeline
	// valid, a known-bad one caught); nil when it states nothing.
	Expect *verdict.Expectation `json:"expect,omitempty"`
	// Load is the scenario's rate timeline on the history's clock, for
	// the backlog plots; Prefetch each RabbitMQ consumer process's
	// prefetch window (0 on Kafka) and ConsumerBatch the most deliveries
	// a consumer applies in one transaction when the scenario sets it:
	// what a consumer may hold, beside what it held (docs/results.md,
	// Backlog).
	Load          []LoadStep `json:"load,omitempty"`
	Prefetch      int        `json:"prefetch,omitempty"`
	ConsumerBatch int        `json:"consumer_batch,omitempty"`
}

// LoadStep is one step of the rate timeline: each producer at Rate ops
// per second from AtNS (ns since the run started), for ForNS (0: until
// the next step or the end).
type LoadStep struct {
	AtNS  int64   `json:"at_ns"`
	Rate  float64 `json:"rate"`
	ForNS int64   `json:"for_ns,omitempty"`
}

// Environment is where the run ran, exactly enough to tell two runs apart.
type Environment struct {
	Runtime string `json:"runtime,omitempty"` // local, containers or external
	// Servers maps a server (postgres, kafka, rabbitmq) to its exact
	// version as the server reported it.
	Servers map[string]string `json:"servers,omitempty"`
	// Images maps a server to the container image it ran from, on the
	// containers runtime.
	Images  map[string]string `json:"images,omitempty"`
	Harness string            `json:"harness,omitempty"` // deliverycheck version (module version or VCS revision)
	Go      string            `json:"go,omitempty"`      // Go toolchain that built the harness
	OS      string            `json:"os,omitempty"`      // GOOS/GOARCH and kernel, free text
}

// FaultWindow is one fault from its start to its heal, in nanoseconds
// since the run started (the history's clock). End is 0 when the history
// has no heal for it: it then lasted to the end of the run.
type FaultWindow struct {
	Name   string `json:"name"`
	Target string `json:"target,omitempty"`
	Detail string `json:"detail,omitempty"`
	Start  int64  `json:"start_ns"`
	End    int64  `json:"end_ns,omitempty"`
	// Evidence is what showed the fault took effect, from its heal op.
	Evidence string `json:"evidence,omitempty"`
	// Missed says it did not take effect (not injected, or in place and
	// never bit); Error says why, or why its heal failed.
	Missed bool   `json:"missed,omitempty"`
	Error  string `json:"error,omitempty"`
	// Random says the step came from the seeded random schedule.
	Random bool `json:"random,omitempty"`
}

// Mark kinds.
const (
	MarkCrash   = "crash"
	MarkRestart = "restart"
)

// Mark is an instant in the run worth a line on the plots.
type Mark struct {
	Time   int64  `json:"time_ns"`
	Kind   string `json:"kind"` // crash or restart
	Target string `json:"target,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// Process is one process of the run: a pipeline worker, the nemesis or the
// harness, or a server.
type Process struct {
	Name     string `json:"name"`
	Role     string `json:"role,omitempty"` // producer, relay, consumer, processor, reader, nemesis, harness, server
	Ops      int64  `json:"ops"`            // history ops it wrote
	Crashes  int    `json:"crashes"`
	Restarts int    `json:"restarts"`
	// OwnCrashes counts the crashes no fault or failpoint caused (the
	// process exited on its own), LastExit the last such exit status.
	OwnCrashes int    `json:"own_crashes,omitempty"`
	LastExit   string `json:"last_exit,omitempty"`
	// Log is the process's log, relative to the run folder
	// (logs/<name>.log), empty when there is none.
	Log string `json:"log,omitempty"`
}

// External is one component under test that deliverycheck did not write.
type External struct {
	// Workers are the worker names it runs as (relay-0, consumer-x-0).
	Workers []string `json:"workers"`
	// Command is what starts it.
	Command string `json:"command"`
	// Failpoints are the crash windows it marks with failpoint.Inject;
	// none means crash faults on it are SIGKILLs at random points.
	Failpoints []string `json:"failpoints,omitempty"`
}

// Crashes says how crash faults reach the component, for a reader.
func (e External) Crashes() string {
	if len(e.Failpoints) == 0 {
		return "no failpoints declared: crash faults on it are SIGKILLs at random points"
	}
	return "failpoints: " + strings.Join(e.Failpoints, ", ")
}

// File names inside a run folder.
const (
	RunFile     = "run.json"
	ResultsFile = "results.json"
	HTMLName    = "report.html"
	JUnitName   = "junit.xml"
	HistoryDir  = "history"
	LogsDir     = "logs"
)

// WriteRunJSON writes run as indented JSON (run.json). The run command
// writes it when the run starts and again when it ends, so a harness that
// dies half-way still leaves what it was doing.
func WriteRunJSON(w io.Writer, run Record) error {
	b, err := json.MarshalIndent(run.normalized(), "", "  ")
	if err != nil {
		return fmt.Errorf("reports: run.json: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// normalized gives nil slices as empty ones, so the JSON has [] rather
// than null where the schema promises an array.
func (r Record) normalized() Record {
	if r.Faults == nil {
		r.Faults = []FaultWindow{}
	}
	if r.Marks == nil {
		r.Marks = []Mark{}
	}
	if r.Processes == nil {
		r.Processes = []Process{}
	}
	r.Guarantees = r.Guarantees.Normalize()
	return r
}

// HistoryFiles lists the run folder's history files (history/*.jsonl,
// or *.jsonl at the top for a folder written by `deliverycheck check`).
func HistoryFiles(dir string) ([]string, error) {
	var paths []string
	for _, pat := range []string{filepath.Join(dir, HistoryDir, "*.jsonl"), filepath.Join(dir, "*.jsonl")} {
		m, err := filepath.Glob(pat)
		if err != nil {
			return nil, fmt.Errorf("reports: %w", err)
		}
		paths = append(paths, m...)
	}
	slices.Sort(paths)
	return paths, nil
}

// ReadRunDir reads a run folder back: run.json (else the run embedded in
// results.json), and the checker's result from results.json. A folder
// whose results.json is missing is checked again from its history with the
// run's guarantees. results.json may also be a bare checker result, as
// `deliverycheck check` writes it. What the run record lacks (faults,
// crashes, processes) is derived from the history when there is one.
func ReadRunDir(dir string) (Record, *checker.Result, error) {
	var run Record
	haveRun := false
	if b, err := os.ReadFile(filepath.Join(dir, RunFile)); err == nil {
		if err := json.Unmarshal(b, &run); err != nil {
			return Record{}, nil, fmt.Errorf("reports: %s: %w", filepath.Join(dir, RunFile), err)
		}
		haveRun = true
	} else if !errors.Is(err, os.ErrNotExist) {
		return Record{}, nil, fmt.Errorf("reports: %w", err)
	}

	var res *checker.Result
	if b, err := os.ReadFile(filepath.Join(dir, ResultsFile)); err == nil {
		env, err := decodeResults(b)
		if err != nil {
			return Record{}, nil, fmt.Errorf("reports: %s: %w", filepath.Join(dir, ResultsFile), err)
		}
		res = env.Result
		if !haveRun && env.Run != nil {
			run, haveRun = *env.Run, true
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return Record{}, nil, fmt.Errorf("reports: %w", err)
	}

	paths, err := HistoryFiles(dir)
	if err != nil {
		return Record{}, nil, err
	}
	if !haveRun && res == nil && len(paths) == 0 {
		return Record{}, nil, fmt.Errorf("reports: %s is not a run folder: no %s, %s or history", dir, RunFile, ResultsFile)
	}
	if !haveRun {
		run.Scenario = filepath.Base(filepath.Clean(dir))
		if res != nil {
			run.Guarantees = res.Guarantees
		}
	}
	if res == nil && len(paths) > 0 {
		if res, err = checker.CheckFiles(paths, checker.Options{Guarantees: run.Guarantees, LagAlert: run.LagAlert}); err != nil {
			return Record{}, nil, fmt.Errorf("reports: check %s: %w", dir, err)
		}
	}
	if err := run.Complete(dir, res); err != nil {
		return Record{}, nil, err
	}
	return run, res, nil
}

// Complete fills in what the run record of the folder dir lacks: its
// fault windows from the checker's result res (which judged whether each
// took effect; nil leaves them as they are), marks, processes and crash
// loops from the folder's history, and each process's log. The run
// command calls it before it writes results.json and the report, and
// `deliverycheck report` when it reads a folder back, so both show the
// same run.
func (r *Record) Complete(dir string, res *checker.Result) error {
	paths, err := HistoryFiles(dir)
	if err != nil {
		return err
	}
	if err := r.FillFromHistory(paths); err != nil {
		return err
	}
	if len(r.Faults) == 0 && res != nil {
		r.Faults = FaultWindows(res)
	}
	r.linkLogs(dir)
	if len(r.CrashLoops) == 0 {
		r.CrashLoops = r.crashLoops(dir)
	}
	return nil
}

// CrashLoopAfter is how many exits nobody caused make a component
// crash-looping: one can be a lost connection, three in a run is a
// component that cannot work.
const CrashLoopAfter = 3

// crashLoops explains each process that crashed on its own at least
// CrashLoopAfter times, with the last lines of its log.
func (r *Record) crashLoops(dir string) []string {
	var out []string
	for _, p := range r.Processes {
		if p.OwnCrashes < CrashLoopAfter {
			continue
		}
		msg := fmt.Sprintf("%s crash-looped: it exited on its own %d times (%d restarts)", p.Name, p.OwnCrashes, p.Restarts)
		if p.LastExit != "" {
			msg += ", last " + p.LastExit
		}
		if p.Log != "" {
			if tail := logTail(filepath.Join(dir, filepath.FromSlash(p.Log)), 5); tail != "" {
				msg += "; last log lines: " + tail
			}
		}
		out = append(out, msg)
	}
	return out
}

// logTail is the last n non-empty lines of a log, each cut to 300 bytes,
// joined with " | ".
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := logtail.Lines(b, n)
	for i, l := range lines {
		if l = strings.TrimSpace(l); len(l) > 300 {
			l = l[:300] + "…"
		}
		lines[i] = l
	}
	return strings.Join(lines, " | ")
}

// decodeResults reads results.json: the versioned envelope, or a bare
// checker result (no schema_version) as `deliverycheck check` writes it.
func decodeResults(b []byte) (Results, error) {
	var probe struct {
		SchemaVersion *int            `json:"schema_version"`
		Valid         json.RawMessage `json:"valid"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return Results{}, err
	}
	if probe.SchemaVersion == nil {
		if probe.Valid == nil {
			return Results{}, errors.New("neither a results envelope (schema_version) nor a checker result (valid)")
		}
		var r checker.Result
		if err := json.Unmarshal(b, &r); err != nil {
			return Results{}, err
		}
		return Results{Result: &r}, nil
	}
	if *probe.SchemaVersion > SchemaVersion {
		return Results{}, fmt.Errorf("schema_version %d is newer than this deliverycheck reads (%d)", *probe.SchemaVersion, SchemaVersion)
	}
	var env Results
	if err := json.Unmarshal(b, &env); err != nil {
		return Results{}, err
	}
	return env, nil
}

// FaultWindows are the fault windows of a checked history, in start
// order, as the checker judged them: whether each took effect, and its
// evidence or error, is the checker's call, made once.
func FaultWindows(res *checker.Result) []FaultWindow {
	out := make([]FaultWindow, 0, len(res.Faults))
	for _, f := range res.Faults {
		w := FaultWindow{Name: f.Kind, Target: f.Target, Detail: f.Detail, Start: f.StartNS, End: f.EndNS,
			Evidence: f.Evidence, Error: f.Error, Missed: f.Outcome == checker.FaultNoEffect, Random: f.Random}
		if f.Outcome == checker.FaultCut {
			w.End = 0 // never healed: it lasted to the end of the run
		}
		out = append(out, w)
	}
	slices.SortStableFunc(out, func(a, b FaultWindow) int { return cmp.Compare(a.Start, b.Start) })
	return out
}

// FillFromHistory derives from the history files what the run record
// lacks: crash and restart marks, and one process per writer with its op
// count and crashes. Fields the run command already filled are kept. It
// reads the history once, keeping only those few ops. (Fault windows come
// from the checker's result: [FaultWindows].)
func (r *Record) FillFromHistory(paths []string) error {
	if len(paths) == 0 || (len(r.Marks) > 0 && len(r.Processes) > 0) {
		return nil
	}
	t := newTimeline()
	_, err := history.ScanFilesOrSort(paths, func() { t = newTimeline() }, func(batch []history.Op) error {
		for i := range batch {
			t.op(&batch[i])
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("reports: read history: %w", err)
	}
	if len(r.Marks) == 0 {
		r.Marks = t.marks
	}
	if len(r.Processes) == 0 {
		r.Processes = t.processes()
	}
	return nil
}

// linkLogs points each process without a log at logs/<name>.log when that
// file exists, and adds a process for every other log in the folder (the
// servers' logs), so the report links every log there is.
func (r *Record) linkLogs(dir string) {
	logs, _ := filepath.Glob(filepath.Join(dir, LogsDir, "*.log"))
	named := map[string]bool{}
	for i := range r.Processes {
		p := &r.Processes[i]
		if p.Log == "" {
			rel := LogsDir + "/" + p.Name + ".log"
			if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(rel))); err == nil {
				p.Log = rel
			}
		}
		named[p.Log] = true
	}
	for _, l := range logs {
		rel := LogsDir + "/" + filepath.Base(l)
		if named[rel] {
			continue
		}
		r.Processes = append(r.Processes, Process{Name: strings.TrimSuffix(filepath.Base(l), ".log"), Role: "log", Log: rel})
	}
	slices.SortFunc(r.Processes, func(a, b Process) int { return strings.Compare(a.Name, b.Name) })
}

// timeline collects the run-level ops of a history.
type timeline struct {
	marks []Mark
	procs map[string]*Process
}

func newTimeline() *timeline {
	return &timeline{procs: map[string]*Process{}}
}

func (t *timeline) proc(name string) *Process {
	p := t.procs[name]
	if p == nil {
		p = &Process{Name: name, Role: roleOf(name)}
		t.procs[name] = p
	}
	return p
}

func (t *timeline) op(op *history.Op) {
	t.proc(op.Process).Ops++
	switch op.F {
	case history.Crash, history.Restart:
		if op.Type != history.OK && op.Type != history.Info {
			return
		}
		kind, target := MarkRestart, op.Value.Target
		if target == "" {
			target = op.Process
		}
		if op.F == history.Crash {
			kind = MarkCrash
			p := t.proc(target)
			p.Crashes++
			// Kills by the nemesis name their fault; a worker's own
			// failpoint names itself in the detail. Anything else is an
			// exit nobody caused.
			if op.Value.Fault == "" && !strings.HasPrefix(op.Value.Detail, "failpoint ") {
				p.OwnCrashes++
				p.LastExit = op.Value.Detail
			}
		} else {
			t.proc(target).Restarts++
		}
		detail := op.Value.Detail
		if detail == "" {
			detail = op.Value.Fault
		}
		if detail == "" {
			detail = op.Value.Reason
		}
		t.marks = append(t.marks, Mark{Time: op.Time, Kind: kind, Target: target, Detail: detail})
	}
}

func (t *timeline) processes() []Process {
	out := make([]Process, 0, len(t.procs))
	for _, p := range t.procs {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b Process) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// roleOf guesses a process's role from the naming convention of
// docs/history.md: producer-1, relay-0, consumer-inventory-1, processor-0
// and reader-0 (a transactional stage's), nemesis, harness.
func roleOf(name string) string {
	for _, r := range []string{"producer", "relay", "consumer", "processor", "reader", "nemesis", "harness"} {
		if name == r || strings.HasPrefix(name, r+"-") {
			return r
		}
	}
	return ""
}
