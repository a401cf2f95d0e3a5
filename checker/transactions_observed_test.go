package checker

import (
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/deliverycheck/deliverycheck/history"
)

// A team's processor (docs/contract.md, "Processor") need not record
// its transactions: the harness reads each output topic uncommitted
// too, and its aborted rows (what read_committed did not see) stand in
// for the transactions' ops. These tests judge the stage histories of
// transactions_test.go with those rows, with and without the lineage.

// observed rewrites a finished stage history h of s as the harness sees
// a processor that may record nothing: before the final read's closing
// op, an aborted row for each record of s no read_committed reader sees
// and a closing row per output topic (closes says how each closes; nil:
// ok); without lineage, no txn, txn-input or txn-output op.
func observed(h history.History, s *txnHist, lineage bool, closes func(topic string) history.Type) history.History {
	var b builder
	for _, op := range h[:len(h)-1] {
		if !lineage && (op.F == history.Txn || op.F == history.TxnInput || op.F == history.TxnOutput) {
			continue
		}
		b.op(op.Process, op.Type, op.F, op.Value)
	}
	for _, r := range s.records {
		if !r.committed {
			v := s.recValue(r, "")
			v.Table = history.TableAborted
			b.op("harness", history.OK, history.FinalRead, v)
		}
	}
	for _, topic := range stOutputs {
		typ := history.Type(history.OK)
		if closes != nil {
			typ = closes(topic)
		}
		if typ == 0 {
			continue
		}
		v := history.Value{Table: history.TableAborted, Topic: topic, Detail: "read uncommitted to the high-water marks"}
		if typ != history.OK {
			v.Error = "timeout"
		}
		b.op("harness", typ, history.FinalRead, v)
	}
	last := h[len(h)-1]
	b.op(last.Process, last.Type, last.F, last.Value)
	return b.h
}

// onlyCommitted is a stage where every transaction commits: the log
// holds no aborted record.
func onlyCommitted() *txnHist {
	s := newTxnHist(1)
	e1, e2 := s.event("e1", 0, 0), s.event("e2", 0, 1)
	s.transact(history.OK, true, e1, e2)
	s.read(e1, e2)
	s.consume(e1, e2)
	return s
}

