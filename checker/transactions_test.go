package checker

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/deliverycheck/deliverycheck/history"
)

// The stage of the tests: the processor reads run.events, writes
// invoices and revenue, and a subscription, billing, applies what it
// reads from invoices.
const (
	stIn       = "run.events"
	stInvoices = "run.invoices"
	stRevenue  = "run.revenue"
)

var stOutputs = []string{stInvoices, stRevenue}

// txnHist writes a transactional stage's history, one op per call,
// time advancing, keeping what a test needs to plant an anomaly: every
// input, every output record (and whether its transaction committed),
// and the next offset of every output partition.
type txnHist struct {
	b       builder
	inputs  []stInput
	records []stRecord
	byInput map[stInput][]int   // records by input
	next    map[[2]string]int64 // topic, partition → next offset
	outPart int64               // partitions per output topic
	txn     int
	db      bool                    // the processor applies each input's effect to the database
	applied map[string]bool         // events the processor applied to the database
	billed  map[string]bool         // events billing applied
	ends    map[string]history.Type // how each transaction ended
}

type stInput struct {
	event string
	in    inPos
}

type stRecord struct {
	topic     string
	at        inPos // partition, offset in topic
	in        stInput
	txn       string
	committed bool
}

func newTxnHist(outPartitions int64) *txnHist {
	s := &txnHist{next: map[[2]string]int64{}, outPart: outPartitions}
	s.b.op("harness", history.OK, history.Setup, history.Value{Subscriptions: []string{"billing"}})
	s.b.op("harness", history.OK, history.Lineage, history.Value{Consumer: "billing"})
	s.b.op("harness", history.OK, history.TxnStage, history.Value{Consumer: "processor", Target: stIn, Topics: stOutputs})
	return s
}

// event commits event id and publishes it to input partition p, at
// offset off of the input topic (twice for a republished event).
func (s *txnHist) event(id string, p, off int64) stInput {
	s.b.commit(id, id, 1, history.OK)
	s.b.op("relay-0", history.OK, history.Publish, history.Value{Event: id, Partition: p, Offset: off})
	in := stInput{event: id, in: inPos{p, off}}
	s.inputs = append(s.inputs, in)
	return in
}

// republish publishes event in again, to input partition p at offset
// off: another input, owed its own records.
func (s *txnHist) republish(in stInput, p, off int64) stInput {
	s.b.op("relay-0", history.OK, history.Publish, history.Value{Event: in.event, Partition: p, Offset: off})
	again := stInput{event: in.event, in: inPos{p, off}}
	s.inputs = append(s.inputs, again)
	return again
}

// transact runs one transaction over ins: ending ok (commit), fail
// (abort on purpose) or info (the processor was killed at its commit;
// committed says whether it had taken effect).
func (s *txnHist) transact(end history.Type, committed bool, ins ...stInput) string {
	s.txn++
	id := "processor-0:0:" + strconv.Itoa(s.txn)
	tv := history.Value{Txn: id, TransactionalID: "processor-0"}
	s.b.op("processor-0", history.Invoke, history.Txn, tv)
	for _, in := range ins {
		s.b.op("processor-0", history.OK, history.TxnInput, history.Value{Txn: id, Topic: stIn, Event: in.event, Partition: in.in.partition, Offset: in.in.offset})
	}
	touched := map[[2]string]bool{}
	for _, in := range ins {
		for _, topic := range stOutputs {
			p := in.in.partition % s.outPart
			k := [2]string{topic, strconv.FormatInt(p, 10)}
			off := s.next[k]
			s.next[k]++
			touched[k] = true
			rec := stRecord{topic: topic, at: inPos{p, off}, in: in, txn: id, committed: committed}
			if s.byInput == nil {
				s.byInput = map[stInput][]int{}
			}
			s.byInput[in] = append(s.byInput[in], len(s.records))
			s.records = append(s.records, rec)
			s.b.op("processor-0", history.OK, history.TxnOutput, s.recValue(rec, id))
		}
		if s.db && committed && !s.applied[in.event] {
			if s.applied == nil {
				s.applied = map[string]bool{}
			}
			s.applied[in.event] = true
			// The database effect is written inside the loop, once per
			// committed input here (the inbox fix).
			s.b.op("processor-0", history.Invoke, history.Apply, history.Value{Event: in.event, Consumer: "processor", Key: in.event, Version: 1})
			s.b.op("processor-0", history.OK, history.Apply, history.Value{Event: in.event, Consumer: "processor", Key: in.event, Version: 1})
		}
	}
	switch end {
	case history.Fail:
		tv.Reason = history.ReasonAbort
	case history.Info:
		tv.Error = "killed at commit"
	}
	s.b.op("processor-0", end, history.Txn, tv)
	if s.ends == nil {
		s.ends = map[string]history.Type{}
	}
	s.ends[id] = end
	if end == history.Info {
		s.b.op("nemesis", history.Info, history.Crash, history.Value{Target: "processor-0"})
		s.b.op("nemesis", history.OK, history.Restart, history.Value{Target: "processor-0"})
	}
	// The commit or abort marker takes an offset in each partition the
	// transaction wrote to.
	for k := range touched {
		s.next[k]++
	}
	return id
}

