package consumer

import (
	"strings"
	"testing"

	"github.com/deliverycheck/deliverycheck/broker"
)

// TestDedupeKey pins what each keyed variant takes as an event's
// identity, and that the keyed statement writes inbox_keyed under it.
func TestDedupeKey(t *testing.T) {
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	d := &broker.Delivery{Event: broker.Event{ID: "42", Source: "/returns", TraceParent: tp}}
	for _, tc := range []struct {
		v    Variant
		d    *broker.Delivery
		want string
	}{
		{InboxByID, d, "42"},
		{InboxByTrace, d, "4bf92f3577b34da6a3ce929d0e0e4736"},
		// No well-formed traceparent: not every such event one.
		{InboxByTrace, &broker.Delivery{Event: broker.Event{ID: "42", Source: "/returns", TraceParent: "junk"}}, "/returns 42"},
		{InboxByTrace, &broker.Delivery{Event: broker.Event{ID: "43", Source: "/orders"}}, "/orders 43"},
	} {
		if got := dedupeKey(tc.v, tc.d); got != tc.want {
			t.Errorf("%s of %+v: %q, want %q", tc.v, tc.d.Event, got, tc.want)
		}
	}
	for _, v := range Variants() {
		sql := applySQL(v != NoInbox, keyed(v), v != NoVersionGuard)
		if got := strings.Contains(sql, "inbox_keyed"); got != (v == InboxByID || v == InboxByTrace) {
			t.Errorf("%s: statement uses inbox_keyed: %v\n%s", v, got, sql)
		}
	}
}
