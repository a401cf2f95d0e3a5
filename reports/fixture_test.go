package reports

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/pipeline/hostile"
)

// Hostile strings planted where untrusted text reaches the report: event
// ids and keys (payload-derived), error strings, fault details, process
// names, the scenario and the command.
const (
	xssScript = `<script>alert("script")</script>`
	xssAttr   = `"><img src=x onerror=alert(1)>`
	xssSub    = `email'"><svg onload=alert(2)>`
)

// Hostile payloads (pipeline/hostile's kinds) as their text reaches a
// report: bytes that are not UTF-8, NUL and control bytes, a reason
// listing 5000 headers, a JSON value nested 20000 deep, and 1 MiB.
var (
	// badUTF8 is a stray continuation byte, an overlong "/" and an
	// encoded surrogate: three ways bytes are not UTF-8.
	badUTF8 = "\xff\xfe\xc0\xaf\xed\xa0\x80"
	// ctrl is NUL, C0 controls (an ANSI escape among them), DEL, a C1
	// control and U+FFFE: none is a character XML 1.0 allows.
	ctrl        = "\x00\x01\x07\x08\x0b\x0c\x1b[2J\x7f\u0085\ufffe"
	manyHeaders = "too many headers: " + headerList(hostile.ManyHeadersCount)
	deepJSON    = "JSON nested deeper than 32: " + strings.Repeat(`{"a":`, hostile.DeepJSONDepth) + "1" + strings.Repeat("}", hostile.DeepJSONDepth)
	// huge is a 1 MiB reason of everything above, markup included.
	huge = strings.Repeat(xssScript+badUTF8+ctrl, 1<<20/len(xssScript+badUTF8+ctrl)+1)[:1<<20]
)

// headerList is n headers as a many-headers message's reason might list
// them.
func headerList(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "x-hostile-%04d=v%d, ", i, i)
	}
	return b.String()
}

// fixture describes a small run of a pipeline with two subscriptions:
// inventory applies event e3 twice after a crash (duplicate effect), the
// email subscription never gets e4 (lost, though the broker's log read
// at the end holds it: never delivered), the relay sits through a
// partition, and e7's commit is in doubt. With intruder (implied by
// hostile) the intruder sends two messages in its fault's window: the
// broker refuses one and accepts the other, which inventory rejects and
// email applies (an unauthorized effect; rejects too when clean). With
// hostile it plants hostile strings in ids, errors, details and names,
// the intruder's event id, kind, refusal and rejection reason among them.
// With payloads (which implies intruder) it plants the hostile payloads
// in those places instead.
type fixture struct {
	drain    history.Type // history.OK, or Info for a timed-out drain
	clean    bool         // no anomaly: e3 once, e4 delivered to email
	hostile  bool
	intruder bool
	payloads bool
}