func (s *txnHist) recValue(r stRecord, txn string) history.Value {
	return history.Value{Txn: txn, Topic: r.topic, Event: r.in.event, Partition: r.at.partition, Offset: r.at.offset,
		InputPartition: r.in.in.partition, InputOffset: r.in.in.offset}
}

// read is a read by reader-0 during the run of every committed record of
// ins.
func (s *txnHist) read(ins ...stInput) {
	for _, r := range s.recordsOf(ins) {
		if r.committed {
			s.b.op("reader-0", history.OK, history.OutputRead, s.recValue(r, ""))
		}
	}
}

// recordsOf returns the records of ins, in the order they were written.
func (s *txnHist) recordsOf(ins []stInput) []stRecord {
	var idx []int
	for _, in := range ins {
		idx = append(idx, s.byInput[in]...)
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	out := make([]stRecord, len(idx))
	for i, j := range idx {
		out[i] = s.records[j]
	}
	return out
}

// consume delivers each committed invoice of ins to billing, which
// applies its event once.
func (s *txnHist) consume(ins ...stInput) {
	for _, r := range s.recordsOf(ins) {
		if !r.committed || r.topic != stInvoices {
			continue
		}
		v := history.Value{Event: r.in.event, Consumer: "billing", Topic: stInvoices, Partition: r.at.partition, Offset: r.at.offset}
		s.b.op("consumer-billing-0", history.OK, history.Deliver, v)
		av := history.Value{Event: r.in.event, Consumer: "billing", Key: r.in.event, Version: 1}
		s.b.op("consumer-billing-0", history.Invoke, history.Apply, av)
		if s.billed[r.in.event] {
			av.Reason = "duplicate"
			s.b.op("consumer-billing-0", history.Fail, history.Apply, av)
		} else {
			if s.billed == nil {
				s.billed = map[string]bool{}
			}
			s.billed[r.in.event] = true
			s.b.op("consumer-billing-0", history.OK, history.Apply, av)
		}
		s.b.op("consumer-billing-0", history.OK, history.Ack, history.Value{Event: r.in.event, Consumer: "billing"})
	}
}

// stFinal is the final read of a stage history; each func, if set,
// changes one part of it.
type stFinal struct {
	rows       func([]history.Value) []history.Value // the output rows
	close      func(topic string) history.Type       // how each topic's read closes (0: no close)
	partitions func([]history.Value) []history.Value
	dbEffects  int // effect rows per event of the processor's database effect
}

// finish drains and writes the final read.
func (s *txnHist) finish(f stFinal) history.History {
	s.b.drain()
	var rows, out []history.Value
	events := map[string]bool{}
	for _, in := range s.inputs {
		rows = append(rows, history.Value{Table: history.TableBroker, Event: in.event, Partition: in.in.partition, Offset: in.in.offset})
		events[in.event] = true
	}
	rows = append(rows, history.Value{Table: history.TableBroker, Target: stIn, Detail: "read whole"})
	for _, r := range s.records {
		if r.committed {
			v := s.recValue(r, "")
			v.Table = history.TableOutput
			out = append(out, v)
		}
	}
	if f.rows != nil {
		out = f.rows(out)
	}
	rows = append(rows, out...)
	for _, topic := range stOutputs {
		typ := history.Type(history.OK)
		if f.close != nil {
			typ = f.close(topic)
		}
		if typ != 0 {
			rows = append(rows, history.Value{Table: history.TableOutput, Topic: topic, Detail: "read committed to the last stable offsets"})
			if typ != history.OK {
				rows[len(rows)-1].Error = "timeout"
			}
		}
	}
	var parts []history.Value
	for _, topic := range stOutputs {
		for p := range s.outPart {
			n := s.next[[2]string{topic, strconv.FormatInt(p, 10)}]
			parts = append(parts, history.Value{Table: history.TablePartition, Topic: topic, Partition: p, LastStableOffset: n, HighWatermark: n})
		}
	}
	if f.partitions != nil {
		parts = f.partitions(parts)
	}
	rows = append(rows, parts...)
	for _, id := range slices.Sorted(maps.Keys(events)) {
		rows = append(rows, history.Value{Table: history.TableEffects, Event: id, Consumer: "billing", Key: id, Version: 1},
			history.Value{Table: history.TableInbox, Event: id, Consumer: "billing"})
		for range f.dbEffects {
			rows = append(rows, history.Value{Table: history.TableEffects, Event: id, Consumer: "processor", Key: id, Version: 1})
		}
	}
	s.b.op("harness", history.Invoke, history.FinalRead, history.Value{})
	for _, r := range rows {
		typ := history.Type(history.OK)
		if r.Table == history.TableOutput && r.Event == "" && r.Error != "" {
			typ = history.Fail
		}
		s.b.op("harness", typ, history.FinalRead, r)
	}
	s.b.op("harness", history.OK, history.FinalRead, history.Value{})
	return s.b.h
}

// cleanTxnStage is a small correct stage: e1 and e2 on input partition 0,
// e3 on partition 1; e1's first transaction aborts and is retried; e3's
// transaction is killed at its commit, which had taken effect.
func cleanTxnStage() *txnHist {
	s := newTxnHist(1)
	e1, e2, e3 := s.event("e1", 0, 0), s.event("e2", 0, 1), s.event("e3", 1, 0)
	s.transact(history.Fail, false, e1)
	s.transact(history.OK, true, e1, e2)
	s.read(e1, e2)
	s.transact(history.Info, true, e3)
	s.read(e3)
	s.consume(e1, e2, e3)
	return s
}

// txnFound lists the stage's findings as "where:label".
func txnFound(r *Result) map[Kind][]string {
	got := map[Kind][]string{}
	for _, an := range r.Anomalies {
		for _, e := range an.Events {
			got[an.Kind] = append(got[an.Kind], an.Where()+":"+e)
		}
	}
	for k := range got {
		slices.Sort(got[k])
	}
	return got
}

func TestStageKinds(t *testing.T) {
	dropRows := func(keep func(v history.Value) bool) func([]history.Value) []history.Value {
		return func(rows []history.Value) []history.Value {
			return slices.DeleteFunc(rows, func(v history.Value) bool { return !keep(v) })
		}
	}
	tests := []struct {
		name   string
		h      func() history.History
		valid  Validity
		want   map[Kind][]string
		detail string // a substring of some example's detail
	}{
		{
			name:  "clean",
			h:     func() history.History { return cleanTxnStage().finish(stFinal{}) },
			valid: Valid,
		},
		{
			name: "output-duplicate: e2 twice in invoices",
			h: func() history.History {
				return cleanTxnStage().finish(stFinal{rows: func(rows []history.Value) []history.Value {
					return append(rows, history.Value{Table: history.TableOutput, Topic: stInvoices, Event: "e2", Partition: 0, Offset: 99, InputPartition: 0, InputOffset: 1})
				}})
			},
			valid: Invalid, want: map[Kind][]string{OutputDuplicate: {stInvoices + ":e2"}}, detail: "input p0@1 has 2 records in run.invoices",
		},
		{
			name: "output-lost: e2 in no output topic",
			h: func() history.History {
				return cleanTxnStage().finish(stFinal{rows: dropRows(func(v history.Value) bool { return v.Event != "e2" })})
			},
			valid: Invalid, want: map[Kind][]string{OutputLost: {stInvoices + ":e2", stRevenue + ":e2"}},
			detail: "a transaction that read it committed, yet its records are not visible",
		},
		{
			name: "aborted-visible: reader-0 reads e1's aborted invoice",
			h: func() history.History {
				s := cleanTxnStage()
				r := s.records[0] // e1's invoice in the aborted transaction
				s.b.op("reader-0", history.OK, history.OutputRead, s.recValue(r, ""))
				return s.finish(stFinal{})
			},
			valid: Invalid, want: map[Kind][]string{AbortedVisible: {stInvoices + ":e1"}}, detail: "read by reader-0, written by transaction processor-0:0:1 (aborted: abort)",
		},
		{
			name: "torn-transaction: e3 in invoices, not in revenue",
			h: func() history.History {
				return cleanTxnStage().finish(stFinal{rows: dropRows(func(v history.Value) bool { return v.Event != "e3" || v.Topic != stRevenue })})
			},
			valid: Invalid, want: map[Kind][]string{TornTransaction: {"the transactional stage:e3"}}, detail: "has a record in run.invoices and none in run.revenue",
		},
		{
			name: "output-order: e1 and e2 swapped in revenue",
			h: func() history.History {
				return cleanTxnStage().finish(stFinal{rows: func(rows []history.Value) []history.Value {
					var i, j int
					for k, v := range rows {
						if v.Topic == stRevenue && v.Event == "e1" {
							i = k
						}
						if v.Topic == stRevenue && v.Event == "e2" {
							j = k
						}
					}
					rows[i].Offset, rows[j].Offset = rows[j].Offset, rows[i].Offset
					return rows
				}})
			},
			valid: Invalid, want: map[Kind][]string{OutputOrder: {stRevenue + ":e1"}}, detail: "input p0@0 written to run.revenue at p0@3, after input p0@1 at offset 2",
		},
		{
			name: "transaction-left-open: revenue's partition below its high watermark",
			h: func() history.History {
				s := cleanTxnStage()
				// A transaction begun after the drain's last commit and
				// never completed, its record past the stable offset.
				s.b.op("processor-0", history.Invoke, history.Txn, history.Value{Txn: "processor-0:0:9"})
				s.b.op("processor-0", history.OK, history.TxnOutput, history.Value{Txn: "processor-0:0:9", Topic: stRevenue, Event: "e9", Partition: 0, Offset: 50, InputPartition: 5, InputOffset: 5})
				return s.finish(stFinal{partitions: func(parts []history.Value) []history.Value {
					for i := range parts {
						if parts[i].Topic == stRevenue {
							parts[i].HighWatermark = 51
							parts[i].LastStableOffset = 50
						}
					}
					return parts
				}})
			},
			valid: Invalid, want: map[Kind][]string{TransactionLeftOpen: {stRevenue + ":" + stRevenue + "/0"}}, detail: "undecided transactions that wrote past it: processor-0:0:9",
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
			if tt.detail != "" && !slices.ContainsFunc(r.Anomalies, func(an Anomaly) bool {
				return slices.ContainsFunc(an.Examples, func(ex Example) bool { return strings.Contains(ex.Detail, tt.detail) })
			}) {
				t.Errorf("no example says %q: %+v", tt.detail, r.Anomalies)
			}
			for _, an := range r.Anomalies {
				if !an.Fatal {
					t.Errorf("%s not fatal under %+v", an.Kind, strict)
				}
				for _, ex := range an.Examples {
					if len(ex.Ops) == 0 {
						t.Errorf("%s: example %s without ops", an.Kind, ex.Event)
					}
				}
			}
			if r.TxnStage == nil {
				t.Fatal("no stage in the result")
			}
			if tt.valid == Valid && (r.TxnStage.Delivery != ExactlyOnce || r.TxnStage.Transactions != (TxnCounts{Begun: 3, Committed: 1, Aborted: 1, Indeterminate: 1})) {
				t.Errorf("stage %+v", r.TxnStage)
			}
		})
	}
}

