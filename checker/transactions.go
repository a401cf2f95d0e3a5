package checker

// This file is the transactional stage of issue 23: a
// consume-transform-produce processor between the events topic and its
// output topics, writing one record per input to each output topic and
// committing its input offsets in the same Kafka transaction, and the
// read_committed readers downstream. Shard 0 keeps the stage's state
// (txnState), fed by shard.op for the stage's own ops and by
// shard.observe for the ops that read its topics; finish judges it
// (judgeTxnStage) into Result.Stage, the stage's anomalies, and the reasons
// its facts are not established.
//
// Exactly-once is per input record: an input is a record of the input
// topic, named by its position (partition, offset), and each output
// topic owes it exactly one record that read_committed readers see. The
// final read of the output topics is authoritative for what is visible
// (as the effects ledger is for effects); the transactions' own ops say
// only which records each transaction wrote and how it ended, which is
// what tells an aborted record from a committed one.

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/deliverycheck/deliverycheck/history"
)

// TxnStage is what a history says about its transactional stage.
type TxnStage struct {
	// Consumer is the processor's consumer group; Input its input topic;
	// Outputs its output topics, as the stage op declared them (and any
	// other topic its transactions wrote to, after them).
	Consumer string   `json:"consumer"`
	Input    string   `json:"input"`
	Outputs  []string `json:"outputs"`
	// Declared: a stage op declared the stage. Without one the output
	// topics are only those the transactions wrote to, and the stage's
	// facts are not established.
	Declared     bool      `json:"declared"`
	Transactions TxnCounts `json:"transactions"`
	// Inputs counts the records of the input topic the final read found
	// (its broker rows), and Retried those of them read into an aborted
	// transaction and then into another one.
	Inputs  int64 `json:"inputs"`
	Retried int64 `json:"retried"`
	// ConcurrentReads counts the records readers read during the run
	// (output-read ops and deliveries from an output topic).
	ConcurrentReads int64        `json:"concurrent_reads"`
	Topics          []TopicStats `json:"topics"`
	// Delivery is what the output topics did with the inputs:
	// exactly-once, at-least-once (duplicates, nothing missing),
	// at-most-once (missing, no duplicates), neither, or unknown (the
	// facts are not established).
	Delivery Delivery `json:"delivery"`
	// Database is the effect the processor writes to the database inside
	// its loop, when it writes one: the effects rows of the subscription
	// named like its consumer group.
	Database *DatabaseStats `json:"database,omitempty"`
	// Boundary says both halves in one sentence, when there is a
	// database effect: "exactly once on Kafka's topics; at least once on
	// the database".
	Boundary string `json:"boundary,omitempty"`
}

// TxnCounts counts a stage's transactions by how they ended.
type TxnCounts struct {
	Begun         int64 `json:"begun"`
	Committed     int64 `json:"committed"`
	Aborted       int64 `json:"aborted"`
	Indeterminate int64 `json:"indeterminate"` // info, or never completed
}

// TopicStats is what the final read found in one output topic.
type TopicStats struct {
	Topic string `json:"topic"`
	// Read is how the final read of the topic ended: complete, failed
	// or missing.
	Read string `json:"read"`
	// Records counts the records read; Inputs the distinct inputs they
	// were made from; Unmatched the records whose input the input topic
	// does not hold (it lost them after they were processed): counted,
	// not an anomaly of the stage.
	Records    int64 `json:"records"`
	Inputs     int64 `json:"inputs"`
	Unmatched  int64 `json:"unmatched"`
	Partitions int64 `json:"partitions"` // partitions whose offsets were read
	// The findings in the topic, by kind; Torn counts the inputs missing
	// here that another output topic has.
	Duplicates     int64 `json:"duplicates"`
	Lost           int64 `json:"lost"`
	Torn           int64 `json:"torn"`
	AbortedVisible int64 `json:"aborted_visible"`
	OutOfOrder     int64 `json:"out_of_order"`
	LeftOpen       int64 `json:"left_open"`
}

// DatabaseStats counts, per committed event, the effects the processor
// left on the database: the other half of "exactly once, of what?".
type DatabaseStats struct {
	Subscription string `json:"subscription"`
	Events       int64  `json:"events"`  // committed events, not poison
	Effects      int64  `json:"effects"` // their effects in all
	// PerEvent counts the events by how many effects each has, by
	// ascending effects.
	PerEvent   []EffectCount `json:"per_event"`
	Duplicated int64         `json:"duplicated"` // events with more than one effect
	Missing    int64         `json:"missing"`    // events with none
	Delivery   Delivery      `json:"delivery"`
}

