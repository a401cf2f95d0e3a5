package reports

import (
	"bytes"
	"encoding/xml"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/internal/backoff"
)

// stormHistory is a run of 16 retriers (4 consumer processes of
// inventory, four events each), every one failing at 1s and retrying
// after wait(its retry) until 6.5s, then applying; and one poison event
// refused up to attempt 7 (the limit is 5) and never dead-lettered.
func stormHistory(wait func(k int) time.Duration) history.History {
	var h history.History
	add := func(t time.Duration, p string, typ history.Type, f history.F, v history.Value) {
		h = append(h, history.Op{Time: int64(t), Process: p, Type: typ, F: f, Value: v})
	}
	add(0, "harness", history.OK, history.Setup, history.Value{Subscriptions: []string{"inventory"}, Attempt: 5})
	var ids []string
	for i := range 16 {
		id := "e" + strconv.Itoa(i)
		ids = append(ids, id)
		p := "consumer-inventory-" + strconv.Itoa(i/4)
		v := history.Value{Event: id, Key: "k" + id, Version: 1, Consumer: "inventory"}
		add(time.Duration(i)*time.Millisecond, "producer-0", history.OK, history.Commit, history.Value{Event: id, Key: "k" + id, Version: 1})
		fail := v
		fail.Error = "begin: connection refused"
		t := time.Second + time.Duration(i)*time.Millisecond
		for k := 0; t < 6500*time.Millisecond; k++ {
			add(t, p, history.Invoke, history.Apply, v)
			add(t+time.Millisecond, p, history.Fail, history.Apply, fail)
			t += time.Millisecond + wait(k)
		}
		add(t, p, history.Invoke, history.Apply, v)
		add(t+time.Millisecond, p, history.OK, history.Apply, v)
	}
	poison := history.Value{Event: "p", Key: "kp", Version: 1, Consumer: "inventory", Poison: true}
	add(20*time.Millisecond, "producer-0", history.OK, history.Commit, history.Value{Event: "p", Key: "kp", Version: 1, Poison: true})
	for a := int64(1); a <= 7; a++ {
		r := poison
		r.Attempt, r.Reason = a, "payload does not match the schema"
		add(time.Duration(a)*time.Second, "consumer-inventory-0", history.Fail, history.Apply, r)
	}
	add(10*time.Second, "harness", history.Info, history.Drain, history.Value{})
	add(10*time.Second, "harness", history.Invoke, history.FinalRead, history.Value{})
	for _, id := range ids {
		add(10*time.Second, "harness", history.OK, history.FinalRead, history.Value{Table: history.TableEffects, Event: id, Consumer: "inventory"})
	}
	add(10*time.Second, "harness", history.OK, history.FinalRead, history.Value{})
	return history.Merge(h)
}

// Retries in step reach every output: the figure and the over-retried
// row in the report, the retries plots, a junit testcase for every
// consumer (failed, with the figure in words) and one per subscription
// for over-retried, and results.json valid against the schema. Jittered
// ones hold.
func TestRetriesReported(t *testing.T) {
	sch := compileSchema(t)
	g, err := checker.ParseGuarantees("effectively-once,max-retry-sync=4")
	if err != nil {
		t.Fatal(err)
	}
	res := checker.Check(stormHistory(func(int) time.Duration { return time.Second }), checker.Options{Guarantees: g})
	if res.Retries == nil || !res.Retries.Measured || res.Retries.Sync <= 4 {
		t.Fatalf("retries %+v, want a figure over 4", res.Retries)
	}
	run := Record{Scenario: "storm", Guarantees: g}
	v := newView(run, res)
	if v.Retries == nil || v.Retries.Class != "bad" || len(v.Retries.Rows) != 1 || v.Retries.Rows[0].Over != 1 || v.Retries.Rows[0].MaxSeen != 7 {
		t.Errorf("retries view %+v", v.Retries)
	}
	var ids []string
	for _, p := range v.Plots {
		ids = append(ids, p.ID)
	}
	if !strings.Contains(strings.Join(ids, " "), "retries retry-sync") {
		t.Errorf("plots %v, want the two retries plots", ids)
	}
	var page bytes.Buffer
	if err := HTML(&page, run, res); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.String(), `<h2 id="retries">Retries</h2>`) {
		t.Error("the page has no Retries section")
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
	if c, ok := got[allConsumers+": "+retryGuarantee]; !ok || c.Failure == nil || !strings.Contains(c.Failure.Message, "retries in step: 16 of 16 retriers") {
		t.Errorf("retry storm testcase %+v", c)
	}
	if c, ok := got["inventory: permanent errors not retried past the limit"]; !ok || c.Failure == nil || !strings.Contains(c.Failure.Message, "1 over-retried") {
		t.Errorf("over-retried testcase %+v", c)
	}
	var b bytes.Buffer
	if err := WriteResultsJSON(&b, run, res); err != nil {
		t.Fatal(err)
	}
	validate(t, sch, b.Bytes())

	rng := rand.New(rand.NewPCG(1, 2))
	jitter := backoff.Policy{Base: 10 * time.Millisecond, Cap: time.Second, Rand: rng}
	res = checker.Check(stormHistory(jitter.Delay), checker.Options{Guarantees: g})
	if res.Retries == nil || !res.Retries.Measured || res.Retries.Sync > 4 {
		t.Errorf("full jitter: retries %+v, want a figure of at most 4", res.Retries)
	}
	for _, c := range Checks(run, res) {
		if c.Kind == checker.RetryStorm && c.Count > 0 {
			t.Errorf("full jitter: %+v, want no retry storm", c)
		}
	}
}