// A run whose stage's facts are not established is unknown, and says
// why; never valid.
func TestStageUnknown(t *testing.T) {
	tests := []struct {
		name   string
		h      func() history.History
		reason string
	}{
		{
			name: "no transaction aborted",
			h: func() history.History {
				s := newTxnHist(1)
				e1 := s.event("e1", 0, 0)
				s.transact(history.OK, true, e1)
				s.read(e1)
				s.consume(e1)
				return s.finish(stFinal{})
			},
			reason: "transactional stage: no transaction aborted",
		},
		{
			name: "no transaction committed",
			h: func() history.History {
				s := newTxnHist(1)
				e1 := s.event("e1", 0, 0)
				s.transact(history.Fail, false, e1)
				s.transact(history.Info, true, e1)
				s.read(e1)
				s.consume(e1)
				return s.finish(stFinal{})
			},
			reason: "transactional stage: no transaction committed",
		},
		{
			name: "outputs written without transactions",
			h: func() history.History {
				h := cleanTxnStage().finish(stFinal{})
				return slices.DeleteFunc(h, func(op history.Op) bool {
					return op.F == history.Txn || op.F == history.TxnInput || op.F == history.TxnOutput
				})
			},
			reason: "transactional stage: no transaction was recorded",
		},
		{
			name:   "the final read of revenue failed",
			h:      func() history.History { return cleanTxnStage().finish(stFinal{close: closeFails(stRevenue)}) },
			reason: "the final read of output topic run.revenue is failed",
		},
		{
			name: "the final read of revenue never closed",
			h: func() history.History {
				return cleanTxnStage().finish(stFinal{close: func(topic string) history.Type {
					if topic == stRevenue {
						return 0
					}
					return history.OK
				}})
			},
			reason: "the final read of output topic run.revenue is missing",
		},
		{
			name: "no offsets read",
			h: func() history.History {
				return cleanTxnStage().finish(stFinal{partitions: func([]history.Value) []history.Value { return nil }})
			},
			reason: "the offsets of output topic run.invoices were not read",
		},
		{
			name: "no reader during the run",
			h: func() history.History {
				s := newTxnHist(1)
				e1 := s.event("e1", 0, 0)
				s.transact(history.Fail, false, e1)
				s.transact(history.OK, true, e1)
				return s.finish(stFinal{dbEffects: 1})
			},
			reason: "no reader recorded what it read during the run",
		},
		{
			name: "transactions without a stage op",
			h: func() history.History {
				h := cleanTxnStage().finish(stFinal{})
				return slices.DeleteFunc(h, func(op history.Op) bool { return op.F == history.TxnStage })
			},
			reason: "no txn-stage op declares the stage",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.h()
			r := Check(h, Options{Guarantees: strict})
			if r.Valid != Unknown || !slices.ContainsFunc(r.Reasons, func(s string) bool { return strings.Contains(s, tt.reason) }) {
				t.Fatalf("valid %s, reasons %q, want unknown saying %q; anomalies %+v\n%s", r.Valid, r.Reasons, tt.reason, r.Anomalies, dump(h))
			}
			if r.TxnStage.Delivery == ExactlyOnce {
				t.Errorf("delivery %s with the facts not established", r.TxnStage.Delivery)
			}
		})
	}
}

