package consumer

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/pipeline/producer"
	"github.com/deliverycheck/deliverycheck/signing"
)

// TestAuthorize: each check's reason, and the first failing check names
// the reason when several fail (docs/security.md's order).
func TestAuthorize(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	now := time.Now().UTC()
	sec := Security{Key: key, Tenant: "acme", Freshness: 10 * time.Minute, MaxVersionAhead: 1000,
		Authority: map[string][]string{"/orders": {producer.EventType}}}
	// ev is a valid event, signed after edit changed it; sign false
	// leaves the signature out.
	ev := func(edit func(*broker.Event), sign bool) *broker.Delivery {
		e := broker.Event{ID: "e1", Source: "/orders", Key: "order-1", Version: 3, Type: producer.EventType,
			Tenant: "acme", Time: now.Format(time.RFC3339Nano)}
		if edit != nil {
			edit(&e)
		}
		e.Payload = producer.Payload(e.Key, e.Version, false)
		if sign {
			e.Signature = signing.Sign(key, e)
		}
		return &broker.Delivery{Event: e}
	}
	stale := now.Add(-time.Hour).Format(time.RFC3339Nano)
	for _, tc := range []struct {
		name string
		sec  Security
		d    *broker.Delivery
		want string // the reason's prefix; "" means authorized
	}{
		{"valid", sec, ev(nil, true), ""},
		{"type", sec, ev(func(e *broker.Event) { e.Type = AdminGranted }, false), `source "/orders" may not emit "AdminGranted"`},
		{"default authority", Security{}, ev(func(e *broker.Event) { e.Type = AdminGranted }, false), `source "/orders" may not emit "AdminGranted"`},
		{"default authority allows the producer's type", Security{}, ev(nil, false), ""},
		{"source without authority", sec, ev(func(e *broker.Event) { e.Source = "/returns" }, true), `source "/returns" may not emit "OrderConfirmed"`},
		{"tenant", sec, ev(func(e *broker.Event) { e.Tenant = "globex" }, false), `tenant "globex" is not this consumer's`},
		{"no tenant", sec, ev(func(e *broker.Event) { e.Tenant = "" }, true), `tenant "" is not this consumer's`},
		{"version ahead", sec, ev(func(e *broker.Event) { e.Version = 1000000 }, false), "version 1000000 is more than 1000 ahead of the applied 0"},
		{"version at the limit", sec, ev(func(e *broker.Event) { e.Version = 1000 }, true), ""},
		{"stale", sec, ev(func(e *broker.Event) { e.Time = stale }, true), "stale: event time " + stale + " is older than the 10m0s freshness window"},
		{"no time", sec, ev(func(e *broker.Event) { e.Time = "" }, true), "missing or malformed time"},
		{"malformed time", sec, ev(func(e *broker.Event) { e.Time = "yesterday" }, true), "missing or malformed time"},
		{"missing signature", sec, ev(nil, false), "missing signature"},
		{"wrong signature", sec, ev(func(e *broker.Event) { e.Signature = signing.Sign([]byte("made up"), *e) }, false), "signature does not verify"},
		{"tampered after signing", sec, func() *broker.Delivery {
			d := ev(nil, true)
			d.Payload = []byte(`{"order":"order-1","version":3,"status":"refunded"}`)
			return d
		}(), "signature does not verify"},
		{"no checks configured", Security{}, ev(func(e *broker.Event) { e.Tenant, e.Time, e.Version = "globex", "", 1000000 }, false), ""},
		// Several fail: the first in order names the reason.
		{"type before tenant", sec, ev(func(e *broker.Event) { e.Type, e.Tenant = AdminGranted, "globex" }, false), "source "},
		{"tenant before version", sec, ev(func(e *broker.Event) { e.Tenant, e.Version = "globex", 1000000 }, false), "tenant "},
		{"version before freshness", sec, ev(func(e *broker.Event) { e.Version, e.Time = 1000000, stale }, false), "version "},
		{"freshness before signature", sec, ev(func(e *broker.Event) { e.Time = stale }, false), "stale: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(Config{Variant: Inbox, Subscription: "inventory", Security: tc.sec}, nil, nil, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if r := c.validate(tc.d); r != "" {
				t.Fatalf("not well-formed: %s", r)
			}
			// The version check reads the projection only beyond the
			// cache; these cases stay within it or have none.
			c.known.raise("order-1", 0)
			if tc.d.Version > tc.sec.MaxVersionAhead && tc.sec.MaxVersionAhead > 0 {
				got := tc.sec.authorityBeforeVersion(tc.d)
				if got == "" {
					got = tc.sec.versionAhead(tc.d, 0)
				}
				if !strings.HasPrefix(got, tc.want) || tc.want == "" {
					t.Fatalf("reason %q, want %q", got, tc.want)
				}
				if c.authorizedWithoutQuery(tc.d) {
					t.Fatal("the batch path takes it")
				}
				return
			}
			got, err := c.authorize(context.Background(), tc.d)
			if err != nil {
				t.Fatal(err)
			}
			if (tc.want == "") != (got == "") || !strings.HasPrefix(got, tc.want) {
				t.Fatalf("reason %q, want %q", got, tc.want)
			}
			if c.authorizedWithoutQuery(tc.d) != (got == "") {
				t.Fatalf("the batch path disagrees: takes it %v, reason %q", !c.authorizedWithoutQuery(tc.d), got)
			}
			// The trusting consumer checks none of it.
			trusting, _ := New(Config{Variant: Trusting, Subscription: "inventory", Security: tc.sec}, nil, nil, nil, nil)
			if r, _ := trusting.authorize(context.Background(), tc.d); r != "" || !trusting.authorizedWithoutQuery(tc.d) {
				t.Fatalf("trusting rejects: %q", r)
			}
		})
	}
}