// EffectCount is how many events have Effects effects.
type EffectCount struct {
	Effects int64 `json:"effects"`
	Events  int64 `json:"events"`
}

// Delivery is a delivery semantics as observed.
type Delivery string

// The deliveries.
const (
	ExactlyOnce     Delivery = "exactly-once"
	AtLeastOnce     Delivery = "at-least-once" // duplicates, nothing missing
	AtMostOnce      Delivery = "at-most-once"  // missing, no duplicates
	Neither         Delivery = "neither"       // both missing and duplicates
	DeliveryUnknown Delivery = "unknown"       // the facts are not established
)

func deliveryOf(dup, missing, established bool) Delivery {
	switch {
	case dup && missing:
		return Neither
	case dup:
		return AtLeastOnce
	case missing:
		return AtMostOnce
	case !established:
		return DeliveryUnknown
	}
	return ExactlyOnce
}

// Words says d as the boundary sentence does: "exactly once".
func (d Delivery) Words() string {
	switch d {
	case ExactlyOnce:
		return "exactly once"
	case AtLeastOnce:
		return "at least once"
	case AtMostOnce:
		return "at most once"
	case Neither:
		return "neither at least nor at most once"
	}
	return "not established"
}

// inPos is an input: a record's position in the stage's input topic.
type inPos struct {
	partition int64
	offset    int64
}

func (p inPos) String() string {
	return "p" + strconv.FormatInt(p.partition, 10) + "@" + strconv.FormatInt(p.offset, 10)
}

func compareIn(x, y inPos) int {
	return cmp.Or(cmp.Compare(x.partition, y.partition), cmp.Compare(x.offset, y.offset))
}

// recPos is a record's position in a topic (by its index in the stage's
// topics).
type recPos struct {
	topic     int32
	partition int64
	offset    int64
}

func compareRec(x, y recPos) int {
	return cmp.Or(cmp.Compare(x.topic, y.topic), cmp.Compare(x.partition, y.partition), cmp.Compare(x.offset, y.offset))
}

// txnRec is one transaction of the stage.
type txnRec struct {
	key     string // what its ops name it by: txn, or the process's current one
	id      string // its txn, as shown
	outcome history.Type
	reason  string
}

// written is an output record a transaction wrote (a txn-output op).
type written struct {
	txn   int32
	in    inPos
	event string
}

// sighting is the first read of a record during the run.
type sighting struct {
	in     inPos
	hasIn  bool
	event  string
	reader string
}

// outRow is a final-read output row; inputRow a broker row (an input).
type outRow struct {
	at            recPos
	in            inPos
	event, source string
}

type inputRow struct {
	in            inPos
	event, source string
}

// partRow is a final-read partition row.
type partRow struct {
	topic     int32
	partition int64
	lso, hwm  int64
}

// txnState is what shard 0 gathers about a transactional stage.
type txnState struct {
	declared bool
	consumer string
	input    string
	nDecl    int // the declared output topics are topics[:nDecl]
	topicIdx map[string]int32
	topics   []string
	isOutput []bool // by topic: declared, or written to by a transaction
	txns     []txnRec
	txnByKey map[string]int32 // the latest transaction of each key
	perProc  map[string]int   // transactions begun without a txn, per process
	reads    []struct {
		in  inPos
		txn int32
	}
	written map[recPos]written
	seen    map[recPos]sighting
	// The current final-read attempt: inputs (broker rows), output rows,
	// how each topic's read closed, partition rows.
	inputs []inputRow
	rows   []outRow
	closed map[int32]string
	parts  []partRow
}

// txnState returns the shard's stage, starting one if it has none: an
// op of the stage without a stage op still makes a stage, whose facts
// are then not established.
func (s *shard) txnState() *txnState {
	if s.txnStage == nil {
		s.txnStage = &txnState{topicIdx: map[string]int32{}, txnByKey: map[string]int32{}, perProc: map[string]int{},
			written: map[recPos]written{}, seen: map[recPos]sighting{}, closed: map[int32]string{}}
	}
	return s.txnStage
}

// txnOwned reports whether op is the stage's alone: shard 0 keeps it,
// and no event's state sees it.
func txnOwned(op *history.Op) bool {
	switch op.F {
	case history.Txn, history.TxnInput, history.TxnOutput, history.OutputRead:
		return true
	case history.FinalRead:
		return op.Value.Table == history.TableOutput || op.Value.Table == history.TablePartition
	}
	return false
}

