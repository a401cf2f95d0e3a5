package hostile

import (
	"bytes"
	"compress/gzip"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/pipeline/producer"
)

// TestCraft: each kind is hostile in its one way and otherwise the base
// event, within what both brokers accept.
func TestCraft(t *testing.T) {
	base := broker.Event{ID: "run1", Source: "/orders", Key: "order-1", Version: 1, Type: producer.EventType, Tenant: "acme"}
	var c Crafter
	for _, k := range Kinds() {
		e, err := c.Craft(k, 2, base)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if !strings.HasPrefix(e.ID, "hostile-"+string(k)+"-2-run1") || e.Source != base.Source || e.Key != base.Key || e.Tenant != "acme" {
			t.Errorf("%s: identity %+v", k, e)
		}
		if len(e.Payload) > 1000<<10 {
			t.Errorf("%s: payload of %d bytes, over what Kafka accepts", k, len(e.Payload))
		}
		switch k {
		case Oversize:
			if len(e.Payload) != OversizeBytes || !bytes.HasPrefix(e.Payload, []byte(`{"order":"order-1","version":1,"status":"confirmed","pad":"xx`)) || !bytes.HasSuffix(e.Payload, []byte(`xx"}`)) {
				t.Errorf("oversize: %d bytes, %.80q", len(e.Payload), e.Payload)
			}
		case CompressionBomb:
			if e.Extra[HeaderContentEncoding] != "gzip" || len(e.Payload) >= 64<<10 {
				t.Errorf("bomb: encoding %q, %d bytes compressed", e.Extra[HeaderContentEncoding], len(e.Payload))
			}
			zr, err := gzip.NewReader(bytes.NewReader(e.Payload))
			if err != nil {
				t.Fatal(err)
			}
			head := make([]byte, 64)
			n, _ := io.ReadFull(zr, head)
			rest, err := io.Copy(io.Discard, zr)
			if err != nil || !bytes.HasPrefix(head[:n], producer.Payload("order-1", 1, false)) || int64(n)+rest != int64(len(producer.Payload("order-1", 1, false)))+BombBytes {
				t.Errorf("bomb inflates to %q + %d bytes (%v)", head[:n], rest, err)
			}
		case DeepJSON:
			if !bytes.HasPrefix(e.Payload, []byte(`{"order":`+strings.Repeat("[", DeepJSONDepth)+"]")) || len(e.Payload) >= 64<<10 {
				t.Errorf("deep-json: %d bytes", len(e.Payload))
			}
		case InvalidUTF8:
			if utf8.ValidString(e.ID) || utf8.ValidString(e.Extra["x-note"]) {
				t.Errorf("invalid-utf8: %q %q", e.ID, e.Extra)
			}
		case UnknownType:
			if e.Type != SabotageType {
				t.Errorf("unknown-type: %q", e.Type)
			}
		case ManyHeaders:
			if len(e.Extra) != ManyHeadersCount {
				t.Errorf("many-headers: %d", len(e.Extra))
			}
		}
	}
	if _, err := ParseKind("oversize"); err != nil {
		t.Error(err)
	}
	if _, err := ParseKind("nope"); err == nil || !strings.Contains(err.Error(), "many-headers") {
		t.Errorf("ParseKind(nope) = %v", err)
	}
}
