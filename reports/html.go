package reports

import (
	"embed"
	"fmt"
	"html/template"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/internal/trace"
)

//go:embed report.html.tmpl
var templateFS embed.FS

// parseTemplate parses the embedded report template. It is parsed per call
// (a millisecond) rather than kept in a package variable.
func parseTemplate() (*template.Template, error) {
	t, err := template.New("report.html.tmpl").Funcs(template.FuncMap{
		"num": func(v int64) string { return groupDigits(v) },
		"f1":  func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) },
		"pct": func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) + "%" },
		"add": func(a, b float64) float64 { return a + b },
		"sub": func(a, b float64) float64 { return a - b },
		"div": func(a, b float64) float64 { return a / b },
	}).ParseFS(templateFS, "report.html.tmpl")
	if err != nil {
		return nil, fmt.Errorf("reports: template: %w", err)
	}
	return t, nil
}

// HTML renders the run's report as one self-contained HTML page: inline
// CSS and SVG, no script, no network. Every string from the run or the
// history goes through html/template's contextual escaping, and the page's
// Content-Security-Policy forbids scripts, so a hostile payload, header or
// error text is shown, never run; before that, [inert] makes every string
// valid UTF-8 without controls and cuts it to maxShownText bytes. res may
// be nil when the harness failed before checking.
func HTML(w io.Writer, run Record, res *checker.Result) error {
	t, err := parseTemplate()
	if err != nil {
		return err
	}
	v := newView(run, res)
	inert(&v)
	if err := t.Execute(w, v); err != nil {
		return fmt.Errorf("reports: render html: %w", err)
	}
	return nil
}

// HTMLFile writes the report to path (through a temporary file).
func HTMLFile(path string, run Record, res *checker.Result) error {
	if err := writeFile(path, func(w io.Writer) error { return HTML(w, run, res) }); err != nil {
		return fmt.Errorf("reports: %w", err)
	}
	return nil
}

// view is everything the template shows, computed in Go so tests can
// assert on it (porcupine's visualizationData).
type view struct {
	Title        string
	Verdict      string // valid, invalid, unknown
	Summary      string
	Reasons      []string
	HarnessError string

	Scenario    string
	Description string
	Command     string
	Facts       []kv // run facts: seed, started, duration, drain, final read, ...
	Environment []kv

	Promised      []kv // the guarantee settings
	Checks        []checkRow
	Subscriptions []subRow
	Counts        []kv
	Anomalies     []anomalyView
	Shown         []shownRow
	Plots         []plotView
	Timeline      *timelineView // nil when the history names no server node
	TxnStage      *txnStageView // nil when the history has no transactional stage
	Intruder      *intruderView // nil when the history has no intruder
	Faults        []faultRow
	MoreFaults    int // fault windows beyond the table (all are in results.json)
	// Availability has a row per fault window that took effect (at
	// most maxFaultRows), and AvailabilityNote the definitions in words.
	Availability     []availRow
	AvailabilityNote string
	Processes        []processRow
	External         []externalRow
	Cuts             []string
	// Traces is how the trace context travelled (checker.Traces), nil
	// when no op carried one.
	Traces *traceView

	// Stalls has each subscription's longest stall, Resources each
	// measured process's peak resident set (resources.go).
	Stalls    []stallRow
	Resources []resourceRow
	// Lag is the consumer lag section (lag.go); nil without lag ops.
	Lag *lagView
	// Backlog is the backpressure figures (backlog.go), nil without.
	Backlog *backlogView
	// Redrive has each redriven subscription's outcome (redrive.go);
	// Retries the consumers' retries (retries.go), nil without.
	Redrive []redriveRow
	Retries *retriesView
	// Positions has each subscription's judged Kafka positions
	// (positions.go).
	Positions []positionRow
}

type kv struct{ K, V string }

type checkRow struct {
	Subscription string
	Guarantee    string
	Promised     bool
	Status       string // held, broken, allowed, unknown
	Count        int
	Events       []string
}

type subRow struct {
	Name                               string
	Delivered, Deliveries, Redelivered int64
	Applied, Effects, Acked            int64
	// DeliveriesSeen and AckedSeen are false when the subscription's
	// effects exist but no deliver (or ack) op was recorded: a team's
	// consumer that writes no lineage, or acks inside its library. The
	// report then says "not observed" rather than 0.
	DeliveriesSeen, AckedSeen                 bool
	DeadLettered, Poison, StaleSkipped        int64
	RedeliveryPct, DLQPct                     float64 // of delivered events
	Lost, DuplicateEffect, Unexpected, Unseen int64
}