func (f fixture) ops() history.History {
	email, e4, e5, key5, errText, detail := "email", "e4", "e5", "k5", "unique violation", "relay→broker both ways"
	publishErr := map[string]string{"e2": "confirm timeout"}
	if f.hostile {
		email, e5, key5, errText, detail = xssSub, xssScript, xssAttr, xssScript+xssAttr, xssAttr
	}
	if f.payloads {
		email, e4, e5, key5, errText, detail = "email"+badUTF8+"\x1b", "e4"+badUTF8+ctrl, "e5"+badUTF8+ctrl, ctrl, huge, "both ways "+badUTF8+ctrl
		publishErr[e4] = huge // in the lost event's lineage
	}
	var h history.History
	t := int64(0)
	add := func(dt int64, p string, typ history.Type, fn history.F, v history.Value) {
		t += dt
		h = append(h, history.Op{Index: int64(len(h)), Time: t, Process: p, Type: typ, F: fn, Value: v})
	}
	ms := int64(time.Millisecond)
	// effects is the ledger: one row per apply ok, read back at the end.
	var effects []history.Value
	add(ms, "harness", history.OK, history.Setup, history.Value{Subscriptions: []string{"inventory", email}})
	for _, sub := range []string{"inventory", email} {
		add(0, "harness", history.OK, history.Lineage, history.Value{Consumer: sub})
	}
	events := []struct{ id, key string }{{"e1", "k1"}, {"e2", "k1"}, {"e3", "k2"}, {e4, "k3"}, {e5, key5}, {"e6", "k2"}}
	ver := map[string]int64{}
	versions := map[string]int64{}
	for _, e := range events {
		ver[e.key]++
		versions[e.id] = ver[e.key]
		p := "producer-0"
		add(40*ms, p, history.Invoke, history.Commit, history.Value{Event: e.id, Key: e.key})
		add(5*ms, p, history.OK, history.Commit, history.Value{Event: e.id, Key: e.key, Version: ver[e.key]})
	}
	add(10*ms, "producer-1", history.Invoke, history.Commit, history.Value{Event: "e7", Key: "k9"})
	add(10*ms, "producer-1", history.Info, history.Commit, history.Value{Event: "e7", Key: "k9", Error: "connection reset"})
	add(200*ms, "nemesis", history.Invoke, history.Fault, history.Value{Fault: "partition", Target: "relay-0", Detail: detail})
	for i, e := range events {
		if err, ok := publishErr[e.id]; ok {
			add(20*ms, "relay-0", history.Info, history.Publish, history.Value{Event: e.id, Tag: 11, Attempt: 1, Error: err})
		}
		add(150*ms, "relay-0", history.OK, history.Publish, history.Value{Event: e.id, Tag: int64(12 + i), Attempt: 1})
	}
	add(100*ms, "nemesis", history.OK, history.Fault, history.Value{Fault: "partition", Target: "relay-0"})
	f.lag(add, email, 6)
	for i, e := range events {
		v := versions[e.id]
		for _, sub := range []string{"inventory", email} {
			if sub == email && e.id == e4 && !f.clean {
				continue
			}
			c := "consumer-" + sub + "-0"
			val := history.Value{Event: e.id, Key: e.key, Consumer: sub, Tag: int64(i + 1), Attempt: 1}
			add(30*ms, c, history.OK, history.Deliver, val)
			add(ms, c, history.Invoke, history.Apply, val)
			add(5*ms, c, history.OK, history.Apply, val)
			effects = append(effects, history.Value{Table: history.TableEffects, Event: e.id, Key: e.key, Version: v, Consumer: sub})
			if sub == "inventory" && e.id == "e3" && !f.clean {
				add(ms, "nemesis", history.Info, history.Crash, history.Value{Target: c, Detail: "failpoint consumer.after-commit-before-ack"})
				add(100*ms, "harness", history.OK, history.Restart, history.Value{Target: c})
				val.Attempt = 2
				add(30*ms, c, history.OK, history.Deliver, val)
				add(ms, c, history.Invoke, history.Apply, val)
				add(5*ms, c, history.OK, history.Apply, val)
				effects = append(effects, history.Value{Table: history.TableEffects, Event: e.id, Key: e.key, Version: v, Consumer: sub})
			}
			if sub == email && e.id == "e6" {
				val.Attempt = 2
				add(30*ms, c, history.OK, history.Deliver, val)
				add(ms, c, history.Invoke, history.Apply, val)
				add(5*ms, c, history.Fail, history.Apply, history.Value{Event: e.id, Consumer: sub, Reason: "duplicate", Error: errText})
			}
			add(ms, c, history.OK, history.Ack, history.Value{Event: e.id, Consumer: sub})
		}
	}
	rejections := f.intrude(add, email, &effects)
	f.lag(add, email, 0)
	add(300*ms, "harness", f.drain, history.Drain, history.Value{})
	if f.drain != history.OK {
		return h
	}
	add(ms, "harness", history.Invoke, history.FinalRead, history.Value{})
	for _, e := range events {
		add(ms, "harness", history.OK, history.FinalRead, history.Value{Table: history.TableOutbox, Event: e.id, Key: e.key, Published: true})
	}
	for _, v := range slices.Concat(effects, rejections) {
		add(ms, "harness", history.OK, history.FinalRead, v)
	}
	for _, e := range events {
		add(ms, "harness", history.OK, history.FinalRead, history.Value{Table: history.TableBroker, Event: e.id, Target: "run.events.witness"})
	}
	add(ms, "harness", history.OK, history.FinalRead, history.Value{Table: history.TableBroker, Target: "run.events.witness", Detail: "witness queue read whole: 6 messages"})
	add(ms, "harness", history.OK, history.FinalRead, history.Value{})
	return h
}

// lag writes, at the time of the op before, one lag sample of each
// subscription's queue, and one of email's dead-letter queue.
func (f fixture) lag(add func(int64, string, history.Type, history.F, history.Value), email string, n int64) {
	for _, sub := range []string{"inventory", email} {
		add(0, "harness", history.OK, history.Lag, history.Value{Consumer: sub, Target: "run." + sub, Lag: n})
	}
	add(0, "harness", history.OK, history.Lag, history.Value{Consumer: email, Target: "run." + email + ".dlq", Detail: history.DetailDLQ, Lag: 1})
}

