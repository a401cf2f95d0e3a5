package main

import (
	"bytes"
	"compress/gzip"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/pipeline/hostile"
	"github.com/deliverycheck/deliverycheck/pipeline/producer"
)

// The two ways a message reaches the service, each made as the harness's
// publishers make it (broker/kafka_publisher.go, rabbitmq_publisher.go)
// and read as the service reads it.
var paths = []struct {
	name string
	read func(broker.Event) message
}{
	{"kafka", func(e broker.Event) message { return kafkaMessage(kafkaRecord(e)) }},
	{"rabbitmq", func(e broker.Event) message { return rabbitMessage(rabbitDelivery(e)) }},
}

// kafkaRecord is e as a Kafka record: the identity headers sorted, then
// the Extra ones sorted, values as bytes (invalid UTF-8 arrives as sent).
func kafkaRecord(e broker.Event) *kgo.Record {
	hs := e.Headers()
	var out []kgo.RecordHeader
	for _, k := range slices.Sorted(maps.Keys(hs)) {
		out = append(out, kgo.RecordHeader{Key: k, Value: []byte(hs[k])})
	}
	for _, k := range e.ExtraNames() {
		out = append(out, kgo.RecordHeader{Key: k, Value: []byte(e.Extra[k])})
	}
	return &kgo.Record{Key: []byte(e.Key), Value: e.Payload, Headers: out}
}

// rabbitDelivery is e as a RabbitMQ delivery: the id in message_id too,
// every header a string in the table, Extra ones as they are.
func rabbitDelivery(e broker.Event) amqp.Delivery {
	t := amqp.Table{}
	for k, v := range e.Headers() {
		t[k] = v
	}
	for k, v := range e.Extra {
		t[k] = v
	}
	return amqp.Delivery{MessageId: e.ID, Type: e.Type, Headers: t, Body: e.Payload}
}

func baseEvent() broker.Event {
	return broker.Event{ID: "run1", Source: "/orders", Key: "order-1", Version: 3, Type: producer.EventType,
		Payload: producer.Payload("order-1", 3, false)}
}

