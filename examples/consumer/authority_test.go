package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/signing"
)

// The example's checks give docs/security.md's reasons in its order
// (the version check, which reads the database, is left to the runs).
func TestAuthorityCheck(t *testing.T) {
	t.Setenv("DELIVERYCHECK_SIGNING_KEY", "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f")
	t.Setenv("DELIVERYCHECK_TENANT", "shop")
	t.Setenv("DELIVERYCHECK_FRESHNESS", "10m0s")
	t.Setenv("DELIVERYCHECK_AUTHORITY", "/orders=OrderConfirmed")
	a, err := authorityFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	signed := func(ev event) event {
		ev.signature = signing.Sign(a.key, broker.Event{ID: ev.id, Source: ev.source, Type: ev.typ, Key: ev.order, Version: ev.version,
			Tenant: ev.tenant, Time: ev.time, Payload: ev.payload})
		return ev
	}
	good := event{id: "e1", order: "order-1", version: 1, source: "/orders", typ: "OrderConfirmed", tenant: "shop", time: now, payload: []byte(`{}`)}
	with := func(f func(*event)) event { ev := good; f(&ev); return ev }
	for _, tc := range []struct {
		ev   event
		want string
	}{
		{signed(good), ""},
		{with(func(e *event) { e.typ = "AdminGranted" }), `source "/orders" may not emit "AdminGranted"`},
		{with(func(e *event) { e.tenant = "globex" }), `tenant "globex" is not this consumer's`},
		{signed(with(func(e *event) { e.time = "2020-01-01T00:00:00Z" })), "stale: event time 2020-01-01T00:00:00Z"},
		{with(func(e *event) { e.time = "" }), "missing or malformed time"},
		{good, "missing signature"},
		{with(func(e *event) { e.signature = "00" }), "signature does not verify"},
	} {
		got, err := a.check(context.Background(), nil, "inventory", tc.ev)
		if err != nil || (tc.want == "") != (got == "") || !strings.HasPrefix(got, tc.want) {
			t.Errorf("%+v: %q, %v; want %q", tc.ev, got, err, tc.want)
		}
	}
}