func closeFails(topic string) func(string) history.Type {
	return func(t string) history.Type {
		if t == topic {
			return history.Fail
		}
		return history.OK
	}
}

// The boundary: the processor also writes an effect to the database
// inside its loop. Retried inputs apply it twice while the topics stay
// exactly once; the inbox fix applies it once.
func TestStageDatabaseBoundary(t *testing.T) {
	for _, tt := range []struct {
		name     string
		effects  int
		valid    Validity
		db       Delivery
		boundary string
	}{
		{"effect inside the loop, no inbox", 2, Invalid, AtLeastOnce, "exactly once on Kafka's topics; at least once on the database"},
		{"inbox in the same database transaction", 1, Valid, ExactlyOnce, "exactly once on Kafka's topics; exactly once on the database"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := cleanTxnStage().finish(stFinal{dbEffects: tt.effects})
			r := Check(h, Options{Guarantees: Guarantees{}})
			if r.Valid != tt.valid {
				t.Fatalf("valid %s, reasons %q", r.Valid, r.Reasons)
			}
			st := r.TxnStage
			if st.Delivery != ExactlyOnce || st.Database == nil || st.Database.Delivery != tt.db || st.Boundary != tt.boundary {
				t.Fatalf("stage %+v database %+v", st, st.Database)
			}
			if want := []EffectCount{{Effects: int64(tt.effects), Events: 3}}; !slices.Equal(st.Database.PerEvent, want) {
				t.Errorf("per event %+v, want %+v", st.Database.PerEvent, want)
			}
			if tt.valid == Invalid && !slices.ContainsFunc(r.Anomalies, func(an Anomaly) bool { return an.Kind == DuplicateEffect && an.Subscription == "processor" }) {
				t.Errorf("no duplicate-effect in processor: %+v", r.Anomalies)
			}
		})
	}
}

