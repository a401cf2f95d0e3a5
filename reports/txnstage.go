package reports

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/history"
)

// txnStageGuarantees maps each anomaly kind of a transactional stage to
// the guarantee it breaks, in the order reports show them.
var txnStageGuarantees = []struct {
	kind checker.Kind
	name string
}{
	{checker.OutputDuplicate, "no output duplicates"},
	{checker.OutputLost, "no output lost"},
	{checker.TornTransaction, "transactions atomic"},
	{checker.AbortedVisible, "aborted records invisible"},
	{checker.OutputOrder, "input order kept"},
	{checker.TransactionLeftOpen, "no transaction left open"},
}

// txnStageName is how checks name the stage: its consumer group.
func txnStageName(st *checker.TxnStage) string {
	if st.Consumer == "" {
		return "transactional stage"
	}
	return st.Consumer
}

// txnStageChecks lists the stage's guarantees with what the run
// observed, over all its output topics.
func txnStageChecks(res *checker.Result, established bool) []Check {
	var out []Check
	for _, gu := range txnStageGuarantees {
		c := Check{Subscription: txnStageName(res.TxnStage), Guarantee: gu.name, Kind: gu.kind, Promised: res.Guarantees.Fatal(gu.kind)}
		for _, a := range res.Anomalies {
			if a.Kind != gu.kind || a.Subscription != "" {
				continue
			}
			c.Count += a.Count
			for _, e := range a.Events {
				if len(c.Events) < 10 && !slices.Contains(c.Events, e) {
					c.Events = append(c.Events, e)
				}
			}
		}
		c.Status = c.status(established)
		out = append(out, c)
	}
	return out
}

// txnStageView is the report's section on the transactional stage: its
// transactions, each output topic, and the two halves of the boundary
// side by side.
type txnStageView struct {
	Name, Input, Outputs string
	Transactions         []kv
	Topics               []checker.TopicStats
	// Topics and Database say what each side delivered, in words, and
	// with a class for its colour (ok, bad, unknown).
	TopicsDelivery, TopicsClass string
	Database                    *dbView
	Boundary                    string
}

type dbView struct {
	Subscription, Delivery, Class string
	Events, Effects               int64
	PerEvent                      string // "369 events once, 31 twice"
}

func deliveryClass(d checker.Delivery) string {
	switch d {
	case checker.ExactlyOnce:
		return "ok"
	case checker.DeliveryUnknown:
		return "unknown"
	}
	return "bad"
}

// newTxnStageView lays out st, nil when there is none.
func newTxnStageView(st *checker.TxnStage) *txnStageView {
	if st == nil {
		return nil
	}
	t := st.Transactions
	v := &txnStageView{Name: txnStageName(st), Input: st.Input, Outputs: strings.Join(st.Outputs, ", "),
		Transactions: []kv{{"begun", groupDigits(t.Begun)}, {"committed", groupDigits(t.Committed)}, {"aborted", groupDigits(t.Aborted)},
			{"indeterminate", groupDigits(t.Indeterminate)}, {"inputs", groupDigits(st.Inputs)}, {"retried inputs", groupDigits(st.Retried)},
			{"records read during the run", groupDigits(st.ConcurrentReads)}},
		Topics: st.Topics, TopicsDelivery: st.Delivery.Words(), TopicsClass: deliveryClass(st.Delivery), Boundary: st.Boundary}
	if d := st.Database; d != nil {
		var per []string
		for _, pe := range d.PerEvent {
			per = append(per, plural(pe.Events, "event")+" "+times(pe.Effects))
		}
		v.Database = &dbView{Subscription: d.Subscription, Delivery: d.Delivery.Words(), Class: deliveryClass(d.Delivery),
			Events: d.Events, Effects: d.Effects, PerEvent: strings.Join(per, ", ")}
	}
	return v
}

// times says n as "never", "once", "twice", "3 times".
func times(n int64) string {
	switch n {
	case 0:
		return "never"
	case 1:
		return "once"
	case 2:
		return "twice"
	}
	return strconv.FormatInt(n, 10) + " times"
}