func TestStageObserved(t *testing.T) {
	tests := []struct {
		name    string
		h       func() history.History
		valid   Validity
		want    map[Kind][]string
		reason  string // a substring of some reason
		detail  string // a substring of some example's detail
		aborted int64  // aborted records found in invoices
	}{
		{
			name:    "no lineage, aborts seen by the harness: valid",
			h:       func() history.History { s := cleanTxnStage(); return observed(s.finish(stFinal{}), s, false, nil) },
			valid:   Valid,
			aborted: 1,
		},
		{
			name:    "lineage and the harness's rows agree: valid as before",
			h:       func() history.History { s := cleanTxnStage(); return observed(s.finish(stFinal{}), s, true, nil) },
			valid:   Valid,
			aborted: 1,
		},
		{
			name: "lineage without a txn fail, aborts seen by the harness (a transaction killed open and fenced)",
			h: func() history.History {
				s := newTxnHist(1)
				e1, e2 := s.event("e1", 0, 0), s.event("e2", 0, 1)
				s.transact(history.Info, false, e1)
				s.transact(history.OK, true, e1, e2)
				s.read(e1, e2)
				s.consume(e1, e2)
				return observed(s.finish(stFinal{}), s, true, nil)
			},
			valid:   Valid,
			aborted: 1,
		},
		{
			name:   "no lineage, nothing aborted: unknown",
			h:      func() history.History { s := onlyCommitted(); return observed(s.finish(stFinal{}), s, false, nil) },
			valid:  Unknown,
			reason: "transactional stage: no transaction was recorded, and the output topics read uncommitted hold no record the committed read does not",
		},
		{
			name: "no lineage, no uncommitted read: unknown",
			h: func() history.History {
				s := cleanTxnStage()
				return observed(s.finish(stFinal{}), s, false, func(string) history.Type { return 0 })
			},
			valid:   Unknown,
			reason:  "no transaction was recorded, and output topics run.invoices, run.revenue were not read uncommitted whole",
			aborted: 1, // its rows, though no closing row says the read was whole
		},
		{
			name: "no lineage, one topic's uncommitted read failed: unknown",
			h: func() history.History {
				s := cleanTxnStage()
				return observed(s.finish(stFinal{}), s, false, func(topic string) history.Type {
					if topic == stRevenue {
						return history.Info
					}
					return history.OK
				})
			},
			valid:   Unknown,
			reason:  "output topic run.revenue was not read uncommitted whole",
			aborted: 1,
		},
		{
			name: "no lineage, no record visible: unknown",
			h: func() history.History {
				s := cleanTxnStage()
				return observed(s.finish(stFinal{rows: func([]history.Value) []history.Value { return nil }}), s, false, nil)
			},
			valid:   Invalid, // every input is lost, and the facts say so
			want:    map[Kind][]string{OutputLost: {stInvoices + ":e1", stInvoices + ":e2", stInvoices + ":e3", stRevenue + ":e1", stRevenue + ":e2", stRevenue + ":e3"}},
			reason:  "no transaction was recorded, and the final read found no record in the output topics",
			detail:  "no transaction read it",
			aborted: 1,
		},
		{
			name: "no lineage, reader-0 read an aborted record: aborted-visible",
			h: func() history.History {
				s := cleanTxnStage()
				s.b.op("reader-0", history.OK, history.OutputRead, s.recValue(s.records[0], "")) // e1's aborted invoice
				return observed(s.finish(stFinal{}), s, false, nil)
			},
			valid: Invalid, want: map[Kind][]string{AbortedVisible: {stInvoices + ":e1"}},
			detail:  "record p0@0 of run.invoices (input p0@0) read by reader-0, and not visible read_committed after the drain: its transaction aborted",
			aborted: 1,
		},
		{
			name: "no lineage, a subscription consumed an aborted record: aborted-visible",
			h: func() history.History {
				s := cleanTxnStage()
				r := s.records[0]
				s.b.op("consumer-billing-0", history.OK, history.Deliver, history.Value{Event: "e1", Consumer: "billing", Topic: stInvoices, Partition: r.at.partition, Offset: r.at.offset})
				return observed(s.finish(stFinal{}), s, false, nil)
			},
			valid: Invalid, want: map[Kind][]string{AbortedVisible: {stInvoices + ":e1"}},
			detail:  "read by subscription billing",
			aborted: 1,
		},
		{
			name: "lineage, reader-0 read an aborted record: found once, by its transaction",
			h: func() history.History {
				s := cleanTxnStage()
				s.b.op("reader-0", history.OK, history.OutputRead, s.recValue(s.records[0], ""))
				return observed(s.finish(stFinal{}), s, true, nil)
			},
			valid: Invalid, want: map[Kind][]string{AbortedVisible: {stInvoices + ":e1"}},
			detail:  "written by transaction processor-0:0:1 (aborted: abort)",
			aborted: 1,
		},
		{
			name: "no lineage, another record at an aborted position was read: not aborted-visible",
			h: func() history.History {
				s := cleanTxnStage()
				v := s.recValue(s.records[0], "")
				v.InputOffset = 7 // another input's record
				s.b.op("reader-0", history.OK, history.OutputRead, v)
				return observed(s.finish(stFinal{}), s, false, nil)
			},
			valid:   Valid,
			aborted: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.h()
			r := Check(h, Options{Guarantees: strict})
			got := txnFound(r)
			if r.Valid != tt.valid || len(got) != len(tt.want) {
				t.Fatalf("valid %s (reasons %q), found %v, want %s with %v\n%s", r.Valid, r.Reasons, got, tt.valid, tt.want, dump(h))
			}
			for k, want := range tt.want {
				if !slices.Equal(got[k], want) {
					t.Errorf("%s at %v, want %v", k, got[k], want)
				}
			}
			if tt.reason != "" && !slices.ContainsFunc(r.Reasons, func(s string) bool { return strings.Contains(s, tt.reason) }) {
				t.Errorf("no reason says %q: %q", tt.reason, r.Reasons)
			}
			if tt.detail != "" && !slices.ContainsFunc(r.Anomalies, func(an Anomaly) bool {
				return slices.ContainsFunc(an.Examples, func(ex Example) bool { return strings.Contains(ex.Detail, tt.detail) })
			}) {
				t.Errorf("no example says %q: %+v", tt.detail, r.Anomalies)
			}
			for _, an := range r.Anomalies {
				for _, ex := range an.Examples {
					if len(ex.Ops) == 0 {
						t.Errorf("%s: example %s without ops", an.Kind, ex.Event)
					}
				}
			}
			if got := r.TxnStage.Topics[0].Aborted; got != tt.aborted {
				t.Errorf("%d aborted records in %s, want %d", got, r.TxnStage.Topics[0].Topic, tt.aborted)
			}
			if tt.valid == Valid && r.TxnStage.Delivery != ExactlyOnce {
				t.Errorf("stage %+v", r.TxnStage)
			}
		})
	}
}

// A correct stage is judged alike with the processor's lineage or
// without it, once the harness has read the output topics uncommitted:
// valid when a record became visible (something committed), unknown
// when nothing did.
func TestPropertyStageObservedCorrectIsValid(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := genTxnStage(t)
		lineage := rapid.Bool().Draw(t, "lineage")
		h := observed(s.finishDrawn(stFinal{}), s, lineage, nil)
		r := Check(h, Options{Guarantees: strict})
		want := Unknown
		for _, rec := range s.records {
			if rec.committed && (!lineage || s.ends[rec.txn] == history.OK) {
				want = Valid
			}
		}
		if r.Valid != want || len(r.Anomalies) != 0 {
			t.Fatalf("correct stage (lineage %v) judged %s, want %s: %q\nanomalies %+v\n%s", lineage, r.Valid, want, r.Reasons, r.Anomalies, dump(h))
		}
	})
}

// Each planted anomaly is found alone, with or without the lineage, and
// the result is the same whatever the number of shards.
func TestPropertyStageObservedPlantedAnomalyIsFoundAlone(t *testing.T) {
	dir := t.TempDir()
	rapid.Check(t, func(t *rapid.T) {
		kind := rapid.SampledFrom(TxnStageKinds()).Draw(t, "kind")
		s := genTxnStage(t)
		lineage := rapid.Bool().Draw(t, "lineage")
		h, want, ok := txnPlants[kind](t, s)
		if !ok {
			t.Skip("no place to plant " + string(kind))
		}
		h = observed(h, s, lineage, nil)
		r := Check(h, Options{Guarantees: strict})
		got := txnFound(r)
		slices.Sort(want)
		if r.Valid != Invalid || len(got) != 1 || !slices.Equal(got[kind], want) {
			t.Fatalf("planted %s at %v (lineage %v); got %s with %v (%q)\n%s", kind, want, lineage, r.Valid, got, r.Reasons, dump(h))
		}
		checkDeterministic(t, h, dir, 2)
	})
}
