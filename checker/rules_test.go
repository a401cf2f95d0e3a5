package checker

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/deliverycheck/deliverycheck/history"
)

// at appends an op at an exact time (the builder's clock moves on from it).
func (b *builder) at(t int64, p string, typ history.Type, f history.F, v history.Value) *builder {
	b.t = t
	b.h = append(b.h, history.Op{Index: int64(len(b.h)), Time: t, Process: p, Type: typ, F: f, Value: v})
	return b
}

func kv(id, sub, key string, version int64) history.Value {
	return history.Value{Event: id, Consumer: sub, Key: key, Version: version}
}

func inboxRow(id, sub string) history.Value {
	return history.Value{Table: history.TableInbox, Event: id, Consumer: sub}
}

// TestIssue19Rules pins each checker rule of issue 19 with the smallest
// history that shows it; every case failed on the checker before.
func TestIssue19Rules(t *testing.T) {
	inv := Guarantees{Subscriptions: []string{"inv"}}
	gapsOnly := Guarantees{Gaps: None, Subscriptions: []string{"inv"}}
	// ok is a committed, consumed and ledgered event, so the run exercised
	// something.
	ok := func(b *builder, id string) *builder {
		return b.commit(id, "k-"+id, 1, history.OK).publish(id).consume(id, "inv")
	}
	tests := []struct {
		name      string
		g         Guarantees
		h         history.History
		valid     Validity
		anomalies map[Kind][]string
		shown     map[Kind][]string
		reason    string // a substring of some reason
		detail    string // a substring of some example's detail
		faults    int64  // Counts.Faults, when checked (-1: not)
	}{
		{
			// Rule 1: a publish-then-commit producer published e1 itself,
			// then its commit went in doubt and the publish was lost: that
			// publish proves nothing about the commit.
			name: "rule 1: producer's own publish before an in-doubt commit",
			g:    inv,
			h: ok(new(builder), "e0").
				op("producer-1", history.Invoke, history.Publish, ev("e1", "k", 1)).op("producer-1", history.Info, history.Publish, ev("e1", "k", 1)).
				commit("e1", "k", 1, history.Info).drain().finalRead(effect("e0", "inv")).h,
			valid: Valid, shown: map[Kind][]string{InDoubt: {":e1"}},
		},
		{
			// ... nor do the deliveries and effects that follow from it.
			name: "rule 1: effects of a producer's own publish do not prove an aborted commit",
			g:    inv,
			h: ok(new(builder), "e0").
				op("producer-1", history.Invoke, history.Publish, ev("e1", "k", 1)).op("producer-1", history.OK, history.Publish, ev("e1", "k", 1)).
				commit("e1", "k", 1, history.Info).deliver("e1", "inv").drain().finalRead(effect("e0", "inv")).h,
			valid: Valid, shown: map[Kind][]string{InDoubt: {":e1"}},
		},
		{
			name:  "rule 2: a drain that ended by quiet leaves what is not applied unseen",
			g:     inv,
			h:     ok(new(builder), "e0").commit("e1", "k", 1, history.OK).op("harness", history.OK, history.Drain, history.Value{Reason: DrainQuiet}).finalRead(effect("e0", "inv")).h,
			valid: Unknown, shown: map[Kind][]string{Unseen: {"inv:e1"}}, reason: "quiet",
		},
		{
			name:  "rule 2: a quiet drain with everything applied is valid",
			g:     inv,
			h:     ok(new(builder), "e0").op("harness", history.OK, history.Drain, history.Value{Reason: DrainQuiet}).finalRead(effect("e0", "inv")).h,
			valid: Valid,
		},
		{
			// Rule 3: c-b's apply of v2 is done at t=10000 and c-c's apply
			// of v1 begins at t=10000: equal times of two processes are
			// not ordered, whatever order the merged file puts them in.
			name: "rule 3: equal timestamps from different processes are not ordered",
			g:    Guarantees{Order: PerKey, Subscriptions: []string{"inv"}},
			h: new(builder).commit("e1", "k", 1, history.OK).commit("e2", "k", 2, history.OK).
				at(9000, "c-b", history.Invoke, history.Apply, kv("e2", "inv", "k", 2)).
				at(10000, "c-b", history.OK, history.Apply, kv("e2", "inv", "k", 2)).
				at(10000, "c-c", history.Invoke, history.Apply, kv("e1", "inv", "k", 1)).
				at(11000, "c-c", history.OK, history.Apply, kv("e1", "inv", "k", 1)).
				drain().finalRead(effect("e2", "inv"), effect("e1", "inv")).h,
			valid: Valid,
		},
		{
			// Apply ops in order, but the ledger's commit times say v1
			// committed after v2: commit time wins.
			name: "rule 3: order by commit_time, not apply ops",
			g:    Guarantees{Order: PerKey, Subscriptions: []string{"inv"}},
			h: new(builder).commit("e1", "k", 1, history.OK).commit("e2", "k", 2, history.OK).
				consume("e1", "inv").consume("e2", "inv").drain().
				finalRead(timed(effect("e1", "inv"), 50000), timed(effect("e2", "inv"), 40000)).h,
			valid: Invalid, anomalies: map[Kind][]string{OrderRegression: {"inv:e1"}, Gap: {"inv:e1"}},
		},
		{
			name: "rule 3: a ledger without commit_time or apply ops cannot be ordered",
			g:    Guarantees{Order: PerKey, Subscriptions: []string{"inv"}},
			h: new(builder).commit("e1", "k", 1, history.OK).commit("e2", "k", 2, history.OK).drain().
				finalRead(effect("e2", "inv"), effect("e1", "inv")).h,
			valid: Unknown, reason: "order in inv not judged",
		},
		{
			// Rule 4: a team consumer (ledger only) applied v2 before v1.
			name: "rule 4: gap found from what was applied",
			g:    gapsOnly,
			h: new(builder).commit("e1", "k", 1, history.OK).commit("e2", "k", 2, history.OK).drain().
				finalRead(timed(effect("e2", "inv"), 40000), timed(effect("e1", "inv"), 50000)).h,
			valid: Invalid, anomalies: map[Kind][]string{Gap: {"inv:e1"}, OrderRegression: {"inv:e1"}}, detail: "version 1 applied after version 2",
		},
		{
			// A version guard that marked the inbox and wrote no effect
			// for v1, v2 being applied: skipped, a gap, not lost.
			name: "rule 4: inbox mark without effect under a later version is a skip",
			g:    gapsOnly,
			h: new(builder).commit("e1", "k", 1, history.OK).commit("e2", "k", 2, history.OK).drain().
				finalRead(timed(effect("e2", "inv"), 40000), inboxRow("e2", "inv"), inboxRow("e1", "inv")).h,
			valid: Invalid, anomalies: map[Kind][]string{Gap: {"inv:e1"}}, shown: map[Kind][]string{StaleSkipped: {"inv:e1"}},
		},
		{
			name: "rule 5: a poison event applied",
			g:    inv,
			h: new(builder).op("producer-1", history.OK, history.Commit, history.Value{Event: "p1", Poison: true}).
				consume("p1", "inv").drain().finalRead(effect("p1", "inv")).h,
			valid: Invalid, anomalies: map[Kind][]string{PoisonApplied: {"inv:p1"}},
		},
		{
			name: "rule 6: an inbox mark without its effect, an effect without its inbox mark",
			g:    inv,
			h: ok(ok(ok(new(builder), "e0"), "e1"), "e2").drain().
				finalRead(effect("e0", "inv"), inboxRow("e0", "inv"), effect("e1", "inv"), inboxRow("e2", "inv")).h,
			valid: Invalid, anomalies: map[Kind][]string{InboxMismatch: {"inv:e1", "inv:e2"}, Lost: {"inv:e2"}},
		},
		{
			name: "rule 6: stale skips and dead letters mark the inbox without an effect",
			g:    inv,
			h: new(builder).commit("e1", "k", 1, history.OK).commit("e2", "k", 2, history.OK).
				consume("e2", "inv").op("consumer-inv", history.OK, history.SkipStale, sv("e1", "inv")).
				op("producer-1", history.OK, history.Commit, history.Value{Event: "p1", Poison: true}).
				op("consumer-inv", history.OK, history.DLQ, sv("p1", "inv")).drain().
				finalRead(effect("e2", "inv"), inboxRow("e2", "inv"), inboxRow("e1", "inv"), inboxRow("p1", "inv")).h,
			valid: Valid, anomalies: map[Kind][]string{Gap: {"inv:e1"}}, shown: map[Kind][]string{StaleSkipped: {"inv:e1"}},
		},
		{
			name: "rule 9: only the final-read attempt that completed counts",
			g:    inv,
			h: func() history.History {
				b := ok(new(builder), "e0").drain()
				b.op("harness", history.Invoke, history.FinalRead, history.Value{}).op("harness", history.OK, history.FinalRead, effect("e0", "inv")).
					op("harness", history.Fail, history.FinalRead, history.Value{Error: "connection reset"})
				return b.finalRead(effect("e0", "inv")).h
			}(),
			valid: Valid,
		},
		{
			name:  "rule 9: a final read started again and cut is incomplete",
			g:     inv,
			h:     ok(new(builder), "e0").drain().finalRead(effect("e0", "inv")).op("harness", history.Invoke, history.FinalRead, history.Value{}).h,
			valid: Unknown, reason: "final read incomplete",
		},
		{
			name:  "rule 10: apply ok without an effect row is lost",
			g:     inv,
			h:     ok(new(builder), "e0").drain().finalRead().h,
			valid: Invalid, anomalies: map[Kind][]string{Lost: {"inv:e0"}}, detail: "apply ok but no effect in the ledger",
		},
		{
			name:  "nothing exercised: every commit failed",
			g:     inv,
			h:     new(builder).commit("e1", "k", 1, history.Fail).drain().finalRead().h,
			valid: Unknown, reason: "nothing was exercised: no commit took effect",
		},
		{
			name: "a scheduled fault that did not take effect",
			g:    inv,
			h: ok(new(builder), "e0").
				op("nemesis", history.Invoke, history.Fault, history.Value{Fault: "failpoint", Target: "relay-0", Detail: "at 1s: failpoint relay.before-publish"}).
				op("nemesis", history.Fail, history.Fault, history.Value{Fault: "failpoint", Target: "relay-0", Detail: "at 1s: failpoint relay.before-publish", Error: "failpoint relay.before-publish armed in relay-0 never hit"}).
				op("nemesis", history.Invoke, history.Fault, history.Value{Fault: "kill", Target: "relay-0", Detail: "at 2s: kill relay-0"}).
				op("nemesis", history.OK, history.Fault, history.Value{Fault: "kill", Target: "relay-0", Detail: "at 2s: kill relay-0", Evidence: "relay-0 exited: signal: killed"}).
				drain().finalRead(effect("e0", "inv")).h,
			valid: Unknown, reason: "scheduled fault at 1s: failpoint relay.before-publish did not take effect: failpoint relay.before-publish armed in relay-0 never hit", faults: 1,
		},
		{
			name: "random faults: one that bit is enough, one that did not is not counted",
			g:    inv,
			h: ok(new(builder), "e0").
				op("nemesis", history.Invoke, history.Fault, history.Value{Fault: "partition", Target: "kafka", Reason: "random"}).
				op("nemesis", history.Fail, history.Fault, history.Value{Fault: "partition", Target: "kafka", Reason: "random", Error: "no traffic crossed link kafka"}).
				op("nemesis", history.Invoke, history.Fault, history.Value{Fault: "kill", Target: "relay-0", Reason: "random"}).
				op("nemesis", history.Info, history.Fault, history.Value{Fault: "kill", Target: "relay-0", Reason: "random", Error: "restart failed"}).
				drain().finalRead(effect("e0", "inv")).h,
			valid: Valid, faults: 1,
		},
		{
			name: "random faults: none took effect",
			g:    inv,
			h: ok(new(builder), "e0").
				op("nemesis", history.Invoke, history.Fault, history.Value{Fault: "partition", Target: "kafka", Reason: "random"}).
				op("nemesis", history.Fail, history.Fault, history.Value{Fault: "partition", Target: "kafka", Reason: "random", Error: "no traffic crossed link kafka"}).
				drain().finalRead(effect("e0", "inv")).h,
			valid: Unknown, reason: "no random fault took effect", faults: 0,
		},
		{
			name: "broker dead-letter queue explains a loss",
			g:    inv,
			h: ok(new(builder), "e0").commit("e1", "k", 1, history.OK).publish("e1").deliver("e1", "inv").drain().
				finalRead(effect("e0", "inv"), history.Value{Table: history.TableBrokerDLQ, Event: "e1", Consumer: "inv", Attempt: 20, Reason: "delivery-limit"}).h,
			valid: Invalid, anomalies: map[Kind][]string{Lost: {"inv:e1"}}, detail: "in the broker's dead-letter queue after 20 deliveries",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Check(tt.h, Options{Guarantees: tt.g})
			wantOutcome(t, r, tt.valid, tt.anomalies, tt.shown)
			if tt.reason != "" && !slices.ContainsFunc(r.Reasons, func(s string) bool { return strings.Contains(s, tt.reason) }) {
				t.Errorf("reasons %q do not say %q", r.Reasons, tt.reason)
			}
			if tt.detail != "" && !slices.ContainsFunc(r.Anomalies, func(an Anomaly) bool {
				return slices.ContainsFunc(an.Examples, func(ex Example) bool { return strings.Contains(ex.Detail, tt.detail) })
			}) {
				t.Errorf("no example says %q: %+v", tt.detail, r.Anomalies)
			}
			if strings.Contains(tt.name, "fault") && r.Counts.Faults != tt.faults {
				t.Errorf("Counts.Faults = %d, want %d (%+v)", r.Counts.Faults, tt.faults, r.Faults)
			}
		})
	}
}