// txnReads reports whether op, which an event's shard also folds, tells
// the stage something: a delivery from a topic (a read of an output
// topic), or a broker row (an input).
func txnReads(op *history.Op) bool {
	switch op.F {
	case history.Deliver:
		return op.Value.Topic != "" && op.Type == history.OK
	case history.FinalRead:
		return op.Value.Table == history.TableBroker && op.Value.Event != "" && op.Type == history.OK
	}
	return false
}

func (st *txnState) topic(name string) int32 {
	i, ok := st.topicIdx[name]
	if !ok {
		i = int32(len(st.topics))
		st.topicIdx[name] = i
		st.topics = append(st.topics, name)
		st.isOutput = append(st.isOutput, false)
	}
	return i
}

// declare folds a stage op.
func (st *txnState) declare(v *history.Value) {
	st.declared = true
	st.consumer, st.input = cmp.Or(v.Consumer, st.consumer), cmp.Or(v.Target, st.input)
	for _, t := range v.Topics {
		if _, ok := st.topicIdx[t]; ok && int(st.topicIdx[t]) < st.nDecl {
			continue
		}
		i := st.topic(t)
		st.isOutput[i] = true
		// Keep the declared topics first, in declaration order.
		if int(i) != st.nDecl {
			st.reorder(i, int32(st.nDecl))
		}
		st.nDecl++
	}
}

// reorder moves topic i to index j (j < i), shifting the others: only
// while no record names topics by index yet, at setup.
func (st *txnState) reorder(i, j int32) {
	name := st.topics[i]
	st.topics = slices.Insert(slices.Delete(st.topics, int(i), int(i)+1), int(j), name)
	out := st.isOutput[i]
	st.isOutput = slices.Insert(slices.Delete(st.isOutput, int(i), int(i)+1), int(j), out)
	for k, n := range st.topics {
		st.topicIdx[n] = int32(k)
	}
}

// txn returns the transaction op names, starting one if it has none.
func (st *txnState) txn(op *history.Op, begin bool) int32 {
	key := op.Value.Txn
	if key == "" {
		key = "\x00" + op.Process
	}
	i, ok := st.txnByKey[key]
	if ok && !begin {
		return i
	}
	id := op.Value.Txn
	if id == "" {
		st.perProc[op.Process]++
		id = op.Process + "#" + strconv.Itoa(st.perProc[op.Process])
	}
	i = int32(len(st.txns))
	st.txns = append(st.txns, txnRec{key: key, id: id})
	st.txnByKey[key] = i
	return i
}

// op folds an op of the stage (txnOwned).
func (st *txnState) op(op *history.Op) {
	v := &op.Value
	switch op.F {
	case history.Txn:
		if op.Type == history.Invoke {
			st.txn(op, true)
			return
		}
		t := &st.txns[st.txn(op, false)]
		// A definite outcome wins over an indeterminate one.
		if op.Type != history.Info || t.outcome == 0 {
			t.outcome, t.reason = op.Type, cmp.Or(v.Reason, v.Error)
		}
		return
	}
	if op.Type != history.OK {
		if op.F == history.FinalRead && v.Table == history.TableOutput && v.Event == "" && v.Topic != "" {
			if i := st.topic(v.Topic); st.closed[i] != "complete" {
				st.closed[i] = "failed"
			}
		}
		return
	}
	switch op.F {
	case history.TxnInput:
		st.reads = append(st.reads, struct {
			in  inPos
			txn int32
		}{inPos{v.Partition, v.Offset}, st.txn(op, false)})
	case history.TxnOutput:
		i := st.topic(v.Topic)
		st.isOutput[i] = true
		st.written[recPos{i, v.Partition, v.Offset}] = written{txn: st.txn(op, false), in: inPos{v.InputPartition, v.InputOffset}, event: v.Event}
	case history.OutputRead:
		st.sight(v, op.Process, true)
	case history.FinalRead:
		switch {
		case v.Table == history.TablePartition:
			st.parts = append(st.parts, partRow{topic: st.topic(v.Topic), partition: v.Partition, lso: v.LastStableOffset, hwm: v.HighWatermark})
		case v.Event == "":
			st.closed[st.topic(v.Topic)] = "complete"
		default:
			st.rows = append(st.rows, outRow{at: recPos{st.topic(v.Topic), v.Partition, v.Offset}, in: inPos{v.InputPartition, v.InputOffset}, event: v.Event, source: v.Source})
		}
	}
}

