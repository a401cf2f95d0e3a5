package broker

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// What the harness sees of the transactional stage's aborted
// transactions by itself, whoever wrote the processor: a record the
// output topic holds read_uncommitted and not read_committed, below the
// offset the read_committed read went to (its last stable offset), was
// written by a transaction that aborted. A team's processor need not say
// which of its transactions aborted: the log says it.

// AbortedLog is what a read_uncommitted read of an output topic found
// that its read_committed read did not.
type AbortedLog struct {
	Topic string
	// Detail says in words how much was read and found.
	Detail string
	// Records are the aborted records, in partition and offset order.
	Records []OutputRecord
}

// KafkaAbortedRecords reads committed's topic whole read_uncommitted, to
// its high-water marks, and returns the records below committed's ends
// that committed does not hold: those of aborted transactions. committed
// must be a complete [KafkaCommittedLog] of the topic. Records past
// committed's ends are left out: their transactions were not decided
// when it was read.
func KafkaAbortedRecords(ctx context.Context, cfg KafkaConfig, committed OutputLog) (AbortedLog, error) {
	ctx, cancel := context.WithTimeout(ctx, logTimeout)
	defer cancel()
	out := AbortedLog{Topic: committed.Topic}
	visible := make(map[[2]int64]bool, len(committed.Records))
	for _, r := range committed.Records {
		visible[[2]int64{r.Partition, r.Offset}] = true
	}
	var total int64
	w := wholeRead{what: "kafka uncommitted output log", client: "output-log", topic: committed.Topic, control: true}
	err := w.read(ctx, cfg.withDefaults(), func(int64) {}, func(r *kgo.Record) {
		rec := ParseOutputRecord(r)
		if rec.Control {
			return
		}
		total++
		end, ok := committed.Ends[rec.Partition]
		if ok && rec.Offset < end && !visible[[2]int64{rec.Partition, rec.Offset}] {
			out.Records = append(out.Records, rec)
		}
	})
	out.Detail = fmt.Sprintf("%d partitions read uncommitted from offset 0 to their high-water marks: %d records, %d of them below the last stable offsets and not read committed (aborted)",
		w.partitions, total, len(out.Records))
	return out, err
}

// endsOf are the offsets w read each partition to.
func endsOf(w wholeRead) map[int64]int64 {
	out := make(map[int64]int64, len(w.ends))
	for p, o := range w.ends {
		out[int64(p)] = o
	}
	return out
}