// intrude writes the intruder's fault and messages through add, what
// inventory and email did with them, and their effect rows into effects;
// it returns the rejections' dead-letter rows.
func (f fixture) intrude(add func(int64, string, history.Type, history.F, history.Value), email string, effects *[]history.Value) []history.Value {
	if !f.intruder && !f.hostile && !f.payloads {
		return nil
	}
	ms := int64(time.Millisecond)
	id, kind, reason, refusal := "intruder-type-1-run", "type", `source "/orders" may not emit "AdminGranted"`, "ACCESS_REFUSED"
	if f.hostile {
		id, kind, reason, refusal = "intruder-"+xssScript, xssAttr, xssScript+xssSub, xssAttr+xssScript
	}
	if f.payloads {
		id, kind, reason, refusal = "intruder-"+badUTF8+ctrl, string(hostile.ManyHeaders)+ctrl+badUTF8, manyHeaders, "PRECONDITION_FAILED "+deepJSON
	}
	fault := history.Value{Fault: checker.FaultIntrude, Target: "rabbitmq", Detail: "at 2s: intrude"}
	add(10*ms, "nemesis", history.Invoke, history.Fault, fault)
	forged := history.Value{Event: id, Source: "/orders", Key: "k1", Version: 1000000, Detail: kind}
	add(ms, "intruder", history.Invoke, history.Intrude, forged)
	add(ms, "intruder", history.OK, history.Intrude, forged)
	refused := history.Value{Event: id + "-2", Source: "/orders", Key: "k1", Version: 1000000, Detail: kind}
	add(ms, "intruder", history.Invoke, history.Intrude, refused)
	refused.Error = refusal
	add(ms, "intruder", history.Fail, history.Intrude, refused)
	fault.Evidence = "broker accepted 1 of 2 intruder messages, refused 1: " + refusal
	add(ms, "nemesis", history.OK, history.Fault, fault)
	var rejections []history.Value
	for _, sub := range []string{"inventory", email} {
		c := "consumer-" + sub + "-0"
		v := history.Value{Event: id, Source: "/orders", Key: "k1", Version: 1000000, Consumer: sub, Tag: 99, Attempt: 1}
		add(10*ms, c, history.OK, history.Deliver, v)
		if sub == email && !f.clean {
			add(ms, c, history.Invoke, history.Apply, v)
			add(5*ms, c, history.OK, history.Apply, v)
			*effects = append(*effects, history.Value{Table: history.TableEffects, Event: id, Source: "/orders", Key: "k1", Version: 1000000, Consumer: sub})
		} else {
			d := v
			d.Reason = reason
			add(ms, c, history.OK, history.DLQ, d)
			rejections = append(rejections, history.Value{Table: history.TableDLQ, Event: id, Source: "/orders", Consumer: sub, Reason: reason})
		}
		add(ms, c, history.OK, history.Ack, history.Value{Event: id, Source: "/orders", Consumer: sub})
	}
	return rejections
}

func (f fixture) result() *checker.Result {
	g, _ := checker.ParseGuarantees("ordered-effectively-once")
	return checker.Check(f.ops(), checker.Options{Guarantees: g, LagAlert: f.run().LagAlert})
}

func (f fixture) run() Record {
	r := Record{
		Scenario:    "order-confirmation",
		Description: "order confirmations consumed by inventory and email",
		Seed:        42,
		Command:     "deliverycheck run order-confirmation --seed 42 --runtime local",
		Started:     time.Date(2025, 11, 29, 18, 0, 0, 0, time.UTC),
		Finished:    time.Date(2025, 11, 29, 18, 1, 3, 0, time.UTC),
		Environment: Environment{Runtime: "local", Servers: map[string]string{"postgres": "15.14", "rabbitmq": "3.10.8"}, Harness: "v0.1.0", Go: "go1.26.8", OS: "linux/amd64"},
	}
	r.Guarantees, _ = checker.ParseGuarantees("ordered-effectively-once")
	r.LagAlert = &checker.LagAlert{Threshold: 5}
	if f.hostile {
		r.Scenario = "order" + xssScript
		r.Command = "deliverycheck run '" + xssAttr + "'"
		r.Description = xssAttr
	}
	if f.payloads {
		r.Scenario = "order" + badUTF8 + ctrl
		r.Command = "deliverycheck run '" + ctrl + badUTF8 + "'"
		r.Description = deepJSON
		r.Environment.Servers["rabbitmq"] += badUTF8 + ctrl
		r.HarnessError = huge
		r.CrashLoops = []string{"consumer-email-0 crash-looped; last log lines: " + manyHeaders + badUTF8 + ctrl}
		r.External = []External{{Workers: []string{"consumer-x" + ctrl + "-0"}, Command: "./consumer " + badUTF8 + ctrl, Failpoints: []string{deepJSON}}}
	}
	return r
}

// writeRunDir lays the fixture out as a run folder: history/ (one file per
// process) and logs/, without results.json.
func (f fixture) writeRunDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	per := map[string][]byte{}
	for _, op := range f.ops() {
		per[op.Process] = append(op.AppendJSON(per[op.Process]), '\n')
	}
	for _, d := range []string{HistoryDir, LogsDir} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, b := range per {
		if err := os.WriteFile(filepath.Join(dir, HistoryDir, p+".jsonl"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, LogsDir, p+".log"), []byte("log of "+p+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
