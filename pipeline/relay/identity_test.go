package relay

import (
	"regexp"
	"testing"

	"github.com/deliverycheck/deliverycheck/broker"
)

var traceParentRe = regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`)

// TestAttempt: every publish attempt carries a new traceparent; only the
// new-id-per-attempt relay changes the id, and it records the one it sent.
func TestAttempt(t *testing.T) {
	ev := broker.Event{ID: "e1", Source: "/orders", Key: "order-1", Version: 3}
	for _, v := range []Variant{Polling, NewIDPerAttempt} {
		r, err := New(Config{Variant: v}, nil, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		a, va := r.attempt(ev, 1)
		b, vb := r.attempt(ev, 2)
		for _, x := range []broker.Event{a, b} {
			if !traceParentRe.MatchString(x.TraceParent) {
				t.Errorf("%s: traceparent %q is not W3C's", v, x.TraceParent)
			}
		}
		if a.TraceParent[3:35] == b.TraceParent[3:35] {
			t.Errorf("%s: two attempts share trace id %s", v, a.TraceParent)
		}
		if va.Event != "e1" || vb.Event != "e1" || va.Attempt != 1 || vb.Attempt != 2 {
			t.Errorf("%s: publish ops name %s/%d and %s/%d, want e1/1 and e1/2", v, va.Event, va.Attempt, vb.Event, vb.Attempt)
		}
		switch v {
		case Polling:
			if a.ID != "e1" || b.ID != "e1" || va.PublishedAs != "" {
				t.Errorf("polling sent %s and %s (published_as %q), want e1 both times", a.ID, b.ID, va.PublishedAs)
			}
		case NewIDPerAttempt:
			if a.ID == "e1" || a.ID == b.ID || va.PublishedAs != a.ID || vb.PublishedAs != b.ID {
				t.Errorf("new-id-per-attempt sent %s and %s, recorded %s and %s", a.ID, b.ID, va.PublishedAs, vb.PublishedAs)
			}
		}
	}
}
