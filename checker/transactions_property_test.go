package checker

import (
	"cmp"
	"slices"
	"strconv"
	"testing"

	"pgregory.net/rapid"

	"github.com/deliverycheck/deliverycheck/history"
)

// genTxnStage draws a correct transactional stage, not yet finished: events
// on 1-3 input partitions (some published twice by the relay), a
// processor that reads each partition in order in batches of 1-3
// inputs, aborts its first transaction and about a third of the others
// on purpose and retries them, and is sometimes killed at a commit that
// did or did not take effect; a reader during the run, a subscription
// downstream, and maybe a database effect applied once per event.
func genTxnStage(t *rapid.T) *txnHist {
	nParts := rapid.Int64Range(1, 3).Draw(t, "input-partitions")
	s := newTxnHist(rapid.Int64Range(1, 2).Draw(t, "output-partitions"))
	s.db = rapid.Bool().Draw(t, "db")
	next := make([]int64, nParts)
	queue := make([][]stInput, nParts)
	publish := func(in func(p, off int64) stInput) {
		p := rapid.Int64Range(0, nParts-1).Draw(t, "partition")
		i := in(p, next[p])
		next[p]++
		queue[p] = append(queue[p], i)
	}
	nEvents := rapid.IntRange(1, 12).Draw(t, "events")
	for i := range nEvents {
		var e stInput
		publish(func(p, off int64) stInput { e = s.event("e"+strconv.Itoa(i), p, off); return e })
		if rapid.IntRange(0, 5).Draw(t, "republish") == 0 {
			publish(func(p, off int64) stInput { return s.republish(e, p, off) })
		}
	}
	read := false
	for first := true; ; first = false {
		var pending []int64
		for p := range queue {
			if len(queue[p]) > 0 {
				pending = append(pending, int64(p))
			}
		}
		if len(pending) == 0 {
			break
		}
		p := rapid.SampledFrom(pending).Draw(t, "batch-partition")
		batch := queue[p][:rapid.IntRange(1, min(3, len(queue[p]))).Draw(t, "batch")]
		end, committed := history.Fail, false
		if !first {
			switch rapid.IntRange(0, 5).Draw(t, "end") {
			case 0, 1, 2:
				end, committed = history.OK, true
			case 3:
				end, committed = history.Info, rapid.Bool().Draw(t, "took-effect")
			}
		}
		s.transact(end, committed, batch...)
		if committed {
			queue[p] = queue[p][len(batch):]
			if !read || rapid.Bool().Draw(t, "read") {
				s.read(batch...)
				read = true
			}
		}
	}
	s.consume(s.inputs...)
	return s
}

func (s *txnHist) finishDrawn(f stFinal) history.History {
	if s.db {
		f.dbEffects = 1
	}
	return s.finish(f)
}

func TestPropertyStageCorrectIsValid(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := genTxnStage(t)
		h := s.finishDrawn(stFinal{})
		r := Check(h, Options{Guarantees: strict})
		// Nothing exercised is not valid: without a transaction that
		// surely committed, the verdict is unknown.
		want, delivery := Unknown, DeliveryUnknown
		for _, end := range s.ends {
			if end == history.OK {
				want, delivery = Valid, ExactlyOnce
			}
		}
		if r.Valid != want || len(r.Anomalies) != 0 || r.TxnStage.Delivery != delivery {
			t.Fatalf("correct stage judged %s: %q\nanomalies %+v\nstage %+v\n%s", r.Valid, r.Reasons, r.Anomalies, r.TxnStage, dump(h))
		}
		if db := r.TxnStage.Database; s.db != (db != nil) || db != nil && db.Delivery != ExactlyOnce {
			t.Fatalf("database %+v", r.TxnStage.Database)
		}
	})
}

// txnPlant plants one anomaly of its kind in a drawn stage and
// finishes it, returning the history and where the anomaly must be
// found ("where:label"); ok is false when the stage has no place for it.
type txnPlant func(t *rapid.T, s *txnHist) (h history.History, want []string, ok bool)

// committedRecords are s's records that a read_committed reader sees.
func (s *txnHist) committedRecords() []stRecord {
	var out []stRecord
	for _, r := range s.records {
		if r.committed {
			out = append(out, r)
		}
	}
	return out
}

// isRow reports whether an output row is of input in (and topic, if
// not "").
func isRow(v history.Value, in inPos, topic string) bool {
	return v.InputPartition == in.partition && v.InputOffset == in.offset && (topic == "" || v.Topic == topic)
}