// also folds an op an event's shard folds too (txnReads).
func (st *txnState) also(op *history.Op) {
	v := &op.Value
	if op.F == history.Deliver {
		st.sight(v, "subscription "+cmp.Or(v.Consumer, defaultSubscription), false)
		return
	}
	st.inputs = append(st.inputs, inputRow{in: inPos{v.Partition, v.Offset}, event: v.Event, source: v.Source})
}

// sight keeps the first read of a record during the run. A delivery
// names no input; an output-read does.
func (st *txnState) sight(v *history.Value, reader string, hasIn bool) {
	at := recPos{st.topic(v.Topic), v.Partition, v.Offset}
	if _, ok := st.seen[at]; !ok {
		st.seen[at] = sighting{in: inPos{v.InputPartition, v.InputOffset}, hasIn: hasIn, event: v.Event, reader: reader}
	}
}

// newAttempt forgets the final read's rows: a new attempt started.
func (st *txnState) newAttempt() {
	st.inputs, st.rows, st.parts = st.inputs[:0], st.rows[:0], st.parts[:0]
	clear(st.closed)
}

// txnFinding is one finding of the stage before grouping.
type txnFinding struct {
	kind   Kind
	topic  string // "" for torn-transaction
	order  recPos // sorts the findings of one anomaly
	event  string
	source string
	detail string
	label  string // what Anomaly.Events lists: the event, or the partition
	match  txnMatch
}

// txnMatch says which ops show a finding, for its example.
type txnMatch struct {
	in      inPos
	hasIn   bool
	txns    []string // txn keys
	part    recPos   // a partition (offset unused)
	hasPart bool
}

