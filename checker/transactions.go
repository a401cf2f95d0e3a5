package checker

// This file is the transactional stage of issue 23: a
// consume-transform-produce processor between the events topic and its
// output topics, writing one record per input to each output topic and
// committing its input offsets in the same Kafka transaction, and the
// read_committed readers downstream. Shard 0 keeps the stage's state
// (txnState), fed by shard.op for the stage's own ops and by
// shard.observe for the ops that read its topics; finish judges it
// (judgeTxnStage) into Result.TxnStage, the stage's anomalies, and the
// reasons its facts are not established.
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
	// Outputs its output topics, as the txn-stage op declared them (and any
	// other topic its transactions wrote to, after them).
	Consumer string   `json:"consumer"`
	Input    string   `json:"input"`
	Outputs  []string `json:"outputs"`
	// Declared: a txn-stage op declared the stage. Without one the output
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
	// Uncommitted is how the harness's read_uncommitted read of the
	// topic ended (complete, failed; absent when the history has none),
	// and Aborted the records it found that the read_committed read did
	// not (absent: none): records of aborted transactions, whoever
	// wrote them.
	Uncommitted string `json:"uncommitted,omitempty"`
	Aborted     int64  `json:"aborted,omitempty"`
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

// deliveryOf names what was observed: duplicates, missing records, and
// whether the facts that would show either were established.
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
	// All int64, so the struct is plain memory and hashes fast as a map
	// key.
	topic     int64
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
	topic     int64
	partition int64
	lso, hwm  int64
}

// txnState is what shard 0 gathers about a transactional stage.
type txnState struct {
	declared bool
	consumer string
	input    string
	declOut  []int64 // the declared output topics, in declaration order
	topicIdx map[string]int64
	topics   []string
	isOutput []bool // by topic: declared, or written to by a transaction
	txns     []txnRec
	txnByKey map[string]int32 // the latest transaction of each key
	perProc  map[string]int   // transactions begun without a txn, per process
	reads    []txnReadRec     // txn-input ops
	written  map[recPos]written
	seen     map[recPos]sighting
	// The current final-read attempt: inputs (broker rows), output rows,
	// how each topic's read closed, partition rows.
	inputs []inputRow
	rows   []outRow
	closed map[int64]string
	parts  []partRow
	// The records the uncommitted read found aborted (table aborted),
	// and how each topic's uncommitted read closed.
	abortedRows   []outRow
	abortedClosed map[int64]string
}

