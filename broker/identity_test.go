package broker

import "testing"

// TestTraceParentHeader: the traceparent travels as W3C's header, only
// when set, and comes back from the headers.
func TestTraceParentHeader(t *testing.T) {
	e := Event{ID: "42", Source: "/returns", Key: "order-1", Version: 2, Type: "OrderConfirmed",
		TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	h := e.Headers()
	if h["traceparent"] != e.TraceParent {
		t.Fatalf("headers %v lack the traceparent", h)
	}
	if got := EventFromHeaders(h, nil); got.TraceParent != e.TraceParent || got.ID != "42" || got.Source != "/returns" {
		t.Fatalf("read back %+v", got)
	}
	e.TraceParent = ""
	if _, ok := e.Headers()["traceparent"]; ok {
		t.Fatal("an empty traceparent is sent")
	}
}