type anomalyView struct {
	ID           string // anchor
	Kind         string
	Subscription string
	Fatal        bool
	Count        int
	Boundaries   string
	Stages       string // where the lost events were last seen, in words
	Events       []string
	MoreEvents   int
	Examples     []exampleView
}

type exampleView struct {
	Event, Source, Key string
	Version            int64
	Boundary, Detail   string
	// Stage is where a lost event was last seen; StageMeaning says it in
	// words.
	Stage, StageMeaning string
	Chain               []chainStep // commit → publish → deliver → apply → ack, summarised
	Steps               []stepView
	// Topics is, for an anomaly of a transactional stage, its input
	// across the output topics: each record, who wrote it, who read it.
	Topics []topicLine
}

// chainStep is one boundary of an event's lineage with how often it was
// crossed and how.
type chainStep struct {
	Stage   string // commit, publish, deliver, apply, ack, skip-stale, dlq, final-read
	Summary string // "ok", "ok ×2, info", "attempts 1–3"
	Class   string // ok, bad, info
}

type stepView struct {
	Stage, Type, Time, Process, Where, Attempt, Consumer, Note string
	Class                                                      string
}

type shownRow struct {
	Kind, Subscription string
	Count              int
	Events             []string
}

type faultRow struct {
	Name, Target, Start, End, Duration, Detail string
	// Effect says whether the fault bit, with its evidence or error.
	Effect string
	Missed bool
}

// availRow is one fault window's throughput: commits/s and applies/s,
// normal → during, and the recovery after the heal, in words.
type availRow struct {
	Fault, Window                              string
	Commits, CommitsBack, Applies, AppliesBack string
	// CommitsOK and AppliesOK are false when the rate did not recover.
	CommitsOK, AppliesOK bool
}

// newAvailRows lays out res's availability as table rows.
func newAvailRows(res *checker.Result) []availRow {
	var out []availRow
	for _, w := range res.Availability.Windows {
		if len(out) == maxFaultRows || w.Fault < 0 || w.Fault >= len(res.Faults) {
			break
		}
		f := res.Faults[w.Fault]
		row := availRow{Fault: strings.TrimSpace(f.Kind + " " + f.Target), Window: fmtNs(f.StartNS) + " → " + fmtNs(f.EndNS),
			Commits: w.Commits.Rates(), CommitsBack: w.Commits.Back(&res.Availability, f.EndNS), CommitsOK: w.Commits.Recovery != checker.RecoveryNotRecovered,
			Applies: w.Applies.Rates(), AppliesBack: w.Applies.Back(&res.Availability, f.EndNS), AppliesOK: w.Applies.Recovery != checker.RecoveryNotRecovered}
		out = append(out, row)
	}
	return out
}

type externalRow struct {
	Workers, Command, Crashes string
}

type processRow struct {
	Name, Role        string
	Ops               int64
	Crashes, Restarts int
	Log               string
}

// faultEffect says in words whether a fault took effect and what shows it.
func faultEffect(f FaultWindow) string {
	var s string
	switch {
	case f.Missed && f.Random:
		s = "no (not counted: a random fault)"
	case f.Missed:
		s = "no"
	case f.End == 0:
		s = "not known: no heal recorded"
	case f.Evidence != "":
		s = "yes: " + f.Evidence
	case f.Error != "":
		s = "yes, but its heal failed"
	default:
		s = "yes (no evidence recorded)"
	}
	if f.Error != "" {
		s += ": " + f.Error
	}
	return s
}