// judgeTxnStage judges the transactional stage into r: its TxnStage, its
// anomalies (appended to r.Anomalies, after the subscriptions' in
// AnomalyKinds order), and in v.txnReasons why its facts are not
// established. replay reads the history again for the examples' ops.
func (a *analyzer) judgeTxnStage(v *view, r *Result, replay func(restart func(), fn func([]history.Op) error) error) {
	s0 := a.shards[0]
	st := s0.txnStage
	if st == nil {
		return
	}
	if !s0.fr.counts(s0.fr.attempt) {
		// Only the rows of the final-read attempt that completed count.
		st.newAttempt()
	}
	res := &TxnStage{Consumer: st.consumer, Input: st.input, Declared: st.declared, Outputs: []string{}, Topics: []TopicStats{}}
	reason := func(format string, args ...any) {
		v.txnReasons = append(v.txnReasons, "transactional stage: "+fmt.Sprintf(format, args...))
	}
	if !st.declared {
		reason("transactions were recorded but no stage op declares the stage, so its output topics are not known")
	}
	var outs []int32 // the output topics, declared first
	slot := make([]int, len(st.topics))
	for i := range st.topics {
		slot[i] = -1
		if st.isOutput[i] {
			slot[i] = len(outs)
			outs = append(outs, int32(i))
			res.Outputs = append(res.Outputs, st.topics[i])
		}
	}
	nOut := len(outs)
	stats := make([]TopicStats, nOut)
	for k, t := range outs {
		stats[k] = TopicStats{Topic: st.topics[t], Read: cmp.Or(st.closed[t], "missing")}
	}

	// Transactions.
	c := &res.Transactions
	for _, t := range st.txns {
		c.Begun++
		switch t.outcome {
		case history.OK:
			c.Committed++
		case history.Fail:
			c.Aborted++
		default:
			c.Indeterminate++
		}
	}
	switch {
	case c.Begun == 0:
		reason("no transaction was recorded")
	case c.Committed == 0:
		reason("no transaction committed")
	}
	if c.Begun > 0 && c.Aborted == 0 {
		reason("no transaction aborted, so no reader ever had an aborted record to skip")
	}

	// What each input was read into.
	readsOf := map[inPos]*readInfo{}
	for _, rd := range st.reads {
		ri := readsOf[rd.in]
		if ri == nil {
			ri = &readInfo{}
			readsOf[rd.in] = ri
		}
		t := &st.txns[rd.txn]
		switch t.outcome {
		case history.OK:
			ri.committed++
		case history.Fail:
			ri.aborted++
		default:
			ri.open++
		}
		if !slices.Contains(ri.txns, t.key) {
			ri.txns = append(ri.txns, t.key)
		}
	}
	txnsOf := func(in inPos) []string {
		if ri := readsOf[in]; ri != nil {
			return ri.txns
		}
		return nil
	}

	// The inputs: the input topic's records at the final read.
	inputsKnown := s0.fr.broker == "complete"
	type input struct {
		in            inPos
		event, source string
		inTopic       bool    // the input topic holds it
		first         []int32 // per output slot: its first row, -1 none
		second        []int32 // per output slot: a second row at another position, -1 none
		n             []int32 // per output slot: rows at distinct positions
	}
	var ins []input
	inIdx := map[inPos]int32{}
	get := func(in inPos, event, source string) *input {
		i, ok := inIdx[in]
		if !ok {
			i = int32(len(ins))
			inIdx[in] = i
			ins = append(ins, input{in: in, event: event, source: source, first: filled(nOut, -1), second: filled(nOut, -1), n: make([]int32, nOut)})
		}
		return &ins[i]
	}
	for _, ir := range st.inputs {
		get(ir.in, ir.event, ir.source).inTopic = true
	}
	res.Inputs = int64(len(ins))
	for _, ri := range readsOf {
		if ri.aborted > 0 && len(ri.txns) > 1 {
			res.Retried++
		}
	}
	if st.declared && !inputsKnown {
		reason("the input topic was not read whole after the drain (broker read %s), so output-lost is not judged", s0.fr.broker)
	}

	var fs []txnFinding
	// The final read of the output topics: what read_committed readers
	// see once every transaction is done.
	rowSeen := map[recPos]bool{}
	for ri, row := range st.rows {
		k := slot[row.at.topic]
		if k < 0 || rowSeen[row.at] {
			continue // not an output topic, or the same record read twice
		}
		rowSeen[row.at] = true
		stats[k].Records++
		in := get(row.in, row.event, row.source)
		switch {
		case in.n[k] == 0:
			in.first[k] = int32(ri)
		case compareRec(row.at, st.rows[in.first[k]].at) < 0:
			// The input's first record is the earliest one.
			in.first[k], in.second[k] = int32(ri), in.first[k]
		case in.n[k] == 1:
			in.second[k] = int32(ri)
		}
		in.n[k]++
	}
	complete := make([]bool, nOut)
	allComplete := nOut > 0
	for k, t := range outs {
		complete[k] = st.closed[t] == "complete"
		allComplete = allComplete && complete[k]
		if !complete[k] {
			reason("the final read of output topic %s is %s", st.topics[t], stats[k].Read)
		}
	}
	if nOut == 0 {
		reason("no output topic declared or written to")
	}
	slices.SortFunc(ins, func(x, y input) int { return compareIn(x.in, y.in) })
	pos := func(row int32) string {
		at := st.rows[row].at
		return "p" + strconv.FormatInt(at.partition, 10) + "@" + strconv.FormatInt(at.offset, 10)
	}
	type first struct {
		at recPos
		in inPos
		i  int32 // in ins
	}
	var firsts []first // each input's first record in each output topic, for order
	for i := range ins {
		in := &ins[i]
		match := txnMatch{in: in.in, hasIn: true, txns: txnsOf(in.in)}
		add := func(kind Kind, topic, detail string) {
			fs = append(fs, txnFinding{kind: kind, topic: topic, order: recPos{partition: in.in.partition, offset: in.in.offset},
				event: in.event, source: in.source, detail: detail, label: in.event, match: match})
		}
		var visible, missing []string
		for k, t := range outs {
			name := st.topics[t]
			if in.n[k] > 0 {
				stats[k].Inputs++
				if inputsKnown && !in.inTopic {
					stats[k].Unmatched += int64(in.n[k])
				}
				visible = append(visible, name)
				firsts = append(firsts, first{at: st.rows[in.first[k]].at, in: in.in, i: int32(i)})
			} else if complete[k] {
				missing = append(missing, name)
			}
			if in.n[k] > 1 {
				stats[k].Duplicates++
				add(OutputDuplicate, name, fmt.Sprintf("input %s has %d records in %s: %s, %s", in.in, in.n[k], name, pos(in.first[k]), pos(in.second[k])))
			}
		}
		switch {
		case len(visible) == 0 && in.inTopic && inputsKnown && allComplete:
			why := lostWhy(readsOf[in.in])
			for k, t := range outs {
				stats[k].Lost++
				add(OutputLost, st.topics[t], fmt.Sprintf("input %s has no record in any output topic: %s", in.in, why))
			}
		case len(visible) > 0 && len(missing) > 0:
			for k := range outs {
				if in.n[k] == 0 && complete[k] {
					stats[k].Torn++
				}
			}
			add(TornTransaction, "", fmt.Sprintf("input %s has a record in %s and none in %s", in.in, strings.Join(visible, ", "), strings.Join(missing, ", ")))
		}
	}

	// Order: in each output partition, the first records of one input
	// partition's inputs must follow their input offsets.
	slices.SortFunc(firsts, func(x, y first) int {
		return cmp.Or(cmp.Compare(x.at.topic, y.at.topic), cmp.Compare(x.at.partition, y.at.partition),
			cmp.Compare(x.in.partition, y.in.partition), cmp.Compare(x.at.offset, y.at.offset))
	})
	for j := 0; j < len(firsts); {
		k := j
		var top first
		for ; k < len(firsts) && firsts[k].at.topic == firsts[j].at.topic && firsts[k].at.partition == firsts[j].at.partition &&
			firsts[k].in.partition == firsts[j].in.partition; k++ {
			f := firsts[k]
			if k > j && f.in.offset < top.in.offset {
				in := &ins[f.i]
				name := st.topics[f.at.topic]
				stats[slot[f.at.topic]].OutOfOrder++
				fs = append(fs, txnFinding{kind: OutputOrder, topic: name, order: recPos{partition: f.in.partition, offset: f.in.offset},
					event: in.event, source: in.source, label: in.event, match: txnMatch{in: f.in, hasIn: true, txns: txnsOf(f.in)},
					detail: fmt.Sprintf("input %s written to %s at p%d@%d, after input %s at offset %d", f.in, name, f.at.partition, f.at.offset, top.in, top.at.offset)})
			}
			if k == j || f.in.offset > top.in.offset {
				top = f
			}
		}
		j = k
	}

	// Aborted records read: by a reader during the run, or by the final
	// read. A position names one record, so the reader's input must be
	// the one the aborted transaction wrote there.
	type look struct {
		at recPos
		sighting
	}
	var looks []look
	for at, sg := range st.seen {
		if slot[at.topic] >= 0 {
			looks = append(looks, look{at, sg})
			res.ConcurrentReads++
		}
	}
	for _, row := range st.rows {
		if _, ok := st.seen[row.at]; !ok {
			looks = append(looks, look{row.at, sighting{in: row.in, hasIn: true, event: row.event, reader: "the final read"}})
		}
	}
	slices.SortFunc(looks, func(x, y look) int { return compareRec(x.at, y.at) })
	looks = slices.CompactFunc(looks, func(x, y look) bool { return x.at == y.at })
	for _, lk := range looks {
		w, ok := st.written[lk.at]
		if !ok || st.txns[w.txn].outcome != history.Fail || (lk.hasIn && lk.in != w.in) || (!lk.hasIn && lk.event != w.event) {
			continue
		}
		t := &st.txns[w.txn]
		name := st.topics[lk.at.topic]
		stats[slot[lk.at.topic]].AbortedVisible++
		why := "aborted"
		if t.reason != "" {
			why += ": " + t.reason
		}
		fs = append(fs, txnFinding{kind: AbortedVisible, topic: name, order: lk.at, event: w.event, label: w.event,
			match:  txnMatch{in: w.in, hasIn: true, txns: append(slices.Clone(txnsOf(w.in)), t.key)},
			detail: fmt.Sprintf("record p%d@%d of %s (input %s) read by %s, written by transaction %s (%s)", lk.at.partition, lk.at.offset, name, w.in, lk.reader, t.id, why)})
	}
	if st.declared && res.ConcurrentReads == 0 {
		reason("no reader recorded what it read during the run, so aborted-visible is judged on the final read alone")
	}

	// Partitions left with an open transaction after the drain.
	last := map[[2]int64]partRow{}
	for _, p := range st.parts {
		last[[2]int64{int64(p.topic), p.partition}] = p
	}
	parts := make([]partRow, 0, len(last))
	for _, p := range last {
		parts = append(parts, p)
	}
	slices.SortFunc(parts, func(x, y partRow) int {
		return cmp.Or(cmp.Compare(x.topic, y.topic), cmp.Compare(x.partition, y.partition))
	})
	open := map[[2]int64][]string{} // partition left open: the undecided transactions that wrote past its stable offset
	for _, p := range parts {
		if k := slot[p.topic]; k >= 0 {
			stats[k].Partitions++
		}
		if p.lso < p.hwm {
			open[[2]int64{int64(p.topic), p.partition}] = nil
		}
	}
	if len(open) > 0 {
		for at, w := range st.written {
			k := [2]int64{int64(at.topic), at.partition}
			if keys, ok := open[k]; ok && at.offset >= last[k].lso {
				if t := &st.txns[w.txn]; t.outcome != history.OK && t.outcome != history.Fail && !slices.Contains(keys, t.key) {
					open[k] = append(keys, t.key)
				}
			}
		}
	}
	for _, p := range parts {
		k := [2]int64{int64(p.topic), p.partition}
		keys, ok := open[k]
		if !ok || slot[p.topic] < 0 {
			continue
		}
		slices.Sort(keys)
		name := st.topics[p.topic]
		stats[slot[p.topic]].LeftOpen++
		detail := fmt.Sprintf("%s partition %d: last stable offset %d, high watermark %d", name, p.partition, p.lso, p.hwm)
		if len(keys) > 0 {
			var ids []string
			for _, key := range keys {
				ids = append(ids, st.txns[st.txnByKey[key]].id)
			}
			detail += "; undecided transactions that wrote past it: " + strings.Join(ids, ", ")
		}
		fs = append(fs, txnFinding{kind: TransactionLeftOpen, topic: name, order: recPos{partition: p.partition}, label: name + "/" + strconv.FormatInt(p.partition, 10),
			detail: detail, match: txnMatch{part: recPos{topic: p.topic, partition: p.partition}, hasPart: true, txns: keys}})
	}
	for k, t := range outs {
		if stats[k].Partitions == 0 && st.declared {
			reason("the offsets of output topic %s were not read after the drain, so transaction-left-open is not judged", st.topics[t])
		}
	}

	established := len(v.txnReasons) == 0 && r.Facts.FinalRead == "complete" && (r.Facts.Drain == "complete" || r.Facts.Drain == DrainQuiet)
	var dup, missing bool
	for _, f := range fs {
		switch f.kind {
		case OutputDuplicate, AbortedVisible:
			dup = true
		case OutputLost, TornTransaction:
			missing = true
		}
	}
	res.Delivery = deliveryOf(dup, missing, established)
	res.Topics = stats
	res.Database = v.database(st.consumer, r.Facts.FinalRead == "complete")
	if res.Database != nil {
		res.Boundary = res.Delivery.Words() + " on Kafka's topics; " + res.Database.Delivery.Words() + " on the database"
	}
	r.TxnStage = res
	a.txnAnomalies(r, st, fs, replay)
}

