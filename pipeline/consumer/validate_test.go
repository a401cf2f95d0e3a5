package consumer

import (
	"slices"
	"strings"
	"testing"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/pipeline/producer"
)

func testConsumer(t testing.TB) *Consumer {
	c, err := New(Config{Variant: Inbox, Subscription: "inventory", Sources: []string{"/orders"}}, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func delivery(id, source, key string, version int64, typ string, payload []byte) *broker.Delivery {
	return &broker.Delivery{Event: broker.Event{ID: id, Source: source, Key: key, Version: version, Type: typ, Payload: payload}}
}

func TestValidate(t *testing.T) {
	good := producer.Payload("order-1", 3, false)
	for _, tc := range []struct {
		name string
		d    *broker.Delivery
		want string // substring of the reason; "" means valid
	}{
		{"valid", delivery("e1", "/orders", "order-1", 3, producer.EventType, good), ""},
		{"poison payload", delivery("e1", "/orders", "order-1", 3, producer.EventType, producer.Payload("order-1", 3, true)), "schema"},
		{"no id", delivery("", "/orders", "order-1", 3, producer.EventType, good), "event id"},
		{"no source", delivery("e1", "", "order-1", 3, producer.EventType, good), "source"},
		{"foreign source", delivery("e1", "/evil", "order-1", 3, producer.EventType, good), "unknown source"},
		{"no version", delivery("e1", "/orders", "order-1", 0, producer.EventType, good), "version"},
		{"wrong type", delivery("e1", "/orders", "order-1", 3, "<script>alert(1)</script>", good), "unknown type"},
		{"headers disagree", delivery("e1", "/orders", "order-2", 3, producer.EventType, good), "disagrees"},
		{"huge", delivery("e1", "/orders", "order-1", 3, producer.EventType, []byte(strings.Repeat("x", 1<<20))), "too large"},
		{"not json", delivery("e1", "/orders", "order-1", 3, producer.EventType, []byte("\xff\xfe{")), "schema"},
		{"bad utf8 key", delivery("e1", "/orders", "order-\xff", 3, producer.EventType, good), "aggregate id"},
	} {
		got := testConsumer(t).validate(tc.d)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: validate = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// FuzzValidate: nothing a broker hands the consumer may crash it, and only
// a message matching its headers is accepted.
func FuzzValidate(f *testing.F) {
	f.Add("e1", "/orders", "order-1", int64(3), producer.EventType, producer.Payload("order-1", 3, false))
	f.Add("", "", "", int64(-1), "", []byte(`{"order":null}`))
	f.Add("e1", "/orders", "order-1", int64(3), producer.EventType, []byte(`{"order":"order-1","version":3e400}`))
	c := testConsumer(f)
	f.Fuzz(func(t *testing.T, id, source, key string, version int64, typ string, payload []byte) {
		reason := c.validate(delivery(id, source, key, version, typ, payload))
		if reason == "" && (id == "" || version <= 0 || !slices.Contains(KnownTypes(), typ)) {
			t.Fatalf("accepted an invalid message: id=%q version=%d type=%q", id, version, typ)
		}
	})
}
