package consumer

import (
	"bytes"
	"compress/gzip"
	"runtime"
	"strconv"
	"testing"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/pipeline/hostile"
	"github.com/deliverycheck/deliverycheck/pipeline/producer"
)

// FuzzLimits: whatever headers and payload a message claims (many
// headers, any bytes in them, any encoding, a gzip payload inflating far
// past the limit), the bounded consumer's check never panics and
// allocates no more than a bound set by its limits and the message's own
// size, never by what the payload inflates to; what it accepts is within
// every limit.
func FuzzLimits(f *testing.F) {
	f.Add("e1", producer.EventType, "x-note", "v", uint16(0), "", false, uint32(0), producer.Payload("order-1", 3, false))
	f.Add("e1\xff", producer.EventType, "x-note", "\xc3\x28", uint16(0), "", false, uint32(0), producer.Payload("order-1", 3, false))
	f.Add("e1", producer.EventType, "h", "x", uint16(5000), "", false, uint32(0), producer.Payload("order-1", 3, false))
	f.Add("e1", producer.EventType, "x", "x", uint16(0), "gzip", true, uint32(1<<20), producer.Payload("order-1", 3, false))
	f.Add("e1", producer.EventType, "x", "x", uint16(0), "gzip", false, uint32(0), []byte("\x1f\x8b\x08\x00garbage"))
	f.Add("e1", hostile.SabotageType, "x", "x", uint16(0), "br", false, uint32(0), []byte(`{"order":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`))
	c := newConsumer(f, Inbox)
	f.Fuzz(func(t *testing.T, id, typ, name, value string, extra uint16, enc string, compress bool, spaces uint32, payload []byte) {
		hs := broker.Event{ID: id, Source: "/orders", Key: "order-1", Version: 3, Type: typ}.Headers()
		hs[name] = value
		for i := range int(extra) % 6000 {
			hs["h"+strconv.Itoa(i)] = "x"
		}
		if enc != "" {
			hs[contentEncoding] = enc
		}
		if compress {
			payload = gzipSpaces(t, payload, int(spaces%(4<<20)))
		}
		d := &broker.Delivery{Event: broker.EventFromHeaders(hs, payload), Headers: hs}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		reason, _ := c.check(d)
		runtime.ReadMemStats(&after)
		if used, bound := after.TotalAlloc-before.TotalAlloc, uint64(1<<20+16*len(payload)); used > bound {
			t.Fatalf("check allocated %d bytes (bound %d) for a payload of %d bytes: %q", used, bound, len(payload), reason)
		}
		if reason == "" && (len(hs) > MaxHeaders || len(payload) > c.cfg.MaxPayload || len(value) > MaxHeaderValue) {
			t.Fatalf("accepted a message over a limit: %d headers, payload %d bytes, header of %d bytes", len(hs), len(payload), len(value))
		}
	})
}

// gzipSpaces is the gzip of p followed by n spaces.
func gzipSpaces(t testing.TB, p []byte, n int) []byte {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write(p); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(bytes.Repeat([]byte(" "), n)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// BenchmarkCheckBomb measures the bounded consumer's check of a
// compression bomb: its allocations are set by the 64 KiB limit, not by
// the bomb's 60 MiB.
func BenchmarkCheckBomb(b *testing.B) {
	var cr hostile.Crafter
	e, err := cr.Craft(hostile.CompressionBomb, 1, baseEvent())
	if err != nil {
		b.Fatal(err)
	}
	d := received(e)
	for _, v := range []Variant{Inbox, Unbounded} {
		b.Run(string(v), func(b *testing.B) {
			c := newConsumer(b, v)
			b.ReportAllocs()
			for b.Loop() {
				c.check(d)
			}
		})
	}
}