// TestFaultsReported: each fault window comes out with its outcome and
// evidence, for the report.
func TestFaultsReported(t *testing.T) {
	b := new(builder).commit("e0", "k", 1, history.OK).consume("e0", "inv").
		op("nemesis", history.OK, history.Fault, history.Value{Fault: "schedule", Detail: "seed=1: at 1s: kill relay-0"}).
		op("nemesis", history.Invoke, history.Fault, history.Value{Fault: "kill", Target: "relay-0", Detail: "at 1s: kill relay-0"}).
		op("nemesis", history.OK, history.Fault, history.Value{Fault: "kill", Target: "relay-0", Detail: "at 1s: kill relay-0", Evidence: "relay-0 exited: signal: killed"}).
		op("nemesis", history.Invoke, history.Fault, history.Value{Fault: "partition", Target: "kafka", Detail: "at 2s: partition"}).
		drain().finalRead(effect("e0", "inv"))
	r := Check(b.h, Options{Guarantees: Guarantees{Subscriptions: []string{"inv"}}})
	want := []Fault{
		{Kind: "kill", Target: "relay-0", Detail: "at 1s: kill relay-0", StartNS: 8000, EndNS: 9000, Outcome: FaultTookEffect, TookEffect: true, Evidence: "relay-0 exited: signal: killed"},
		{Kind: "partition", Target: "kafka", Detail: "at 2s: partition", StartNS: 10000, EndNS: b.t, Outcome: FaultCut},
	}
	if !slices.Equal(r.Faults, want) {
		t.Errorf("faults = %+v\nwant %+v", r.Faults, want)
	}
	if r.Counts.Faults != 1 || r.Valid != Valid {
		t.Errorf("Counts.Faults = %d, %s %v", r.Counts.Faults, r.Valid, r.Reasons)
	}
}

