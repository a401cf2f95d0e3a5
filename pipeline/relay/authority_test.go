package relay

import (
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/signing"
)

// The relay stamps tenant and the row's creation time (UTC, RFC 3339
// with nanoseconds) and signs each attempt as sent: the new-id-per-attempt
// relay's new id is covered too. Without an authority it sends none.
func TestAttemptSigned(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	created := time.Date(2026, 12, 2, 11, 0, 0, 123456789, time.FixedZone("CET", 3600))
	for _, v := range []Variant{Polling, NewIDPerAttempt} {
		r, err := New(Config{Variant: v, Authority: &Authority{Tenant: "acme", Key: key}}, nil, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		ev := broker.Event{ID: "e1", Source: "/orders", Key: "order-1", Version: 1, Type: "OrderConfirmed", Payload: []byte(`{}`)}
		r.cfg.Authority.stamp(&ev, created)
		sent, _ := r.attempt(ev, 1)
		if sent.Tenant != "acme" || sent.Time != "2026-12-02T10:00:00.123456789Z" {
			t.Fatalf("%s: tenant %q time %q", v, sent.Tenant, sent.Time)
		}
		if !signing.Verify(key, sent) {
			t.Fatalf("%s: signature %q does not verify", v, sent.Signature)
		}
	}
	r, _ := New(Config{Variant: Polling}, nil, nil, nil, nil)
	ev := broker.Event{ID: "e1", Source: "/orders", Key: "order-1", Version: 1}
	r.cfg.Authority.stamp(&ev, created)
	if sent, _ := r.attempt(ev, 1); sent.Tenant != "" || sent.Time != "" || sent.Signature != "" {
		t.Fatalf("stamped without an authority: %+v", sent)
	}
}