// A history without a stage has none in its result.
func TestNoStage(t *testing.T) {
	h := new(builder).commit("e0", "k0", 1, history.OK).publish("e0").consume("e0", "inv").drain().finalRead(effect("e0", "inv")).h
	if r := Check(h, Options{}); r.TxnStage != nil || r.Valid != Valid {
		t.Fatalf("stage %+v, valid %s %q", r.TxnStage, r.Valid, r.Reasons)
	}
}

// A txn-stage op written after the first transactions still declares
// the stage: the output topics come in its order, and the verdict is the
// same.
func TestStageDeclaredLate(t *testing.T) {
	h := cleanTxnStage().finish(stFinal{})
	i := slices.IndexFunc(h, func(op history.Op) bool { return op.F == history.TxnStage })
	j := slices.IndexFunc(h, func(op history.Op) bool { return op.F == history.TxnOutput && op.Value.Topic == stRevenue })
	decl := h[i]
	decl.Value.Topics = []string{stRevenue, stInvoices}
	h = slices.Insert(slices.Delete(h, i, i+1), j, decl)
	for k := range h {
		h[k].Time = int64(k+1) * 1000
	}
	r := Check(h, Options{Guarantees: strict})
	if r.Valid != Valid || !slices.Equal(r.TxnStage.Outputs, []string{stRevenue, stInvoices}) {
		t.Fatalf("valid %s %q, outputs %v", r.Valid, r.Reasons, r.TxnStage.Outputs)
	}
}

