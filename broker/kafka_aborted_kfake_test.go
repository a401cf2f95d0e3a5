package broker

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The harness's own view of aborted transactions: on a topic written in
// an aborted, a committed and a still open transaction, the records only
// the read_uncommitted read returns below the committed read's ends are
// exactly the aborted transaction's, and the open one's (past the last
// stable offset) are none of them. Without the open one the partition
// ends with a commit marker, which the read must see to end.
func TestKfakeAbortedRecords(t *testing.T) {
	for _, open := range []bool{true, false} {
		t.Run("open="+strconv.FormatBool(open), func(t *testing.T) { testAbortedRecords(t, open) })
	}
}

func testAbortedRecords(t *testing.T, open bool) {
	_, cfg := kfakeCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Seeds...), kgo.TransactionalID("processor-0"), kgo.DefaultProduceTopic(cfg.Topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rec := func(i int) *kgo.Record {
		return &kgo.Record{Headers: []kgo.RecordHeader{
			{Key: HeaderEventID, Value: []byte("e" + strconv.Itoa(i))},
			{Key: HeaderInputPartition, Value: []byte("0")},
			{Key: HeaderInputOffset, Value: []byte(strconv.Itoa(i))},
		}}
	}
	var offsets [3][]int64 // per transaction: aborted, committed, open
	txns := 2
	if open {
		txns = 3
	}
	for txn := range txns {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			r, err := cl.ProduceSync(ctx, rec(txn*2+i)).First()
			if err != nil {
				t.Fatal(err)
			}
			offsets[txn] = append(offsets[txn], r.Offset)
		}
		if txn < 2 { // the third stays open
			if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(txn == 1)); err != nil {
				t.Fatal(err)
			}
		}
	}
	committed, err := KafkaCommittedLog(ctx, cfg, cfg.Topic)
	if err != nil {
		t.Fatal(err)
	}
	ab, err := KafkaAbortedRecords(ctx, cfg, committed)
	if err != nil {
		t.Fatal(err)
	}
	pos := func(rs []OutputRecord) []int64 {
		var out []int64
		for _, r := range rs {
			if !r.HasInput || r.Event == "" {
				t.Errorf("record %d: headers not parsed: %+v", r.Offset, r)
			}
			out = append(out, r.Offset)
		}
		return out
	}
	if got := pos(committed.Records); !slices.Equal(got, offsets[1]) {
		t.Errorf("committed read: offsets %v, want %v", got, offsets[1])
	}
	if got := pos(ab.Records); !slices.Equal(got, offsets[0]) {
		t.Errorf("aborted: offsets %v, want %v (%s)", got, offsets[0], ab.Detail)
	}
	if end := committed.Ends[0]; open && end > offsets[2][0] {
		t.Errorf("the committed read went to %d, past the open transaction's first record %d", end, offsets[2][0])
	}
}
