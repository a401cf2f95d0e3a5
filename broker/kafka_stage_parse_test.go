package broker

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// An output record names its input only with both input headers there
// and decimal (docs/contract.md, "Processor"); the last of a repeated
// header wins, as for a delivery.
func TestParseOutputRecordInput(t *testing.T) {
	h := func(kv ...string) []kgo.RecordHeader {
		var out []kgo.RecordHeader
		for i := 0; i < len(kv); i += 2 {
			out = append(out, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		headers  []kgo.RecordHeader
		hasInput bool
		in       [2]int64
	}{
		{"both", h(HeaderEventID, "e1", HeaderInputPartition, "2", HeaderInputOffset, "41"), true, [2]int64{2, 41}},
		{"no offset", h(HeaderEventID, "e1", HeaderInputPartition, "2"), false, [2]int64{2, 0}},
		{"no partition", h(HeaderEventID, "e1", HeaderInputOffset, "41"), false, [2]int64{0, 41}},
		{"not decimal", h(HeaderEventID, "e1", HeaderInputPartition, "two", HeaderInputOffset, "41"), false, [2]int64{0, 41}},
		{"repeated: the last wins", h(HeaderInputPartition, "x", HeaderInputPartition, "1", HeaderInputOffset, "7"), true, [2]int64{1, 7}},
	} {
		got := ParseOutputRecord(&kgo.Record{Topic: "out", Headers: tc.headers})
		if got.HasInput != tc.hasInput || [2]int64{got.InputPartition, got.InputOffset} != tc.in {
			t.Errorf("%s: %+v, want input %v (known %v)", tc.name, got, tc.in, tc.hasInput)
		}
	}
}