// Ops of the stage without a txn belong to their process's current
// transaction: each invoke starts a new one.
func TestStageTxnByProcess(t *testing.T) {
	h := cleanTxnStage().finish(stFinal{})
	for i := range h {
		if h[i].Value.Txn != "" && h[i].F != history.FinalRead {
			h[i].Value.Txn = ""
		}
	}
	r := Check(h, Options{Guarantees: strict})
	if r.Valid != Valid || r.TxnStage.Transactions != (TxnCounts{Begun: 3, Committed: 1, Aborted: 1, Indeterminate: 1}) {
		t.Fatalf("valid %s %q, transactions %+v", r.Valid, r.Reasons, r.TxnStage.Transactions)
	}
}

// Output order is fatal only where order is promised; found, it is
// shown either way.
func TestStageOutputOrderPromise(t *testing.T) {
	swap := func(rows []history.Value) []history.Value {
		var i, j int
		for k, v := range rows {
			switch {
			case v.Topic == stInvoices && v.Event == "e1":
				i = k
			case v.Topic == stInvoices && v.Event == "e2":
				j = k
			}
		}
		rows[i].Offset, rows[j].Offset = rows[j].Offset, rows[i].Offset
		return rows
	}
	for _, tt := range []struct {
		g     Guarantees
		valid Validity
	}{{strict, Invalid}, {Guarantees{}, Valid}} {
		r := Check(cleanTxnStage().finish(stFinal{rows: swap}), Options{Guarantees: tt.g})
		if r.Valid != tt.valid || len(r.Anomalies) != 1 || r.Anomalies[0].Kind != OutputOrder || r.Anomalies[0].Fatal != (tt.valid == Invalid) {
			t.Errorf("order %s: valid %s %q, anomalies %+v", tt.g.Normalize().Order, r.Valid, r.Reasons, r.Anomalies)
		}
	}
}