// The cache lets the batch path take an event within MaxVersionAhead of
// a version known applied, and only such.
func TestVersionCache(t *testing.T) {
	c, _ := New(Config{Variant: Inbox, Subscription: "inventory", Security: Security{MaxVersionAhead: 10}}, nil, nil, nil, nil)
	d := &broker.Delivery{Event: broker.Event{ID: "e", Source: "/orders", Key: "k", Version: 25, Type: producer.EventType}}
	if c.authorizedWithoutQuery(d) {
		t.Fatal("25 taken with nothing known applied")
	}
	c.known.raise("k", 15)
	c.known.raise("k", 12) // never lowers
	if !c.authorizedWithoutQuery(d) {
		t.Fatal("25 refused with 15 known applied")
	}
}

// BenchmarkAccept is the batch path's per-delivery test: the
// well-formedness checks alone (what it was), without a security section
// (the default authority only) and with every check.
func BenchmarkAccept(b *testing.B) {
	key := []byte("0123456789abcdef0123456789abcdef")
	e := broker.Event{ID: "0190c5e2-7a3b-7cde-8f01-23456789abcd", Source: "/orders", Key: "order-7", Version: 42, Type: producer.EventType,
		Payload: producer.Payload("order-7", 42, false), Tenant: "acme", Time: time.Now().UTC().Format(time.RFC3339Nano)}
	e.Signature = signing.Sign(key, e)
	d := &broker.Delivery{Event: e}
	b.Run("well-formedness-only", func(b *testing.B) {
		c, _ := New(Config{Variant: Inbox, Subscription: "inventory"}, nil, nil, nil, nil)
		for b.Loop() {
			if c.validate(d) != "" {
				b.Fatal("refused")
			}
		}
	})
	for _, tc := range []struct {
		name string
		sec  Security
	}{
		{"default", Security{Authority: map[string][]string{"/orders": {producer.EventType}}}},
		{"every-check", Security{Key: key, Tenant: "acme", Freshness: 10 * time.Minute, MaxVersionAhead: 1000, Authority: map[string][]string{"/orders": {producer.EventType}}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c, _ := New(Config{Variant: Inbox, Subscription: "inventory", Security: tc.sec}, nil, nil, nil, nil)
			for b.Loop() {
				if c.validate(d) != "" || !c.authorizedWithoutQuery(d) {
					b.Fatal("refused")
				}
			}
		})
	}
}
