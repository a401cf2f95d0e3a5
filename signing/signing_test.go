package signing

import (
	"testing"

	"github.com/deliverycheck/deliverycheck/broker"
)

func TestSignVerify(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	e := broker.Event{ID: "42", Source: "/orders", Key: "order-1", Version: 3, Type: "OrderConfirmed",
		Payload: []byte(`{"order":"order-1","version":3,"status":"confirmed"}`), Tenant: "acme", Time: "2026-12-02T10:00:00.123456789Z"}
	e.Signature = Sign(key, e)
	if !Verify(key, e) {
		t.Fatalf("a signed event does not verify")
	}
	// Every field the consumer acts on is covered: changing any one
	// breaks the signature.
	for name, change := range map[string]func(*broker.Event){
		"id":      func(e *broker.Event) { e.ID = "43" },
		"source":  func(e *broker.Event) { e.Source = "/returns" },
		"type":    func(e *broker.Event) { e.Type = "AdminGranted" },
		"key":     func(e *broker.Event) { e.Key = "order-2" },
		"version": func(e *broker.Event) { e.Version = 4 },
		"tenant":  func(e *broker.Event) { e.Tenant = "globex" },
		"time":    func(e *broker.Event) { e.Time = "2026-12-02T09:00:00Z" },
		"payload": func(e *broker.Event) { e.Payload = append([]byte(nil), `{}`...) },
		// A field boundary moved: "a\nb" + "c" must not sign like "a" + "b\nc".
		"boundary": func(e *broker.Event) { e.Source, e.ID = "/orders\n42", "" },
	} {
		c := e
		change(&c)
		if Verify(key, c) {
			t.Errorf("%s changed and the signature still verifies", name)
		}
	}
	for name, c := range map[string]struct {
		key []byte
		sig string
	}{
		"wrong key": {[]byte("another key"), e.Signature},
		"no key":    {nil, e.Signature},
		"missing":   {key, ""},
		"not hex":   {key, "zz" + e.Signature[2:]},
		"truncated": {key, e.Signature[:10]},
	} {
		f := e
		f.Signature = c.sig
		if Verify(c.key, f) {
			t.Errorf("%s: verifies", name)
		}
	}
}

// TestCanonicalGolden pins the canonical form: docs/security.md gives it
// to teams, so changing it breaks every team's signer.
func TestCanonicalGolden(t *testing.T) {
	e := broker.Event{ID: "42", Source: "/orders", Key: "order-1", Version: 3, Type: "OrderConfirmed",
		Payload: []byte("{}"), Tenant: "acme", Time: "2026-12-02T10:00:00Z"}
	want := "deliverycheck-signature-v1\n/orders\n42\nOrderConfirmed\norder-1\n3\nacme\n2026-12-02T10:00:00Z\n" +
		"44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a\n"
	if got := string(Canonical(e)); got != want {
		t.Fatalf("canonical:\n%q\nwant\n%q", got, want)
	}
	if got, want := Sign([]byte("key"), e), Sign([]byte("key"), e); got != want || len(got) != 64 {
		t.Fatalf("signature %q is not 64 hex digits or not deterministic", got)
	}
}