// topicLine is one output topic in an example's timeline: every record
// of the example's input in it, who wrote it and who saw it.
type topicLine struct {
	Topic   string
	Records []recordLine
}

type recordLine struct {
	Where   string // p1@33
	Written string // "processor-0:1:7 (aborted)"
	Read    string // the readers during the run
	Final   bool   // in the final read_committed read
	Class   string // bad: an aborted record was seen; info: its transaction is undecided

	partition, offset int64 // to sort by
}

// topicLines lays out, from an example's ops, its input's records in each
// output topic; nil when the ops name no output record.
func topicLines(ops []history.Op) []topicLine {
	outcome := map[string]string{}
	for _, op := range ops {
		if op.F == history.Txn {
			switch op.Type {
			case history.OK:
				outcome[op.Value.Txn] = "committed"
			case history.Fail:
				outcome[op.Value.Txn] = "aborted"
			case history.Info:
				if outcome[op.Value.Txn] == "" {
					outcome[op.Value.Txn] = "outcome unknown"
				}
			}
		}
	}
	type rec struct {
		line, i int
		txn     string
		readers []string
		aborted bool // the harness found it aborted (table aborted)
	}
	var lines []topicLine
	recs := map[[3]string]*rec{}
	for _, op := range ops {
		v := op.Value
		if v.Topic == "" || op.Type != history.OK {
			continue
		}
		var reader string
		switch {
		case op.F == history.TxnOutput:
		case op.F == history.OutputRead:
			reader = op.Process
		case op.F == history.Deliver:
			reader = "delivered to " + v.Consumer
		case op.F == history.FinalRead && (v.Table == history.TableOutput || v.Table == history.TableAborted) && v.Event != "":
		default:
			continue
		}
		k := [3]string{v.Topic, strconv.FormatInt(v.Partition, 10), strconv.FormatInt(v.Offset, 10)}
		r := recs[k]
		if r == nil {
			li := slices.IndexFunc(lines, func(l topicLine) bool { return l.Topic == v.Topic })
			if li < 0 {
				li = len(lines)
				lines = append(lines, topicLine{Topic: v.Topic})
			}
			r = &rec{line: li, i: len(lines[li].Records)}
			lines[li].Records = append(lines[li].Records, recordLine{Where: fmt.Sprintf("p%d@%d", v.Partition, v.Offset), partition: v.Partition, offset: v.Offset})
			recs[k] = r
		}
		rl := &lines[r.line].Records[r.i]
		switch {
		case op.F == history.TxnOutput:
			r.txn = v.Txn
		case op.F == history.FinalRead && v.Table == history.TableAborted:
			r.aborted = true
		case op.F == history.FinalRead:
			rl.Final = true
		case !slices.Contains(r.readers, reader):
			r.readers = append(r.readers, reader)
		}
	}
	for _, r := range recs {
		rl := &lines[r.line].Records[r.i]
		rl.Read = strings.Join(r.readers, ", ")
		if r.txn == "" && r.aborted {
			// A processor that records no transaction: the harness's
			// uncommitted read says this one aborted.
			rl.Written = "aborted (read uncommitted, not committed)"
			if rl.Read != "" {
				rl.Class = "bad"
			}
		}
		if r.txn != "" {
			o := outcome[r.txn]
			if o == "" {
				o = "no outcome recorded"
			}
			rl.Written = r.txn + " (" + o + ")"
			switch {
			case o == "aborted" && (rl.Final || rl.Read != ""):
				rl.Class = "bad"
			case o != "committed" && o != "aborted":
				rl.Class = "info"
			}
		}
	}
	// In log order, whichever op named a record first.
	for _, l := range lines {
		slices.SortFunc(l.Records, func(x, y recordLine) int {
			return cmp.Or(cmp.Compare(x.partition, y.partition), cmp.Compare(x.offset, y.offset))
		})
	}
	return lines
}
