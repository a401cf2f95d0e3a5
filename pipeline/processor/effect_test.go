package processor

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/history"
)

// The effect settings: none by default, a subscription required to name
// an effect's rows, an unknown one refused with the valid names.
func TestEffectConfig(t *testing.T) {
	base := Config{Name: "processor-0", Group: "run.processor", Outputs: []string{"run.invoices"}}
	c := base
	if err := c.defaults(); err != nil || c.Effect != NoEffect || c.Effect.Writes() {
		t.Fatalf("default effect %q (writes %v), err %v", c.Effect, c.Effect.Writes(), err)
	}
	for _, tt := range []struct {
		effect Effect
		sub    string
		err    string
	}{
		{PlainEffect, "", "effect plain needs a subscription"},
		{InboxEffect, "", "effect inbox needs a subscription"},
		{"twice", "processor", `unknown effect "twice" (valid: none, plain, inbox)`},
		{PlainEffect, "processor", ""},
		{InboxEffect, "processor", ""},
	} {
		c := base
		c.Effect, c.Subscription = tt.effect, tt.sub
		err := c.defaults()
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("effect %q subscription %q: err %v, want %q", tt.effect, tt.sub, err, tt.err)
		}
	}
	// Without a database to write to, an effect does not run at all.
	c = base
	c.Effect, c.Subscription = InboxEffect, "processor"
	p, err := New(c, broker.KafkaConfig{}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "without a database") {
		t.Errorf("run without a database: %v", err)
	}
}

// An apply op names the input's event as its headers do, its position,
// the transaction and the effect's subscription; a hostile header
// (a version that is no number) leaves its field zero.
func TestApplyValue(t *testing.T) {
	p := &Processor{cfg: Config{Subscription: "processor"}}
	in := &kgo.Record{Topic: "run.events", Partition: 2, Offset: 41, Headers: []kgo.RecordHeader{
		{Key: broker.HeaderEventID, Value: []byte("ord-17-v3")}, {Key: broker.HeaderSource, Value: []byte("/orders")},
		{Key: broker.HeaderKey, Value: []byte("ord-17")}, {Key: broker.HeaderVersion, Value: []byte("3")},
	}}
	got := p.applyValue(history.Value{Txn: "processor-0:1:7"}, in)
	want := history.Value{Txn: "processor-0:1:7", Event: "ord-17-v3", Source: "/orders", Key: "ord-17", Version: 3, Partition: 2, Offset: 41, Consumer: "processor"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("apply value %+v, want %+v", got, want)
	}
	in.Headers[3].Value = []byte("three")
	if got := p.applyValue(history.Value{}, in); got.Version != 0 || got.Event != "ord-17-v3" {
		t.Errorf("hostile version: %+v", got)
	}
	// An identity that is not text (invalid UTF-8, a NUL) is kept quoted,
	// as broker.SafeText makes it for the effects table's text columns.
	in.Headers[0].Value, in.Headers[1].Value, in.Headers[2].Value = []byte("hostile-\xff"), []byte("/orders\x00"), []byte("ord-\xc0")
	if got := p.applyValue(history.Value{}, in); got.Event != `"hostile-\xff"` || got.Source != `"/orders\x00"` || got.Key != `"ord-\xc0"` {
		t.Errorf("hostile identity: event %q source %q key %q", got.Event, got.Source, got.Key)
	}
}