func gz(t testing.TB, p []byte) []byte {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write(p); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestLimits: each hostile kind (made by the harness's hostile.Crafter,
// what the intruder sends), and each limit at and past its edge, is
// turned away with the contract's reason on both brokers' paths; a
// well-formed event, gzipped or not, passes.
func TestLimits(t *testing.T) {
	var cr hostile.Crafter
	craft := func(k hostile.Kind) broker.Event {
		e, err := cr.Craft(k, 1, baseEvent())
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	with := func(edit func(*broker.Event)) broker.Event {
		e := baseEvent()
		edit(&e)
		return e
	}
	extra := func(n int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m["h"+strconv.Itoa(i)] = "x"
		}
		return m
	}
	good := producer.Payload("order-1", 3, false)
	nested := func(n int) []byte {
		return []byte(`{"order":"order-1","version":3,"status":"confirmed","x":` + strings.Repeat("[", n-1) + strings.Repeat("]", n-1) + `}`)
	}
	for _, tc := range []struct {
		name string
		e    broker.Event
		want string // the reason's prefix; "" means it passes
	}{
		{"valid", baseEvent(), ""},
		{"oversize", craft(hostile.Oversize), "payload too large: 921600 bytes"},
		{"compression bomb", craft(hostile.CompressionBomb), "decompressed payload over 65536 bytes"},
		{"deep json", craft(hostile.DeepJSON), "JSON nested deeper than 32"},
		{"invalid utf-8", craft(hostile.InvalidUTF8), `header "event-id" is not valid UTF-8`},
		{"unknown type", craft(hostile.UnknownType), `unknown type "Sabotage"`},
		{"many headers", craft(hostile.ManyHeaders), "too many headers: 5005"},
		{"64 headers", with(func(e *broker.Event) { e.Extra = extra(maxHeaders - 5) }), ""},
		{"65 headers", with(func(e *broker.Event) { e.Extra = extra(maxHeaders - 4) }), "too many headers: 65"},
		{"header of 4 KiB", with(func(e *broker.Event) { e.Extra = map[string]string{"x": strings.Repeat("v", maxHeaderValue)} }), ""},
		{"header over 4 KiB", with(func(e *broker.Event) { e.Extra = map[string]string{"x": strings.Repeat("v", maxHeaderValue+1)} }), `header "x" is over 4096 bytes: 4097`},
		{"header name not utf-8", with(func(e *broker.Event) { e.Extra = map[string]string{"x\xff": "v"} }), `header name "x\xff" is not valid UTF-8`},
		{"other header not utf-8", with(func(e *broker.Event) { e.Extra = map[string]string{"x-note": "\xc3\x28"} }), `header "x-note" is not valid UTF-8`},
		{"unknown encoding", with(func(e *broker.Event) { e.Extra = map[string]string{"content-encoding": "br"} }), `unknown content-encoding "br"`},
		{"gzip", with(func(e *broker.Event) {
			e.Extra = map[string]string{"content-encoding": "gzip"}
			e.Payload = gz(t, good)
		}), ""},
		{"gzip of 64 KiB", with(func(e *broker.Event) {
			e.Extra = map[string]string{"content-encoding": "gzip"}
			e.Payload = gz(t, append(good, bytes.Repeat([]byte(" "), maxPayload-len(good))...))
		}), ""},
		{"gzip past 64 KiB", with(func(e *broker.Event) {
			e.Extra = map[string]string{"content-encoding": "gzip"}
			e.Payload = gz(t, append(good, bytes.Repeat([]byte(" "), maxPayload-len(good)+1)...))
		}), "decompressed payload over 65536 bytes"},
		{"malformed gzip", with(func(e *broker.Event) {
			e.Extra = map[string]string{"content-encoding": "gzip"}
			e.Payload = gz(t, good)[:20]
		}), "malformed gzip payload"},
		{"payload of 64 KiB", with(func(e *broker.Event) { e.Payload = append(good, bytes.Repeat([]byte(" "), maxPayload-len(good))...) }), ""},
		{"payload past 64 KiB", with(func(e *broker.Event) { e.Payload = append(good, bytes.Repeat([]byte(" "), maxPayload-len(good)+1)...) }), "payload too large: 65537 bytes"},
		{"nested 32", with(func(e *broker.Event) { e.Payload = nested(32) }), ""},
		{"nested 33", with(func(e *broker.Event) { e.Payload = nested(33) }), "JSON nested deeper than 32"},
		{"brackets in a string", with(func(e *broker.Event) {
			e.Payload = []byte(`{"order":"order-1","version":3,"status":"confirmed","x":"` + strings.Repeat(`[{\"`, 100) + `"}`)
		}), ""},
		// The identity, then the schema: what the service stores must
		// be text, and what it reads must agree with the headers.
		{"key not utf-8", with(func(e *broker.Event) { e.Key = "order-\xff" }), `header "aggregate-id" is not valid UTF-8`},
		{"key with NUL", with(func(e *broker.Event) { e.Key = "order-\x00" }), "missing or malformed aggregate id"},
		{"no version", with(func(e *broker.Event) { e.Version = 0 }), "missing or malformed version"},
		{"poison", with(func(e *broker.Event) { e.Payload = producer.Payload("order-1", 3, true) }), "payload does not match the schema"},
		{"payload of another order", with(func(e *broker.Event) { e.Payload = producer.Payload("order-2", 3, false) }), "payload disagrees with its headers"},
	} {
		for _, p := range paths {
			t.Run(tc.name+"/"+p.name, func(t *testing.T) {
				ev, got := inspect(p.read(tc.e))
				if !strings.HasPrefix(got, tc.want) || (tc.want == "") != (got == "") {
					t.Errorf("reason %q, want %q", got, tc.want)
				}
				if want := broker.SafeText(tc.e.ID); ev.id != want {
					t.Errorf("id %q, want %q", ev.id, want)
				}
			})
		}
	}
}

// TestHostileID: an id that is not valid UTF-8 is stored and recorded
// quoted, as strconv.QuoteToASCII does, which is what the harness records
// for the intruder's message; a valid one as it came.
func TestHostileID(t *testing.T) {
	var cr hostile.Crafter
	e, err := cr.Craft(hostile.InvalidUTF8, 1, baseEvent())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		ev, reason := inspect(p.read(e))
		if want := strconv.QuoteToASCII(e.ID); ev.id != want || reason == "" {
			t.Errorf("%s: id %q (%q), want %q", p.name, ev.id, reason, want)
		}
		if ev, _ := inspect(p.read(baseEvent())); ev.id != "run1" {
			t.Errorf("%s: a valid id became %q", p.name, ev.id)
		}
	}
}

// TestKafkaKey: the aggregate id a Kafka record gives is its key, which
// no header check sees; one the database would refuse is malformed.
func TestKafkaKey(t *testing.T) {
	for _, key := range []string{"", "order-\xff", "order-\x00"} {
		r := kafkaRecord(baseEvent())
		r.Key = []byte(key)
		if _, got := inspect(kafkaMessage(r)); got != "missing or malformed aggregate id" {
			t.Errorf("key %q: %q", key, got)
		}
	}
}

// TestRabbitTypedHeaders: a RabbitMQ redelivery's integer
// x-delivery-count (and any other header that is not a string) counts
// towards the limit but is never refused for its type.
func TestRabbitTypedHeaders(t *testing.T) {
	d := rabbitDelivery(baseEvent())
	d.Headers["x-delivery-count"] = int64(2)
	d.Headers["x-death"] = []any{amqp.Table{"count": int64(1), "reason": "rejected"}}
	if _, r := inspect(rabbitMessage(d)); r != "" {
		t.Fatalf("typed headers refused: %q", r)
	}
	for i := len(d.Headers); i <= maxHeaders; i++ {
		d.Headers["n"+strconv.Itoa(i)] = int32(i)
	}
	if _, r := inspect(rabbitMessage(d)); r != "too many headers: 65" {
		t.Fatalf("65 headers, typed ones among them: %q", r)
	}
}

// TestBombBounded: a compression bomb costs the service about the limit,
// not what it inflates to (60 MiB): the limit is what keeps the service's
// memory flat, so a test that it is there must measure the memory.
func TestBombBounded(t *testing.T) {
	var cr hostile.Crafter
	e, err := cr.Craft(hostile.CompressionBomb, 1, baseEvent())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		m := p.read(e)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, r := inspect(m)
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 || !strings.HasPrefix(r, "decompressed payload over") {
			t.Errorf("%s: %q, %d bytes allocated (a bomb inflates to %d)", p.name, r, alloc, hostile.BombBytes)
		}
	}
}