// txnState returns the shard's stage, starting one if it has none: an
// op of the stage without a txn-stage op still makes a stage, whose
// facts are then not established.
func (s *shard) txnState() *txnState {
	if s.txnStage == nil {
		s.txnStage = &txnState{topicIdx: map[string]int64{}, txnByKey: map[string]int32{}, perProc: map[string]int{},
			written: map[recPos]written{}, seen: map[recPos]sighting{}, closed: map[int64]string{}, abortedClosed: map[int64]string{}}
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
		return op.Value.Table == history.TableOutput || op.Value.Table == history.TablePartition || op.Value.Table == history.TableAborted
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

func (st *txnState) topic(name string) int64 {
	i, ok := st.topicIdx[name]
	if !ok {
		i = int64(len(st.topics))
		st.topicIdx[name] = i
		st.topics = append(st.topics, name)
		st.isOutput = append(st.isOutput, false)
	}
	return i
}

// declare folds a txn-stage op.
func (st *txnState) declare(v *history.Value) {
	st.declared = true
	st.consumer, st.input = cmp.Or(v.Consumer, st.consumer), cmp.Or(v.Target, st.input)
	for _, t := range v.Topics {
		if i := st.topic(t); !slices.Contains(st.declOut, i) {
			st.isOutput[i] = true
			st.declOut = append(st.declOut, i)
		}
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
		if op.F == history.FinalRead && v.Event == "" && v.Topic != "" {
			closed := st.closed
			if v.Table == history.TableAborted {
				closed = st.abortedClosed
			}
			if i := st.topic(v.Topic); v.Table != history.TablePartition && closed[i] != "complete" {
				closed[i] = "failed"
			}
		}
		return
	}
	switch op.F {
	case history.TxnInput:
		st.reads = append(st.reads, txnReadRec{inPos{v.Partition, v.Offset}, st.txn(op, false)})
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
		case v.Table == history.TableAborted && v.Event == "":
			st.abortedClosed[st.topic(v.Topic)] = "complete"
		case v.Table == history.TableAborted:
			st.abortedRows = append(st.abortedRows, outRow{at: recPos{st.topic(v.Topic), v.Partition, v.Offset}, in: inPos{v.InputPartition, v.InputOffset}, event: v.Event, source: v.Source})
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
		if v.Topic != st.input {
			st.sight(v, "subscription "+cmp.Or(v.Consumer, defaultSubscription), false)
		}
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
	st.inputs, st.rows, st.parts, st.abortedRows = st.inputs[:0], st.rows[:0], st.parts[:0], st.abortedRows[:0]
	clear(st.closed)
	clear(st.abortedClosed)
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
// TxnStageKinds order), and in v.txnReasons why its facts are not
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
	j := newTxnJudge(st, s0.fr.broker == "complete")
	j.transactions()
	j.outputs()
	j.order()
	j.aborted()
	j.leftOpen()
	res := j.res
	established := len(j.reasons) == 0 && r.Facts.FinalRead == "complete" && (r.Facts.Drain == "complete" || r.Facts.Drain == DrainQuiet)
	var dup, missing bool
	for _, f := range j.fs {
		switch f.kind {
		case OutputDuplicate, AbortedVisible:
			dup = true
		case OutputLost, TornTransaction:
			missing = true
		}
	}
	res.Delivery = deliveryOf(dup, missing, established)
	res.Database = v.database(st.consumer, r.Facts.FinalRead == "complete")
	if res.Database != nil {
		res.Boundary = res.Delivery.Words() + " on Kafka's topics; " + res.Database.Delivery.Words() + " on the database"
	}
	r.TxnStage = res
	v.txnReasons = append(v.txnReasons, j.reasons...)
	a.txnAnomalies(r, st, j.fs, replay)
}

// txnJudge judges a stage's state, one kind per method.
type txnJudge struct {
	st  *txnState
	res *TxnStage
	// outs are the output topics (their indexes in st.topics), declared
	// first; slot maps a topic to its place in outs, -1 if not an output.
	outs  []int64
	slot  []int
	stats []TopicStats // by slot
	// complete: the final read of the output topic of each slot is.
	complete    []bool
	allComplete bool
	// inputsKnown: the final read read the input topic whole.
	inputsKnown bool
	// uncommittedComplete: the uncommitted read of every output topic
	// closed ok; abortedSeen counts the aborted records it found;
	// visible: the final read found a record in an output topic.
	uncommittedComplete bool
	abortedSeen         int64
	visible             bool
	// reads are the txn-input ops, sorted by input.
	reads []txnReadRec
	// ins are the inputs (the input topic's records, and the inputs the
	// output rows name), sorted by position; per input and slot, in
	// flat arrays of len(ins)*len(outs): its first row, a second row at
	// another position, and how many rows it has at distinct positions.
	ins                  []txnInput
	first, second, nRows []int32
	reasons              []string
	fs                   []txnFinding
}

// txnReadRec is a txn-input op: an input read into a transaction.
type txnReadRec struct {
	in  inPos
	txn int32
}

type txnInput struct {
	in            inPos
	event, source string
	inTopic       bool // the input topic holds it
}

func newTxnJudge(st *txnState, inputsKnown bool) *txnJudge {
	j := &txnJudge{st: st, inputsKnown: inputsKnown,
		res: &TxnStage{Consumer: st.consumer, Input: st.input, Declared: st.declared, Outputs: []string{}, Topics: []TopicStats{}}}
	if !st.declared {
		j.reason("transactions were recorded but no txn-stage op declares the stage, so its output topics are not known")
	}
	// The declared output topics first, then any other a transaction
	// wrote to.
	j.outs = slices.Clone(st.declOut)
	for i := range st.topics {
		if st.isOutput[i] && !slices.Contains(j.outs, int64(i)) {
			j.outs = append(j.outs, int64(i))
		}
	}
	j.slot = slices.Repeat([]int{-1}, len(st.topics))
	for k, t := range j.outs {
		j.slot[t] = k
		j.res.Outputs = append(j.res.Outputs, st.topics[t])
	}
	if len(j.outs) == 0 {
		j.reason("no output topic declared or written to")
	}
	j.stats = make([]TopicStats, len(j.outs))
	j.complete = make([]bool, len(j.outs))
	j.allComplete = len(j.outs) > 0
	j.uncommittedComplete = len(j.outs) > 0
	for k, t := range j.outs {
		j.stats[k] = TopicStats{Topic: st.topics[t], Read: cmp.Or(st.closed[t], "missing"), Uncommitted: st.abortedClosed[t]}
		j.complete[k] = st.closed[t] == "complete"
		j.allComplete = j.allComplete && j.complete[k]
		j.uncommittedComplete = j.uncommittedComplete && st.abortedClosed[t] == "complete"
	}
	seen := make(map[recPos]bool, len(st.abortedRows))
	for _, row := range st.abortedRows {
		if k := j.slot[row.at.topic]; k >= 0 && !seen[row.at] {
			seen[row.at] = true
			j.stats[k].Aborted++
			j.abortedSeen++
		}
	}
	for _, row := range st.rows {
		if j.slot[row.at.topic] >= 0 {
			j.visible = true
			break
		}
	}
	j.res.Topics = j.stats
	j.reads = slices.Clone(st.reads)
	slices.SortStableFunc(j.reads, func(x, y txnReadRec) int { return compareIn(x.in, y.in) })
	return j
}

func (j *txnJudge) reason(format string, args ...any) {
	j.reasons = append(j.reasons, "transactional stage: "+fmt.Sprintf(format, args...))
}

// readsOf returns the txn-input ops of input in.
func (j *txnJudge) readsOf(in inPos) []txnReadRec {
	lo, _ := slices.BinarySearchFunc(j.reads, in, func(x txnReadRec, in inPos) int { return compareIn(x.in, in) })
	hi := lo
	for hi < len(j.reads) && j.reads[hi].in == in {
		hi++
	}
	return j.reads[lo:hi]
}

// txnsOf returns the keys of the transactions that read input in.
func (j *txnJudge) txnsOf(in inPos) []string {
	var keys []string
	for _, rd := range j.readsOf(in) {
		if k := j.st.txns[rd.txn].key; !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}

// transactions counts the transactions, and the retried inputs.
func (j *txnJudge) transactions() {
	c := &j.res.Transactions
	for _, t := range j.st.txns {
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
		j.withoutLineage()
	case c.Committed == 0:
		j.reason("no transaction committed")
	}
	if c.Begun > 0 && c.Aborted == 0 && j.abortedSeen == 0 {
		j.reason("no transaction aborted, so no reader ever had an aborted record to skip")
	}
	for i := 0; i < len(j.reads); {
		k, aborted, txns := i, false, 0
		for ; k < len(j.reads) && j.reads[k].in == j.reads[i].in; k++ {
			aborted = aborted || j.st.txns[j.reads[k].txn].outcome == history.Fail
			if k == i || j.reads[k].txn != j.reads[k-1].txn {
				txns++
			}
		}
		if aborted && txns > 1 {
			j.res.Retried++
		}
		i = k
	}
}

// withoutLineage decides what the transactions' ops would have, for a
// processor that records none (a team's, docs/contract.md "Processor"),
// from what the harness saw itself: a record visible read_committed
// shows a transaction committed, a record of the uncommitted read the
// committed read does not have (an aborted row) that one aborted.
func (j *txnJudge) withoutLineage() {
	if !j.visible {
		j.reason("no transaction was recorded, and the final read found no record in the output topics")
	}
	var unread []string
	for k, t := range j.outs {
		if j.stats[k].Uncommitted != "complete" {
			unread = append(unread, j.st.topics[t])
		}
	}
	switch {
	case len(unread) > 0:
		j.reason("no transaction was recorded, and %s not read uncommitted whole, so which records aborted (and whether a reader read one) is not known", topicNames(unread))
	case j.abortedSeen == 0:
		j.reason("no transaction was recorded, and the output topics read uncommitted hold no record the committed read does not: no transaction aborted, so no reader ever had an aborted record to skip")
	}
}

// topicNames says "output topic a" or "output topics a, b were".
func topicNames(topics []string) string {
	if len(topics) == 1 {
		return "output topic " + topics[0] + " was"
	}
	return "output topics " + strings.Join(topics, ", ") + " were"
}

// outputs judges each input against the final read of the output
// topics: output-duplicate, output-lost and torn-transaction.
func (j *txnJudge) outputs() {
	st, nOut := j.st, len(j.outs)
	idx := make(map[inPos]int32, len(st.inputs))
	get := func(in inPos, event, source string) int32 {
		i, ok := idx[in]
		if !ok {
			i = int32(len(j.ins))
			idx[in] = i
			j.ins = append(j.ins, txnInput{in: in, event: event, source: source})
		}
		return i
	}
	for _, ir := range st.inputs {
		j.ins[get(ir.in, ir.event, ir.source)].inTopic = true
	}
	j.res.Inputs = int64(len(j.ins))
	if st.declared && !j.inputsKnown {
		j.reason("the input topic was not read whole after the drain, so output-lost is not judged")
	}
	for k, t := range j.outs {
		if !j.complete[k] {
			j.reason("the final read of output topic %s is %s", st.topics[t], j.stats[k].Read)
		}
	}
	// The rows, by input; the same record read twice counts once.
	type rowRef struct {
		in  int32
		row int32
	}
	refs := make([]rowRef, 0, len(st.rows))
	seen := make(map[recPos]bool, len(st.rows))
	for ri, row := range st.rows {
		if j.slot[row.at.topic] < 0 || seen[row.at] {
			continue
		}
		seen[row.at] = true
		refs = append(refs, rowRef{get(row.in, row.event, row.source), int32(ri)})
	}
	// Sort the inputs by position, and renumber the rows' inputs.
	order := make([]int32, len(j.ins))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(x, y int32) int { return compareIn(j.ins[x].in, j.ins[y].in) })
	rank := make([]int32, len(j.ins))
	sorted := make([]txnInput, len(j.ins))
	for r, i := range order {
		rank[i], sorted[r] = int32(r), j.ins[i]
	}
	j.ins = sorted
	j.first, j.second, j.nRows = slices.Repeat([]int32{-1}, len(j.ins)*nOut), slices.Repeat([]int32{-1}, len(j.ins)*nOut), make([]int32, len(j.ins)*nOut)
	for _, ref := range refs {
		row := &st.rows[ref.row]
		k := j.slot[row.at.topic]
		j.stats[k].Records++
		x := int(rank[ref.in])*nOut + k
		switch {
		case j.nRows[x] == 0:
			j.first[x] = ref.row
		case compareRec(row.at, st.rows[j.first[x]].at) < 0:
			// The input's first record is the earliest one.
			j.first[x], j.second[x] = ref.row, j.first[x]
		case j.nRows[x] == 1:
			j.second[x] = ref.row
		}
		j.nRows[x]++
	}
	pos := func(row int32) string {
		at := st.rows[row].at
		return "p" + strconv.FormatInt(at.partition, 10) + "@" + strconv.FormatInt(at.offset, 10)
	}
	for i := range j.ins {
		in := &j.ins[i]
		var visible, missing []string
		for k, t := range j.outs {
			name, x := st.topics[t], i*nOut+k
			switch {
			case j.nRows[x] > 0:
				j.stats[k].Inputs++
				if j.inputsKnown && !in.inTopic {
					j.stats[k].Unmatched += int64(j.nRows[x])
				}
				visible = append(visible, name)
			case j.complete[k]:
				missing = append(missing, name)
			}
			if j.nRows[x] > 1 {
				j.stats[k].Duplicates++
				j.add(OutputDuplicate, name, in, fmt.Sprintf("input %s has %d records in %s: %s, %s", in.in, j.nRows[x], name, pos(j.first[x]), pos(j.second[x])))
			}
		}
		switch {
		case len(visible) == 0 && in.inTopic && j.inputsKnown && j.allComplete:
			why := j.lostWhy(in.in)
			for k, t := range j.outs {
				j.stats[k].Lost++
				j.add(OutputLost, st.topics[t], in, fmt.Sprintf("input %s has no record in any output topic: %s", in.in, why))
			}
		case len(visible) > 0 && len(missing) > 0:
			for k := range j.outs {
				if j.nRows[i*nOut+k] == 0 && j.complete[k] {
					j.stats[k].Torn++
				}
			}
			j.add(TornTransaction, "", in, fmt.Sprintf("input %s has a record in %s and none in %s", in.in, strings.Join(visible, ", "), strings.Join(missing, ", ")))
		}
	}
}

// add adds a finding of input in.
func (j *txnJudge) add(kind Kind, topic string, in *txnInput, detail string) {
	j.fs = append(j.fs, txnFinding{kind: kind, topic: topic, order: recPos{partition: in.in.partition, offset: in.in.offset},
		event: in.event, source: in.source, detail: detail, label: in.event, match: txnMatch{in: in.in, hasIn: true, txns: j.txnsOf(in.in)}})
}

// lostWhy says what the transactions did with an input no output topic
// has: where it was lost.
func (j *txnJudge) lostWhy(in inPos) string {
	var committed, open int
	reads := j.readsOf(in)
	for _, rd := range reads {
		switch j.st.txns[rd.txn].outcome {
		case history.OK:
			committed++
		case history.Fail:
		default:
			open++
		}
	}
	switch {
	case len(reads) == 0:
		return "no transaction read it"
	case committed > 0:
		return "a transaction that read it committed, yet its records are not visible (its offsets were committed without its outputs)"
	case open > 0:
		return "read only into transactions whose outcome is not known"
	}
	return "read only into transactions that aborted, and never retried"
}

// order judges output-order: in each output partition, the first records
// of one input partition's inputs must follow their input offsets.
func (j *txnJudge) order() {
	st, nOut := j.st, len(j.outs)
	type first struct {
		at recPos
		i  int32 // in j.ins
	}
	var firsts []first
	for x, row := range j.first {
		if row >= 0 {
			firsts = append(firsts, first{at: st.rows[row].at, i: int32(x / nOut)})
		}
	}
	slices.SortFunc(firsts, func(x, y first) int {
		return cmp.Or(cmp.Compare(x.at.topic, y.at.topic), cmp.Compare(x.at.partition, y.at.partition),
			cmp.Compare(j.ins[x.i].in.partition, j.ins[y.i].in.partition), cmp.Compare(x.at.offset, y.at.offset))
	})
	for a := 0; a < len(firsts); {
		b, top := a, firsts[a]
		for ; b < len(firsts) && firsts[b].at.topic == top.at.topic && firsts[b].at.partition == top.at.partition &&
			j.ins[firsts[b].i].in.partition == j.ins[top.i].in.partition; b++ {
			f := firsts[b]
			in, high := &j.ins[f.i], &j.ins[top.i]
			switch {
			case in.in.offset < high.in.offset:
				name := st.topics[f.at.topic]
				j.stats[j.slot[f.at.topic]].OutOfOrder++
				j.add(OutputOrder, name, in, fmt.Sprintf("input %s written to %s at p%d@%d, after input %s at offset %d", in.in, name, f.at.partition, f.at.offset, high.in, top.at.offset))
			case in.in.offset > high.in.offset:
				top = f
			}
		}
		a = b
	}
}

// aborted judges aborted-visible: a record an aborted transaction wrote
// was read, by a reader during the run or by the final read. A position
// names one record, so the reader's input must be the one the aborted
// transaction wrote there.
func (j *txnJudge) aborted() {
	st := j.st
	for at := range st.seen {
		if j.slot[at.topic] >= 0 {
			j.res.ConcurrentReads++
		}
	}
	if st.declared && j.res.ConcurrentReads == 0 {
		j.reason("no reader recorded what it read during the run, so aborted-visible is judged on the final read alone")
	}
	// Only the records of aborted transactions matter; look each up in
	// what was read.
	type look struct {
		at recPos
		sighting
	}
	var looks []look
	var rowsOf map[recPos]*outRow
	for at, w := range st.written {
		if st.txns[w.txn].outcome != history.Fail {
			continue
		}
		if sg, ok := st.seen[at]; ok {
			looks = append(looks, look{at, sg})
			continue
		}
		if rowsOf == nil {
			rowsOf = make(map[recPos]*outRow, len(st.rows))
			for i := range st.rows {
				rowsOf[st.rows[i].at] = &st.rows[i]
			}
		}
		if row, ok := rowsOf[at]; ok {
			looks = append(looks, look{at, sighting{in: row.in, hasIn: true, event: row.event, reader: "the final read"}})
		}
	}
	slices.SortFunc(looks, func(x, y look) int { return compareRec(x.at, y.at) })
	j.abortedRead()
	for _, lk := range looks {
		w := st.written[lk.at]
		if lk.hasIn && lk.in != w.in || !lk.hasIn && lk.event != w.event {
			continue // another record at the same position
		}
		t := &st.txns[w.txn]
		name := st.topics[lk.at.topic]
		j.stats[j.slot[lk.at.topic]].AbortedVisible++
		why := "aborted"
		if t.reason != "" {
			why += ": " + t.reason
		}
		j.fs = append(j.fs, txnFinding{kind: AbortedVisible, topic: name, order: lk.at, event: w.event, label: w.event,
			match:  txnMatch{in: w.in, hasIn: true, txns: append(j.txnsOf(w.in), t.key)},
			detail: fmt.Sprintf("record p%d@%d of %s (input %s) read by %s, written by transaction %s (%s)", lk.at.partition, lk.at.offset, name, w.in, lk.reader, t.id, why)})
	}
}

// abortedRead judges aborted-visible for the records the harness found
// aborted itself (table aborted: read uncommitted, not read committed)
// and no aborted transaction's op names (those are judged by their
// transactions): each one a reader read during the run. The final read
// cannot have read them: they are what it did not read.
func (j *txnJudge) abortedRead() {
	st := j.st
	done := make(map[recPos]bool, len(st.abortedRows))
	rows := slices.Clone(st.abortedRows)
	slices.SortFunc(rows, func(x, y outRow) int { return compareRec(x.at, y.at) })
	for _, row := range rows {
		k := j.slot[row.at.topic]
		if k < 0 || done[row.at] {
			continue
		}
		done[row.at] = true
		if w, ok := st.written[row.at]; ok && st.txns[w.txn].outcome == history.Fail {
			continue // its transaction's ops judge it
		}
		sg, ok := st.seen[row.at]
		if !ok || sg.hasIn && sg.in != row.in || !sg.hasIn && sg.event != row.event {
			continue // not read, or another record at the same position
		}
		name := st.topics[row.at.topic]
		j.stats[k].AbortedVisible++
		j.fs = append(j.fs, txnFinding{kind: AbortedVisible, topic: name, order: row.at, event: row.event, source: row.source, label: row.event,
			match:  txnMatch{in: row.in, hasIn: true, txns: j.txnsOf(row.in)},
			detail: fmt.Sprintf("record p%d@%d of %s (input %s) read by %s, and not visible read_committed after the drain: its transaction aborted", row.at.partition, row.at.offset, name, row.in, sg.reader)})
	}
}

// leftOpen judges transaction-left-open: a partition of an output topic
// whose last stable offset is below its high watermark after the drain.
func (j *txnJudge) leftOpen() {
	st := j.st
	type part struct{ topic, partition int64 }
	last := map[part]partRow{}
	for _, p := range st.parts {
		last[part{p.topic, p.partition}] = p
	}
	parts := slices.SortedFunc(maps.Values(last), func(x, y partRow) int {
		return cmp.Or(cmp.Compare(x.topic, y.topic), cmp.Compare(x.partition, y.partition))
	})
	open := map[part][]string{} // partitions left open: the undecided transactions that wrote past the stable offset
	for _, p := range parts {
		if k := j.slot[p.topic]; k >= 0 {
			j.stats[k].Partitions++
			if p.lso < p.hwm {
				open[part{p.topic, p.partition}] = nil
			}
		}
	}
	for k, t := range j.outs {
		if j.stats[k].Partitions == 0 && st.declared {
			j.reason("the offsets of output topic %s were not read after the drain, so transaction-left-open is not judged", st.topics[t])
		}
	}
	if len(open) == 0 {
		return
	}
	for at, w := range st.written {
		k := part{at.topic, at.partition}
		if keys, ok := open[k]; ok && at.offset >= last[k].lso {
			if t := &st.txns[w.txn]; t.outcome != history.OK && t.outcome != history.Fail && !slices.Contains(keys, t.key) {
				open[k] = append(keys, t.key)
			}
		}
	}
	for _, p := range parts {
		keys, ok := open[part{p.topic, p.partition}]
		if !ok {
			continue
		}
		slices.Sort(keys)
		name := st.topics[p.topic]
		j.stats[j.slot[p.topic]].LeftOpen++
		detail := fmt.Sprintf("%s partition %d: last stable offset %d, high watermark %d", name, p.partition, p.lso, p.hwm)
		if len(keys) > 0 {
			var ids []string
			for _, key := range keys {
				ids = append(ids, st.txns[st.txnByKey[key]].id)
			}
			detail += "; undecided transactions that wrote past it: " + strings.Join(ids, ", ")
		}
		j.fs = append(j.fs, txnFinding{kind: TransactionLeftOpen, topic: name, order: recPos{partition: p.partition}, label: name + "/" + strconv.FormatInt(p.partition, 10),
			detail: detail, match: txnMatch{part: recPos{topic: p.topic, partition: p.partition}, hasPart: true, txns: keys}})
	}
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
	same := func(x, y txnFinding) bool { return x.kind == y.kind && x.topic == y.topic }
	runs(fs, same, func(fs []txnFinding) {
		an := Anomaly{Kind: fs[0].kind, Topic: fs[0].topic, Fatal: r.Guarantees.Fatal(fs[0].kind)}
		fillAnomaly(&an, fs, opts, func(f txnFinding) string { return f.label },
			func(f txnFinding) Example {
				return Example{Event: f.event, Source: f.source, Detail: f.detail, Ops: []history.Op{}}
			})
		r.Anomalies = append(r.Anomalies, an)
	})
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
			k := [2]int64{s.m.part.topic, s.m.part.partition}
			byPart[k] = append(byPart[k], i)
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
				op.F == history.FinalRead && (v.Table == history.TableOutput || v.Table == history.TableAborted) && v.Event != "":
				hit = byIn[inPos{v.InputPartition, v.InputOffset}]
				if op.F == history.TxnOutput && len(byPart) > 0 {
					if t, ok := st.topicIdx[v.Topic]; ok {
						hit = append(slices.Clone(hit), byPart[[2]int64{t, v.Partition}]...)
					}
				}
			case op.F == history.FinalRead && v.Table == history.TableBroker && v.Event != "":
				hit = byIn[inPos{v.Partition, v.Offset}]
			case op.F == history.FinalRead && v.Table == history.TablePartition:
				if t, ok := st.topicIdx[v.Topic]; ok {
					hit = byPart[[2]int64{t, v.Partition}]
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
