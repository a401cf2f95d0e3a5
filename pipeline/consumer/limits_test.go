package consumer

import (
	"bytes"
	"compress/gzip"
	"strings"
	"testing"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/pipeline/hostile"
	"github.com/deliverycheck/deliverycheck/pipeline/producer"
)

// received is e as a subscriber hands it over: its headers (its own, then
// its Extra ones) and the event rebuilt from them.
func received(e broker.Event) *broker.Delivery {
	hs := e.Headers()
	for k, v := range e.Extra {
		hs[k] = v
	}
	return &broker.Delivery{Event: broker.EventFromHeaders(hs, e.Payload), Headers: hs, Attempt: 1}
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

func newConsumer(t testing.TB, v Variant) *Consumer {
	c, err := New(Config{Variant: v, Subscription: "inventory", Sources: []string{"/orders"}}, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestLimits: each hostile kind, and each limit at and past its edge, is
// refused by the bounded consumers with its reason and as permanent (dead-
// lettered at once); the unbounded one accepts what only a limit refuses.
func TestLimits(t *testing.T) {
	var cr hostile.Crafter
	craft := func(k hostile.Kind) *broker.Delivery {
		e, err := cr.Craft(k, 1, baseEvent())
		if err != nil {
			t.Fatal(err)
		}
		return received(e)
	}
	with := func(edit func(*broker.Event)) *broker.Delivery {
		e := baseEvent()
		edit(&e)
		return received(e)
	}
	good := producer.Payload("order-1", 3, false)
	nested := func(n int) []byte {
		return []byte(`{"order":"order-1","version":3,"status":"confirmed","x":` + strings.Repeat("[", n-1) + strings.Repeat("]", n-1) + `}`)
	}
	for _, tc := range []struct {
		name      string
		d         *broker.Delivery
		want      string // the bounded consumer's reason's prefix; "" means valid
		unbounded string // the unbounded one's; "" means valid
	}{
		{"valid", received(baseEvent()), "", ""},
		{"oversize", craft(hostile.Oversize), "payload too large: 921600 bytes", ""},
		{"compression bomb", craft(hostile.CompressionBomb), "decompressed payload over 65536 bytes", ""},
		{"deep json", craft(hostile.DeepJSON), "JSON nested deeper than 32", "payload does not match the schema"},
		{"invalid utf-8", craft(hostile.InvalidUTF8), `header "event-id" is not valid UTF-8`, ""},
		{"unknown type", craft(hostile.UnknownType), `unknown type "Sabotage"`, `unknown type "Sabotage"`},
		{"many headers", craft(hostile.ManyHeaders), "too many headers: 5005", ""},
		{"64 headers", with(func(e *broker.Event) {
			e.Extra = map[string]string{}
			for i := range MaxHeaders - 5 {
				e.Extra[strings.Repeat("h", i+1)] = "x"
			}
		}), "", ""},
		{"65 headers", with(func(e *broker.Event) {
			e.Extra = map[string]string{}
			for i := range MaxHeaders - 4 {
				e.Extra[strings.Repeat("h", i+1)] = "x"
			}
		}), "too many headers: 65", ""},
		{"header of 4 KiB", with(func(e *broker.Event) { e.Extra = map[string]string{"x": strings.Repeat("v", MaxHeaderValue)} }), "", ""},
		{"header over 4 KiB", with(func(e *broker.Event) { e.Extra = map[string]string{"x": strings.Repeat("v", MaxHeaderValue+1)} }), `header "x" is over 4096 bytes: 4097`, ""},
		{"header name not utf-8", with(func(e *broker.Event) { e.Extra = map[string]string{"x\xff": "v"} }), `header name "x\xff" is not valid UTF-8`, ""},
		{"other header not utf-8", with(func(e *broker.Event) { e.Extra = map[string]string{"x-note": "\xc3\x28"} }), `header "x-note" is not valid UTF-8`, ""},
		{"unknown encoding", with(func(e *broker.Event) { e.Extra = map[string]string{"content-encoding": "br"} }), `unknown content-encoding "br"`, ""},
		{"gzip", with(func(e *broker.Event) {
			e.Extra = map[string]string{"content-encoding": "gzip"}
			e.Payload = gz(t, good)
		}), "", ""},
		{"gzip of 64 KiB", with(func(e *broker.Event) {
			e.Extra = map[string]string{"content-encoding": "gzip"}
			e.Payload = gz(t, append(good, bytes.Repeat([]byte(" "), 64<<10-len(good))...))
		}), "", ""},
		{"gzip past 64 KiB", with(func(e *broker.Event) {
			e.Extra = map[string]string{"content-encoding": "gzip"}
			e.Payload = gz(t, append(good, bytes.Repeat([]byte(" "), 64<<10-len(good)+1)...))
		}), "decompressed payload over 65536 bytes", ""},
		{"malformed gzip", with(func(e *broker.Event) {
			e.Extra = map[string]string{"content-encoding": "gzip"}
			e.Payload = gz(t, good)[:20]
		}), "malformed gzip payload", "malformed gzip payload"},
		{"nested 32", with(func(e *broker.Event) { e.Payload = nested(32) }), "", ""},
		{"nested 33", with(func(e *broker.Event) { e.Payload = nested(33) }), "JSON nested deeper than 32", ""},
		{"brackets in a string", with(func(e *broker.Event) {
			e.Payload = []byte(`{"order":"order-1","version":3,"status":"confirmed","x":"` + strings.Repeat(`[{\"`, 100) + `"}`)
		}), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, v := range []Variant{Inbox, Trusting} {
				got, permanent := newConsumer(t, v).check(tc.d)
				if !strings.HasPrefix(got, tc.want) || (tc.want == "") != (got == "") {
					t.Errorf("%s: reason %q, want %q", v, got, tc.want)
				}
				if got != "" && !permanent {
					t.Errorf("%s: %q not permanent", v, got)
				}
			}
			got, _ := newConsumer(t, Unbounded).check(tc.d)
			if !strings.HasPrefix(got, tc.unbounded) || (tc.unbounded == "") != (got == "") {
				t.Errorf("unbounded: reason %q, want %q", got, tc.unbounded)
			}
		})
	}
}

// TestPoisonNotPermanent: what redelivery could in principle see
// differently (a schema mismatch: the workload's poison events) is still
// retried up to MaxAttempts, not dead-lettered at once.
func TestPoisonNotPermanent(t *testing.T) {
	e := baseEvent()
	e.Payload = producer.Payload("order-1", 3, true)
	r, permanent := newConsumer(t, Inbox).check(received(e))
	if r == "" || permanent {
		t.Fatalf("poison: reason %q permanent %v", r, permanent)
	}
}

// TestSchemaVersions: an event in a schema version the build does not
// accept is refused as not permanent (retried, then dead-lettered, to be
// redriven), by every variant; the build a deploy-fix starts accepts it.
func TestSchemaVersions(t *testing.T) {
	e := baseEvent()
	e.Payload = producer.SchemaPayload("order-1", 3, false, 2)
	for _, v := range []Variant{Inbox, Unbounded} {
		r, permanent := newConsumer(t, v).check(received(e))
		if r != "schema version 2 is not supported (accepts 1)" || permanent {
			t.Errorf("%s: reason %q permanent %v", v, r, permanent)
		}
		fixed, err := New(Config{Variant: v, Subscription: "email", SchemaVersions: []int64{1, 2}}, nil, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r, _ := fixed.check(received(e)); r != "" {
			t.Errorf("%s fixed: schema 2 refused: %q", v, r)
		}
		if r, _ := fixed.check(received(baseEvent())); r != "" {
			t.Errorf("%s fixed: schema 1 refused: %q", v, r)
		}
	}
}

// TestSafeText: a hostile value is stored quoted, a valid one as it is.
func TestSafeText(t *testing.T) {
	for in, want := range map[string]string{
		"e1":          "e1",
		"café":        "café",
		"e1-\xff\xfe": `"e1-\xff\xfe"`,
		"a\x00b":      `"a\x00b"`,
		"":            "",
	} {
		if got := broker.SafeText(in); got != want {
			t.Errorf("broker.SafeText(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestMetadataBounded: a dead letter's metadata of a message with 5000
// headers keeps MaxHeaders of them, all valid text.
func TestMetadataBounded(t *testing.T) {
	var cr hostile.Crafter
	e, err := cr.Craft(hostile.ManyHeaders, 1, baseEvent())
	if err != nil {
		t.Fatal(err)
	}
	d := received(e)
	d.Headers["h0000"] = "\xff"
	m := metadata(d)
	if len(m) > 8<<10 || !strings.Contains(m, `"headers_dropped":4941`) || !strings.Contains(m, `\"\\xff\"`) {
		t.Fatalf("metadata of %d bytes: %.300s", len(m), m)
	}
}

// TestTruncate: a cut never splits a rune.
func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{{"abc", 5, "abc"}, {"abc", 2, "ab"}, {"café", 4, "caf"}, {"café", 5, "café"}, {"ééé", 3, "é"}} {
		if got := truncate(tc.s, tc.n); got != tc.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}
