package checker

import (
	"os"
	"strconv"
	"testing"

	"github.com/deliverycheck/deliverycheck/history"
)

// largeTxnStage is a correct stage over n inputs on 4 input partitions
// and 3 partitions per output topic: batches of 10, every third
// transaction aborted and retried, a reader and a subscription reading
// every committed record, the processor's database effect once per
// event; about 23 ops per input.
func largeTxnStage(n int) history.History {
	s := newTxnHist(3)
	s.db = true
	const parts = 4
	queue := make([][]stInput, parts)
	for i := range n {
		p := int64(i % parts)
		queue[p] = append(queue[p], s.event("e"+strconv.Itoa(i), p, int64(len(queue[p]))))
	}
	for k := 0; ; k++ {
		p := k % parts
		if len(queue[p]) == 0 {
			if k%parts == parts-1 && len(queue[0])+len(queue[1])+len(queue[2])+len(queue[3]) == 0 {
				break
			}
			continue
		}
		batch := queue[p][:min(10, len(queue[p]))]
		if k%3 == 0 {
			s.transact(history.Fail, false, batch...)
			continue
		}
		s.transact(history.OK, true, batch...)
		s.read(batch...)
		s.consume(batch...)
		queue[p] = queue[p][len(batch):]
	}
	return s.finish(stFinal{dbEffects: 1})
}

// BenchmarkCheckTxnStage checks a large transactional stage's history in
// memory (sub-benchmark stage), and the same history with the stage's
// ops left out (without-stage): the difference is what judging the stage
// adds. ns/history-op compares with BenchmarkCheckFiles's figures.
// DELIVERYCHECK_BENCH_INPUTS sets the inputs, overriding the default 20000.
func BenchmarkCheckTxnStage(b *testing.B) {
	n := 20000
	if v, err := strconv.Atoi(os.Getenv("DELIVERYCHECK_BENCH_INPUTS")); err == nil && v > 0 {
		n = v
	}
	h := largeTxnStage(n)
	var plain history.History
	for i := range h {
		if op := &h[i]; op.F != history.TxnStage && !txnOwned(op) {
			plain = append(plain, *op)
		}
	}
	g, _ := Preset("effectively-once")
	opts := Options{Guarantees: g}
	for _, bc := range []struct {
		name string
		h    history.History
		want Validity
	}{{"stage", h, Valid}, {"without-stage", plain, Valid}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if r := Check(bc.h, opts); r.Valid != bc.want {
					b.Fatalf("generated history is %s: %v", r.Valid, r.Reasons)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(bc.h)), "ns/history-op")
			b.ReportMetric(float64(len(bc.h)), "history-ops")
		})
	}
}