// readInfo is what the transactions did with one input: how many that
// read it committed, aborted or stayed undecided, and their keys.
type readInfo struct {
	committed, aborted, open int32
	txns                     []string
}

// lostWhy says what the transactions did with an input no output topic
// has: where it was lost.
func lostWhy(ri *readInfo) string {
	switch {
	case ri == nil:
		return "no transaction read it"
	case ri.committed > 0:
		return "a transaction that read it committed, yet its records are not visible (its offsets were committed without its outputs)"
	case ri.open > 0:
		return "read only into transactions whose outcome is not known"
	}
	return "read only into transactions that aborted, and never retried"
}

// database counts the effects the processor, consumer group consumer,
// left on the database: the effects of the subscription of that name,
// per committed event. It is nil when that subscription has no effect.
// final says the effects ledger is authoritative.
func (v *view) database(consumer string, final bool) *DatabaseStats {
	si := slices.IndexFunc(v.subs, func(g *gsub) bool { return g.name == cmp.Or(consumer, defaultSubscription) })
	if si < 0 || !v.subEffects[si] && !v.subApplied[si] {
		return nil
	}
	s := v.subs[si]
	d := &DatabaseStats{Subscription: s.name, PerEvent: []EffectCount{}}
	per := map[int64]int64{}
	for i := range v.events {
		e := &v.events[i]
		if !e.committed() || e.flags&cPoison != 0 {
			continue
		}
		se := v.se(s, i)
		n := int64(max(se.applies, se.effects))
		if final {
			n = int64(se.effects)
		}
		d.Events++
		d.Effects += n
		per[n]++
		switch {
		case n == 0:
			d.Missing++
		case n > 1:
			d.Duplicated++
		}
	}
	for _, n := range slices.Sorted(maps.Keys(per)) {
		d.PerEvent = append(d.PerEvent, EffectCount{Effects: n, Events: per[n]})
	}
	d.Delivery = deliveryOf(d.Duplicated > 0, d.Missing > 0, final)
	return d
}

