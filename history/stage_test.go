package history

import (
	"encoding/json"
	"reflect"
	"testing"
)

// The transactional stage's fields go through the fast decoder and the
// encoder as encoding/json reads and writes them.
func TestStageFieldsRoundTrip(t *testing.T) {
	for _, op := range []Op{
		{Process: "harness", Type: OK, F: TxnStage, Value: Value{Consumer: "processor", Target: "run.events", Topics: []string{"run.invoices", "run.revenue"}}},
		{Time: 5, Process: "processor-0", Type: Invoke, F: Txn, Value: Value{Txn: "processor-0:1:3", TransactionalID: "processor-0"}},
		{Time: 6, Process: "processor-0", Type: OK, F: TxnInput, Value: Value{Txn: "processor-0:1:3", Topic: "run.events", Event: "e1", Partition: 2, Offset: 41}},
		{Time: 7, Process: "processor-0", Type: OK, F: TxnOutput, Value: Value{Txn: "processor-0:1:3", Topic: "run.invoices", Event: "e1", Partition: 1, Offset: 7, InputPartition: 2, InputOffset: 41}},
		{Time: 8, Process: "processor-0", Type: Fail, F: Txn, Value: Value{Txn: "processor-0:1:3", Reason: ReasonAbort}},
		{Time: 9, Process: "reader-0", Type: OK, F: OutputRead, Value: Value{Topic: "run.invoices", Event: "e1", Partition: 1, Offset: 9, InputPartition: 2, InputOffset: 41}},
		{Time: 10, Process: "harness", Type: OK, F: FinalRead, Value: Value{Table: TablePartition, Topic: "run.invoices", Partition: 1, LastStableOffset: 10, HighWatermark: 12}},
	} {
		line := op.AppendJSON(nil)
		var fast, slow Op
		if err := UnmarshalLine(line, &fast); err != nil {
			t.Fatalf("UnmarshalLine(%s): %v", line, err)
		}
		if err := json.Unmarshal(line, &slow); err != nil {
			t.Fatalf("json.Unmarshal(%s): %v", line, err)
		}
		if !reflect.DeepEqual(fast, op) || !reflect.DeepEqual(slow, op) {
			t.Errorf("round trip of %s:\n got fast %+v\n got slow %+v\nwant      %+v", line, fast, slow, op)
		}
	}
}

// A topic or txn is an identity: one that is not valid UTF-8 is bad input.
func TestStageIdentitiesMustBeText(t *testing.T) {
	for _, line := range []string{
		`{"index":0,"time":1,"process":"p","type":"ok","f":"txn-output","value":{"topic":"a\ud800"}}`,
		`{"index":0,"time":1,"process":"p","type":"ok","f":"txn","value":{"txn":"t\ud800"}}`,
	} {
		var op Op
		if err := UnmarshalLine([]byte(line), &op); err == nil {
			t.Errorf("%s: accepted", line)
		}
	}
}