var txnPlants = map[Kind]txnPlant{
	OutputDuplicate: func(t *rapid.T, s *txnHist) (history.History, []string, bool) {
		r := rapid.SampledFrom(s.committedRecords()).Draw(t, "duplicated")
		h := s.finishDrawn(stFinal{rows: func(rows []history.Value) []history.Value {
			v := s.recValue(r, "")
			v.Table, v.Offset = history.TableOutput, 1000 // a second record, later in the partition
			return append(rows, v)
		}})
		return h, []string{r.topic + ":" + r.in.event}, true
	},
	OutputLost: func(t *rapid.T, s *txnHist) (history.History, []string, bool) {
		in := rapid.SampledFrom(s.inputs).Draw(t, "lost")
		h := s.finishDrawn(stFinal{rows: func(rows []history.Value) []history.Value {
			return slices.DeleteFunc(rows, func(v history.Value) bool { return isRow(v, in.in, "") })
		}})
		return h, []string{stInvoices + ":" + in.event, stRevenue + ":" + in.event}, true
	},
	AbortedVisible: func(t *rapid.T, s *txnHist) (history.History, []string, bool) {
		var aborted []stRecord
		for _, r := range s.records {
			if s.ends[r.txn] == history.Fail {
				aborted = append(aborted, r)
			}
		}
		r := rapid.SampledFrom(aborted).Draw(t, "aborted")
		s.b.op("reader-1", history.OK, history.OutputRead, s.recValue(r, ""))
		return s.finishDrawn(stFinal{}), []string{r.topic + ":" + r.in.event}, true
	},
	TornTransaction: func(t *rapid.T, s *txnHist) (history.History, []string, bool) {
		in := rapid.SampledFrom(s.inputs).Draw(t, "torn")
		topic := rapid.SampledFrom(stOutputs).Draw(t, "torn-topic")
		h := s.finishDrawn(stFinal{rows: func(rows []history.Value) []history.Value {
			return slices.DeleteFunc(rows, func(v history.Value) bool { return isRow(v, in.in, topic) })
		}})
		return h, []string{"the transactional stage:" + in.event}, true
	},
	OutputOrder: func(t *rapid.T, s *txnHist) (history.History, []string, bool) {
		// Two records of one input partition, next to each other in one
		// output partition, swap places.
		recs := s.committedRecords()
		slices.SortFunc(recs, func(x, y stRecord) int {
			return cmp.Or(cmp.Compare(x.topic, y.topic), cmp.Compare(x.at.partition, y.at.partition),
				cmp.Compare(x.in.in.partition, y.in.in.partition), cmp.Compare(x.at.offset, y.at.offset))
		})
		var pairs [][2]stRecord
		for i := 1; i < len(recs); i++ {
			x, y := recs[i-1], recs[i]
			if x.topic == y.topic && x.at.partition == y.at.partition && x.in.in.partition == y.in.in.partition {
				pairs = append(pairs, [2]stRecord{x, y})
			}
		}
		if len(pairs) == 0 {
			return nil, nil, false
		}
		pr := rapid.SampledFrom(pairs).Draw(t, "swapped")
		x, y := pr[0], pr[1]
		h := s.finishDrawn(stFinal{rows: func(rows []history.Value) []history.Value {
			for i := range rows {
				switch {
				case rows[i].Topic == x.topic && rows[i].Partition == x.at.partition && rows[i].Offset == x.at.offset:
					rows[i].Offset = y.at.offset
				case rows[i].Topic == y.topic && rows[i].Partition == y.at.partition && rows[i].Offset == y.at.offset:
					rows[i].Offset = x.at.offset
				}
			}
			return rows
		}})
		return h, []string{x.topic + ":" + x.in.event}, true
	},
	TransactionLeftOpen: func(t *rapid.T, s *txnHist) (history.History, []string, bool) {
		var written [][2]string
		for _, topic := range stOutputs {
			for p := range s.outPart {
				if s.next[[2]string{topic, strconv.FormatInt(p, 10)}] > 0 {
					written = append(written, [2]string{topic, strconv.FormatInt(p, 10)})
				}
			}
		}
		k := rapid.SampledFrom(written).Draw(t, "left-open")
		h := s.finishDrawn(stFinal{partitions: func(parts []history.Value) []history.Value {
			for i := range parts {
				if parts[i].Topic == k[0] && strconv.FormatInt(parts[i].Partition, 10) == k[1] {
					parts[i].LastStableOffset--
				}
			}
			return parts
		}})
		return h, []string{k[0] + ":" + k[0] + "/" + k[1]}, true
	},
}

func TestPropertyStagePlantedAnomalyIsFoundAlone(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		kind := rapid.SampledFrom(TxnStageKinds()).Draw(t, "kind")
		s := genTxnStage(t)
		h, want, ok := txnPlants[kind](t, s)
		if !ok {
			t.Skip("no place to plant " + string(kind))
		}
		r := Check(h, Options{Guarantees: strict})
		got := txnFound(r)
		slices.Sort(want)
		if r.Valid != Invalid || len(got) != 1 || !slices.Equal(got[kind], want) {
			t.Fatalf("planted %s at %v; got %s with %v (%q)\n%s", kind, want, r.Valid, got, r.Reasons, dump(h))
		}
	})
}

// The same stage history gives byte-identical results whatever the
// number of shards, in memory or from a file (whose examples are read
// again from it).
func TestPropertyStageDeterministic(t *testing.T) {
	dir := t.TempDir()
	rapid.Check(t, func(t *rapid.T) {
		kind := rapid.SampledFrom(TxnStageKinds()).Draw(t, "kind")
		s := genTxnStage(t)
		h, _, ok := txnPlants[kind](t, s)
		if !ok {
			t.Skip("no place to plant " + string(kind))
		}
		checkDeterministic(t, h, dir, 2)
	})
}
