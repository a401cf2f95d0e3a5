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

// An output record's event id and source that are not text (invalid
// UTF-8, a NUL) are kept as SafeText makes them, as the broker's log
// records them; a text id is kept as it is.
func TestParseOutputRecordHostileID(t *testing.T) {
	for _, tc := range []struct{ id, source, event, src string }{
		{"e1", "/orders", "e1", "/orders"},
		{"hostile-\xff\xfe", "/orders\x00", `"hostile-\xff\xfe"`, `"/orders\x00"`},
	} {
		got := ParseOutputRecord(&kgo.Record{Topic: "out", Headers: []kgo.RecordHeader{
			{Key: HeaderEventID, Value: []byte(tc.id)}, {Key: HeaderSource, Value: []byte(tc.source)},
		}})
		if got.Event != tc.event || got.Source != tc.src {
			t.Errorf("id %q source %q: read as %q %q, want %q %q", tc.id, tc.source, got.Event, got.Source, tc.event, tc.src)
		}
	}
}
