// Package intruder is the fault "intrude" (docs/security.md): a process
// with its own broker credentials publishes well-formed events straight to
// the broker, bypassing the outbox, each forged in one way an authorized
// producer never would. "It came from the internal broker" is not a trust
// boundary: a correct consumer rejects every one (dead-letters it with the
// reason) and keeps going; a trusting one applies them, and the checker
// reports each such effect as unauthorized-effect. Where the broker itself
// refuses the intruder's publishes (least privilege), the history records
// the refusal.
package intruder

import (
	"github.com/deliverycheck/deliverycheck/internal/choice"
	"github.com/deliverycheck/deliverycheck/pipeline/hostile"
)

// Kind is one way the intruder forges an event.
type Kind string

// The kinds, each written as an intrude op's value.detail.
const (
	// Type is an event of a type its source may not emit (AdminGranted
	// from /orders). The intruder has no signing key, so this and the
	// next kinds carry no signature too; a correct consumer checks
	// authority, tenant, version and freshness before the signature, so
	// each is rejected for what makes it that kind (docs/security.md).
	Type Kind = "type"
	// Tenant is an event about another tenant's aggregate.
	Tenant Kind = "tenant"
	// SignatureMissing is an event without a signature header.
	SignatureMissing Kind = "signature-missing"
	// SignatureWrong is an event whose signature does not verify.
	SignatureWrong Kind = "signature-wrong"
	// Replay is a real, correctly signed event from long before the run
	// (older than any freshness window), sent again: its signature
	// verifies, and only freshness stops it. (The harness signs it as the
	// producer did then; the intruder only replays it.)
	Replay Kind = "replay"
	// VersionAhead is an event whose version is far ahead of its
	// aggregate's.
	VersionAhead Kind = "version-ahead"
)

// Kinds lists the forged kinds, in the order the intruder sends them:
// what it sends unless a scenario names its kinds.
func Kinds() []Kind {
	return []Kind{Type, Tenant, SignatureMissing, SignatureWrong, Replay, VersionAhead}
}

// HostileKinds are the hostile kinds (package hostile: oversize,
// compression-bomb, deep-json, invalid-utf8, unknown-type,
// many-headers), which the intruder sends only when a scenario names
// them: each a well-formed event made hostile in one way a consumer must
// survive (docs/security.md, "Hostile payloads and headers").
func HostileKinds() []Kind {
	var out []Kind
	for _, k := range hostile.Kinds() {
		out = append(out, Kind(k))
	}
	return out
}

// AllKinds lists every kind a scenario may name: the forged ones, then
// the hostile ones.
func AllKinds() []Kind { return append(Kinds(), HostileKinds()...) }

// Hostile reports whether k is one of the hostile kinds.
func (k Kind) Hostile() bool {
	_, err := hostile.ParseKind(string(k))
	return err == nil
}

// ParseKind checks a kind name.
func ParseKind(s string) (Kind, error) {
	return choice.Parse(s, AllKinds(), "intruder: unknown kind")
}

// Permissions are the broker rights of the intruder's own user.
type Permissions string

const (
	// Publish lets the intruder publish to the events exchange or topic:
	// only the consumer stands between it and an effect.
	Publish Permissions = "publish"
	// None gives the intruder's user no right to publish there: the broker
	// refuses it (RabbitMQ user permissions, Kafka ACLs), and the history
	// records the refusal.
	None Permissions = "none"
)