// TestJSONDeeper: the scan counts objects and arrays, not brackets in
// strings or after an escaped quote.
func TestJSONDeeper(t *testing.T) {
	for _, tc := range []struct {
		p    string
		deep bool
	}{
		{`{}`, false}, {`[[]]`, true}, {`{"a":[1]}`, true}, {`"[[[["`, false},
		{`{"a":"\"[[["}`, false}, {`{"a":"\\"}`, false}, {`{"a":"\\",[[]]}`, true},
	} {
		if got := jsonDeeper([]byte(tc.p), 1); got != tc.deep {
			t.Errorf("jsonDeeper(%s, 1) = %v, want %v", tc.p, got, tc.deep)
		}
	}
}

// An event in a schema version this build does not accept is refused
// with a reason that is not a rejection (given back, then dead-lettered);
// DELIVERYCHECK_SCHEMA_VERSIONS "1,2" (after a deploy-fix) accepts it.
func TestSchemaVersions(t *testing.T) {
	e := baseEvent()
	e.Payload = producer.SchemaPayload(e.Key, e.Version, false, 2)
	ev, reason := inspect(rabbitMessage(rabbitDelivery(e)))
	if reason != "" || ev.schema != 2 {
		t.Fatalf("inspect: schema %d, reason %q", ev.schema, reason)
	}
	t.Setenv("DELIVERYCHECK_SCHEMA_VERSIONS", "")
	v1, err := schemaVersionsFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if err := checkSchema(ev, v1); err == nil || err.Error() != "schema version 2 is not supported (accepts 1)" {
		t.Errorf("accepting 1: %v", err)
	}
	t.Setenv("DELIVERYCHECK_SCHEMA_VERSIONS", "1,2")
	v12, err := schemaVersionsFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if err := checkSchema(ev, v12); err != nil {
		t.Errorf("accepting 1,2: %v", err)
	}
	t.Setenv("DELIVERYCHECK_SCHEMA_VERSIONS", "one")
	if _, err := schemaVersionsFromEnv(); err == nil {
		t.Error("a malformed list was accepted")
	}
}