// A heal that does not repeat its step's detail (a hand-written or a
// team's nemesis) still closes the fault its process opened on that
// target, rather than leaving it cut and adding a window of no length.
func TestFaultHealWithoutDetail(t *testing.T) {
	b := new(builder).commit("e0", "k", 1, history.OK).consume("e0", "inv").
		op("nemesis", history.Invoke, history.Fault, history.Value{Fault: "partition", Target: "relay-0", Detail: "relay→broker both ways"}).
		op("nemesis", history.OK, history.Fault, history.Value{Fault: "partition", Target: "relay-0"}).
		drain().finalRead(effect("e0", "inv"))
	r := Check(b.h, Options{Guarantees: Guarantees{Subscriptions: []string{"inv"}}})
	if len(r.Faults) != 1 || r.Faults[0].Outcome != FaultTookEffect || r.Faults[0].Detail != "relay→broker both ways" || r.Counts.Faults != 1 {
		t.Errorf("faults = %+v (counted %d), want one that took effect", r.Faults, r.Counts.Faults)
	}
}

// TestBadInputIsAnError: rules 7 and 8 from files: a typeless op or ids
// that differ only in invalid UTF-8 are bad input, never a verdict.
func TestBadInputIsAnError(t *testing.T) {
	good := new(builder).commit("e1", "k", 1, history.OK).consume("e1", "inv").drain().finalRead(effect("e1", "inv"))
	var buf []byte
	for _, op := range good.h {
		buf = append(op.AppendJSON(buf), '\n')
	}
	for name, line := range map[string]string{
		"typeless apply":  `{"index":99,"time":1,"process":"consumer-inv","f":"apply","value":{"event":"e2","consumer":"inv"}}`,
		"lone surrogates": `{"index":99,"time":1,"process":"consumer-inv","type":"ok","f":"apply","value":{"event":"\ud800","consumer":"inv"}}`,
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "h.jsonl")
			if err := os.WriteFile(p, append([]byte(line+"\n"), buf...), 0o644); err != nil {
				t.Fatal(err)
			}
			r, err := CheckFiles([]string{p}, Options{Guarantees: Guarantees{Subscriptions: []string{"inv"}}})
			var le *history.LineError
			if !errorsAs(err, &le) || le.Line != 1 {
				t.Fatalf("CheckFiles = %v, %v; want a LineError at line 1", r, err)
			}
		})
	}
}

func errorsAs(err error, target any) bool { return err != nil && errors.As(err, target) }