func newView(run Record, res *checker.Result) view {
	verdict := Judge(run, res)
	checks := Checks(run, res)
	v := view{
		Verdict:      string(verdict.Validity),
		Reasons:      verdict.Reasons,
		Summary:      summary(run, res, checks),
		HarnessError: run.HarnessError,
		Scenario:     run.Scenario,
		Description:  run.Description,
		Command:      run.Command,
	}
	if v.Scenario == "" {
		v.Scenario = "(unnamed run)"
	}
	v.Title = fmt.Sprintf("%s — %s — deliverycheck", strings.ToUpper(v.Verdict), v.Scenario)
	v.Facts = append(v.Facts, kv{"seed", strconv.FormatInt(run.Seed, 10)})
	if !run.Started.IsZero() {
		v.Facts = append(v.Facts, kv{"started", run.Started.UTC().Format(time.RFC3339)})
	}
	if !run.Started.IsZero() && !run.Finished.IsZero() {
		v.Facts = append(v.Facts, kv{"wall time", run.Finished.Sub(run.Started).Round(time.Millisecond).String()})
	}
	e := run.Environment
	for _, p := range []kv{{"runtime", e.Runtime}, {"harness", e.Harness}, {"go", e.Go}, {"os", e.OS}} {
		if p.V != "" {
			v.Environment = append(v.Environment, p)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(e.Servers)) {
		ver := e.Servers[name]
		if img := e.Images[name]; img != "" {
			ver += " (image " + img + ")"
		}
		v.Environment = append(v.Environment, kv{name, ver})
	}
	for _, c := range checks {
		v.Checks = append(v.Checks, checkRow{Subscription: c.Subscription, Guarantee: c.Guarantee, Promised: c.Promised, Status: string(c.Status), Count: c.Count, Events: c.Events[:min(len(c.Events), 3)]})
	}
	for i, f := range run.Faults {
		if i == maxFaultRows {
			v.MoreFaults = len(run.Faults) - i
			break
		}
		row := faultRow{Name: f.Name, Target: f.Target, Start: fmtNs(f.Start), Detail: f.Detail, End: "never healed", Effect: faultEffect(f), Missed: f.Missed}
		if f.End > 0 {
			row.End, row.Duration = fmtNs(f.End), time.Duration(f.End-f.Start).Round(time.Millisecond).String()
		}
		v.Faults = append(v.Faults, row)
	}
	for _, e := range run.External {
		v.External = append(v.External, externalRow{Workers: strings.Join(e.Workers, ", "), Command: e.Command, Crashes: e.Crashes()})
	}
	for _, p := range run.Processes {
		v.Processes = append(v.Processes, processRow{Name: p.Name, Role: p.Role, Ops: p.Ops, Crashes: p.Crashes, Restarts: p.Restarts, Log: p.Log})
	}
	g := run.Guarantees
	if res == nil {
		v.Promised = promised(g.Normalize())
		return v
	}
	g = res.Guarantees
	v.Promised = append(promised(g), limits(g)...)
	v.Facts = append(v.Facts, kv{"drain", res.Facts.Drain}, kv{"final read", res.Facts.FinalRead})
	c := res.Counts
	v.Counts = []kv{
		{"ops", groupDigits(c.Ops)}, {"events", groupDigits(c.Events)}, {"attempted", groupDigits(c.Attempted)},
		{"committed", groupDigits(c.Committed)}, {"acknowledged", groupDigits(c.Acknowledged)}, {"recovered", groupDigits(c.Recovered)},
		{"failed", groupDigits(c.Failed)}, {"in doubt", groupDigits(c.InDoubt)}, {"published", groupDigits(c.Published)},
		{"poison", groupDigits(c.Poison)}, {"faults", groupDigits(c.Faults)}, {"crashes", groupDigits(c.Crashes)}, {"restarts", groupDigits(c.Restarts)},
	}
	for _, s := range res.Subscriptions {
		row := subRow{Name: s.Name, Delivered: s.Delivered, Deliveries: s.Deliveries, Redelivered: s.Redelivered,
			Applied: s.Applied, Effects: s.Effects, Acked: s.Acked, DeadLettered: s.DeadLettered, Poison: c.Poison,
			StaleSkipped: s.StaleSkipped, Lost: s.Lost, DuplicateEffect: s.DuplicateEffect, Unexpected: s.Unexpected, Unseen: s.Unseen}
		row.DeliveriesSeen = s.Deliveries > 0 || s.Applied == 0
		row.AckedSeen = s.Acked > 0 || s.Applied == 0
		if s.Delivered > 0 {
			row.RedeliveryPct = 100 * float64(s.Redelivered) / float64(s.Delivered)
			row.DLQPct = 100 * float64(s.DeadLettered) / float64(s.Delivered)
		}
		v.Subscriptions = append(v.Subscriptions, row)
	}
	for i, a := range res.Anomalies {
		v.Anomalies = append(v.Anomalies, newAnomalyView(i, a))
	}
	for _, a := range res.Shown {
		v.Shown = append(v.Shown, shownRow{Kind: string(a.Kind), Subscription: a.Subscription, Count: a.Count, Events: a.Events[:min(len(a.Events), 5)]})
	}
	for _, cut := range res.Facts.Cuts {
		v.Cuts = append(v.Cuts, cut.String())
	}
	v.Plots = append(plots(run, res), lagPlots(run, res)...)
	v.Lag = newLagView(res)
	v.Timeline = nodeTimeline(res)
	v.TxnStage = newTxnStageView(res.TxnStage)
	v.Intruder = newIntruderView(res.Intruder)
	v.Stalls = newStallRows(res)
	v.Resources = newResourceRows(res)
	v.Backlog = newBacklogView(run, res)
	v.Traces = newTraceView(res.Traces)
	v.Redrive = newRedriveRows(res)
	v.Retries = newRetriesView(res)
	v.Plots = append(v.Plots, retryPlots(run, res)...)
	v.Positions = newPositionRows(res)
	v.Availability = newAvailRows(res)
	if len(v.Availability) > 0 {
		a := res.Availability
		v.AvailabilityNote = fmt.Sprintf("Normal: the median rate over %s windows at the fault-free %s ticks before the fault (the last %s of them). "+
			"Back: the first tick after the heal from which every %s window for %s has at least %.0f%% of normal.",
			time.Duration(a.WindowNS), time.Duration(a.TickNS), time.Duration(a.BaselineNS), time.Duration(a.WindowNS), time.Duration(a.SustainNS), 100*a.RecoveredFraction)
	}
	return v
}

func promised(g checker.Guarantees) []kv {
	subs := strings.Join(g.Subscriptions, ", ")
	if subs == "" {
		subs = "(those seen in the history)"
	}
	return []kv{{"loss", string(g.Loss)}, {"duplicate effects", string(g.DuplicateEffects)}, {"order", string(g.Order)}, {"gaps", string(g.Gaps)}, {"subscriptions", subs}}
}

// maxFaultRows caps the faults table; a long random schedule is in
// results.json and shaded on the plots.
const maxFaultRows = 100

// maxEventsShown caps the event ids listed per anomaly in the page; all of
// them are in results.json.
const maxEventsShown = 20

func newAnomalyView(i int, a checker.Anomaly) anomalyView {
	av := anomalyView{ID: "anomaly-" + strconv.Itoa(i), Kind: string(a.Kind), Subscription: a.Where(), Fatal: a.Fatal, Count: a.Count}
	var bs []string
	for _, b := range a.Boundaries {
		bs = append(bs, fmt.Sprintf("%d after %s", b.Count, b.Boundary))
	}
	av.Boundaries = strings.Join(bs, ", ")
	av.Stages = a.StageSummary()
	av.Events = a.Events[:min(len(a.Events), maxEventsShown)]
	av.MoreEvents = a.Count - len(av.Events)
	stage := slices.Contains(checker.TxnStageKinds(), a.Kind)
	for _, ex := range a.Examples {
		ev := newExampleView(ex, a.Subscription)
		if stage {
			ev.Topics = topicLines(ex.Ops)
		}
		av.Examples = append(av.Examples, ev)
	}
	return av
}

// stageOrder is the pipeline order of the lineage chain.
var stageOrder = []history.F{history.Intrude, history.Commit, history.Publish, history.TxnInput, history.TxnOutput, history.Txn, history.OutputRead,
	history.Deliver, history.Apply, history.SkipStale, history.Ack, history.DLQ, history.FinalRead}

func newExampleView(ex checker.Example, sub string) exampleView {
	e := exampleView{Event: ex.Event, Source: ex.Source, Key: ex.Key, Version: ex.Version, Boundary: string(ex.Boundary), Stage: string(ex.Stage), Detail: ex.Detail}
	if ex.Stage != "" {
		e.StageMeaning = ex.Stage.Meaning(sub)
	}
	type tally struct {
		types    map[history.Type]int
		attempts []int64
	}
	tallies := map[history.F]*tally{}
	var extra []history.F
	for _, op := range ex.Ops {
		st := stepView{Stage: string(op.F), Type: op.Type.String(), Time: fmtNs(op.Time), Process: op.Process, Consumer: op.Value.Consumer, Class: typeClass(op.Type)}
		if op.F == history.FinalRead && op.Value.Table != "" {
			st.Stage = "final-read " + op.Value.Table
		}
		switch {
		case op.Value.Tag != 0:
			st.Where = "tag " + strconv.FormatInt(op.Value.Tag, 10)
		case op.Value.Table == history.TablePartition:
			st.Where = fmt.Sprintf("%s p%d", op.Value.Topic, op.Value.Partition)
		case op.Value.Offset != 0 || op.Value.Partition != 0 || op.F == history.Deliver && op.Value.Tag == 0 || op.Value.Topic != "" && op.Value.Event != "":
			st.Where = strings.TrimSpace(fmt.Sprintf("%s p%d@%d", op.Value.Topic, op.Value.Partition, op.Value.Offset))
		}
		if op.Value.Attempt != 0 {
			st.Attempt = strconv.FormatInt(op.Value.Attempt, 10)
		}
		var notes []string
		if op.Value.Txn != "" {
			notes = append(notes, "txn "+op.Value.Txn)
		}
		switch {
		case op.F == history.TxnOutput || op.F == history.OutputRead || (op.Value.Table == history.TableOutput || op.Value.Table == history.TableAborted) && op.Value.Event != "":
			notes = append(notes, fmt.Sprintf("input p%d@%d", op.Value.InputPartition, op.Value.InputOffset))
		case op.Value.Table == history.TablePartition:
			notes = append(notes, fmt.Sprintf("last stable offset %d, high watermark %d", op.Value.LastStableOffset, op.Value.HighWatermark))
		}
		if id, ok := trace.ID(op.Value.Trace); ok {
			// Enough of the ids to tell one trace, and one hop, from
			// another.
			notes = append(notes, "trace "+id[:8]+" span "+op.Value.Trace[36:44])
		}
		for _, n := range []string{op.Value.Error, op.Value.Reason, op.Value.Detail} {
			if n != "" {
				notes = append(notes, n)
			}
		}
		if op.Value.Version != 0 {
			notes = append(notes, "v"+strconv.FormatInt(op.Value.Version, 10))
		}
		st.Note = strings.Join(notes, "; ")
		e.Steps = append(e.Steps, st)

		if op.Type == history.Invoke && op.F != history.Deliver {
			continue // the completion says how it went
		}
		t := tallies[op.F]
		if t == nil {
			t = &tally{types: map[history.Type]int{}}
			tallies[op.F] = t
			if !slices.Contains(stageOrder, op.F) {
				extra = append(extra, op.F)
			}
		}
		t.types[op.Type]++
		if op.Value.Attempt != 0 && !slices.Contains(t.attempts, op.Value.Attempt) {
			t.attempts = append(t.attempts, op.Value.Attempt)
		}
	}
	for _, f := range append(slices.Clone(stageOrder), extra...) {
		t := tallies[f]
		if t == nil {
			continue
		}
		var parts []string
		class := "ok"
		for _, ty := range []history.Type{history.OK, history.Info, history.Fail, history.Invoke} {
			n := t.types[ty]
			if n == 0 {
				continue
			}
			s := ty.String()
			if ty == history.Invoke {
				s = "no completion"
			}
			if n > 1 {
				s += " ×" + strconv.Itoa(n)
			}
			parts = append(parts, s)
			if ty != history.OK && class == "ok" {
				class = typeClass(ty)
			}
		}
		if len(t.attempts) > 1 {
			slices.Sort(t.attempts)
			parts = append(parts, fmt.Sprintf("attempts %d–%d", t.attempts[0], t.attempts[len(t.attempts)-1]))
		}
		e.Chain = append(e.Chain, chainStep{Stage: string(f), Summary: strings.Join(parts, ", "), Class: class})
	}
	return e
}

func typeClass(t history.Type) string {
	switch t {
	case history.OK:
		return "ok"
	case history.Fail:
		return "bad"
	case history.Invoke:
		return "invoke"
	}
	return "info"
}

// groupDigits formats 1234567 as 1,234,567.
func groupDigits(v int64) string {
	s := strconv.FormatInt(v, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
