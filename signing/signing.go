// Package signing is the pipeline's event signature: an HMAC-SHA256, with
// a key only the authorized producer (the relay, for this pipeline) and
// the consumers that verify hold, over one canonical rendering of the
// event. It gives integrity and provenance to a consumer that checks it;
// it is not authorization of the effect (the consumer still checks type,
// tenant, version and freshness), and it does not stop a replay of a real
// event (the signature of an old event still verifies: freshness does).
//
// The canonical form is written down in docs/security.md so a team's
// relay and consumer, in any language, sign and verify the same bytes.
package signing

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	"github.com/deliverycheck/deliverycheck/broker"
)

// Version is the first line of the canonical form: a signer and a
// verifier that disagree on the rendering disagree on this first.
const Version = "deliverycheck-signature-v1"

// Canonical renders e as the bytes its signature covers: Version, then
// source, id, type, aggregate id, version (decimal), tenant and time (as
// carried in the header), then the lowercase hex SHA-256 of the payload,
// each followed by a newline. Every field the consumer acts on is in it;
// the traceparent and the signature itself are not.
func Canonical(e broker.Event) []byte {
	sum := sha256.Sum256(e.Payload)
	b := make([]byte, 0, 160+len(e.Source)+len(e.ID)+len(e.Type)+len(e.Key)+len(e.Tenant)+len(e.Time))
	for _, f := range []string{Version, e.Source, e.ID, e.Type, e.Key} {
		b = append(append(b, f...), '\n')
	}
	b = append(strconv.AppendInt(b, e.Version, 10), '\n')
	for _, f := range []string{e.Tenant, e.Time} {
		b = append(append(b, f...), '\n')
	}
	b = append(hex.AppendEncode(b, sum[:]), '\n')
	return b
}

// Sign returns the signature of e under key: the lowercase hex
// HMAC-SHA256 of [Canonical](e), the value of the signature header.
func Sign(key []byte, e broker.Event) string {
	m := hmac.New(sha256.New, key)
	m.Write(Canonical(e))
	return hex.EncodeToString(m.Sum(nil))
}

// Verify reports whether e.Signature is e's signature under key. It
// compares in constant time, and an empty key verifies nothing.
func Verify(key []byte, e broker.Event) bool {
	if len(key) == 0 {
		return false
	}
	got, err := hex.DecodeString(e.Signature)
	if err != nil {
		return false
	}
	m := hmac.New(sha256.New, key)
	m.Write(Canonical(e))
	return hmac.Equal(got, m.Sum(nil))
}