// txnAnomalies groups the stage's findings into r.Anomalies, by kind
// (in AnomalyKinds order) then topic, each anomaly's findings in input
// order, and fills the examples' ops from the history.
func (a *analyzer) txnAnomalies(r *Result, st *txnState, fs []txnFinding, replay func(restart func(), fn func([]history.Op) error) error) {
	slices.SortStableFunc(fs, func(x, y txnFinding) int {
		return cmp.Or(kindRank[x.kind]-kindRank[y.kind], strings.Compare(x.topic, y.topic), compareRec(x.order, y.order))
	})
	opts := a.opts
	type slot struct {
		ex *Example
		m  txnMatch
	}
	var slots []slot
	first := len(r.Anomalies)
	for i := 0; i < len(fs); {
		j := i
		for j < len(fs) && fs[j].kind == fs[i].kind && fs[j].topic == fs[i].topic {
			j++
		}
		an := Anomaly{Kind: fs[i].kind, Topic: fs[i].topic, Fatal: r.Guarantees.Fatal(fs[i].kind), Count: j - i, Events: []string{}}
		for n, f := range fs[i:j] {
			if n < opts.MaxEvents {
				an.Events = append(an.Events, f.label)
			}
			if n < opts.MaxExamples {
				an.Examples = append(an.Examples, Example{Event: f.event, Source: f.source, Detail: f.detail, Ops: []history.Op{}})
			}
		}
		r.Anomalies = append(r.Anomalies, an)
		i = j
	}
	// The slots point into r.Anomalies, which no longer grows.
	n := 0
	for ai := first; ai < len(r.Anomalies); ai++ {
		for ei := range r.Anomalies[ai].Examples {
			slots = append(slots, slot{&r.Anomalies[ai].Examples[ei], fs[n+ei].match})
		}
		n += r.Anomalies[ai].Count
	}
	if len(slots) == 0 {
		return
	}
	byIn := map[inPos][]int{}
	byTxn := map[string][]int{}
	byPart := map[[2]int64][]int{}
	byEvent := map[[2]string][]int{}
	for i, s := range slots {
		if s.m.hasIn {
			byIn[s.m.in] = append(byIn[s.m.in], i)
			k := [2]string{s.ex.Source, s.ex.Event}
			byEvent[k] = append(byEvent[k], i)
		}
		for _, k := range s.m.txns {
			byTxn[k] = append(byTxn[k], i)
		}
		if s.m.hasPart {
			byPart[[2]int64{int64(s.m.part.topic), s.m.part.partition}] = append(byPart[[2]int64{int64(s.m.part.topic), s.m.part.partition}], i)
		}
	}
	pos := int64(0)
	restart := func() {
		pos = 0
		for _, s := range slots {
			s.ex.Ops = s.ex.Ops[:0]
		}
	}
	_ = replay(restart, func(ops []history.Op) error {
		base := pos
		pos += int64(len(ops))
		for i := range ops {
			op := &ops[i]
			v := &op.Value
			var hit []int
			switch {
			case op.F == history.Txn:
				key := cmp.Or(v.Txn, "\x00"+op.Process)
				hit = byTxn[key]
			case op.F == history.TxnInput:
				hit = byIn[inPos{v.Partition, v.Offset}]
			case op.F == history.TxnOutput || op.F == history.OutputRead ||
				op.F == history.FinalRead && v.Table == history.TableOutput && v.Event != "":
				hit = byIn[inPos{v.InputPartition, v.InputOffset}]
				if op.F == history.TxnOutput && len(byPart) > 0 {
					if t, ok := st.topicIdx[v.Topic]; ok {
						hit = append(slices.Clone(hit), byPart[[2]int64{int64(t), v.Partition}]...)
					}
				}
			case op.F == history.FinalRead && v.Table == history.TableBroker && v.Event != "":
				hit = byIn[inPos{v.Partition, v.Offset}]
			case op.F == history.FinalRead && v.Table == history.TablePartition:
				if t, ok := st.topicIdx[v.Topic]; ok {
					hit = byPart[[2]int64{int64(t), v.Partition}]
				}
			case op.F == history.Deliver && v.Topic != "":
				// A delivery from an output topic names no input: it
				// belongs to the examples of its event.
				hit = byEvent[[2]string{v.Source, v.Event}]
			}
			for _, si := range hit {
				s := slots[si]
				if op.F == history.TxnOutput && !s.m.hasIn && !slices.Contains(s.m.txns, cmp.Or(v.Txn, "\x00"+op.Process)) {
					continue
				}
				if len(s.ex.Ops) < opts.MaxOps && (len(s.ex.Ops) == 0 || s.ex.Ops[len(s.ex.Ops)-1].Index != base+int64(i)) {
					o := *op
					o.Index = base + int64(i)
					s.ex.Ops = append(s.ex.Ops, o)
				}
			}
		}
		return nil
	})
}

func filled(n int, v int32) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = v
	}
	return s
}
