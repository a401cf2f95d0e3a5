// Package trace makes and reads W3C Trace Context traceparent values
// (https://www.w3.org/TR/trace-context/), the header the pipeline carries
// from the producer to the consumer. A trace says which request a message
// belongs to; it is never an event's identity (docs/history.md,
// "Traces").
package trace

import (
	"encoding/binary"
	"encoding/hex"
	mrand "math/rand/v2"
	"strings"
)

// New returns a traceparent (version 00, sampled) with a new random
// trace id and span id: the root of a new trace.
func New() string {
	var b [24]byte
	binary.BigEndian.PutUint64(b[0:8], mrand.Uint64())
	binary.BigEndian.PutUint64(b[8:16], mrand.Uint64()|1) // never all zero
	binary.BigEndian.PutUint64(b[16:24], mrand.Uint64()|1)
	h := hex.EncodeToString(b[:])
	return "00-" + h[:32] + "-" + h[32:] + "-01"
}

// Child returns a traceparent in parent's trace with a new span id: the
// next hop of the same request. A parent that is not a well-formed
// traceparent starts a new trace, as a tracing library does.
func Child(parent string) string {
	id, ok := ID(parent)
	if !ok {
		return New()
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], mrand.Uint64()|1)
	return "00-" + id + "-" + hex.EncodeToString(b[:]) + "-01"
}

// ID returns the trace-id field of traceparent tp
// (version-traceid-parentid-flags), and whether tp is well-formed: four
// fields, a 32-digit and a 16-digit lowercase hex id, neither all zero.
func ID(tp string) (string, bool) {
	// 2 + 1 + 32 + 1 + 16 + 1 + 2: checked by position, without
	// splitting, since the checker asks this of every op.
	if len(tp) != 55 || tp[2] != '-' || tp[35] != '-' || tp[52] != '-' {
		return "", false
	}
	version, id, parent, flags := tp[:2], tp[3:35], tp[36:52], tp[53:]
	if !lowerHex(version) || !lowerHex(id) || !lowerHex(parent) || !lowerHex(flags) {
		return "", false
	}
	if strings.Trim(id, "0") == "" || strings.Trim(parent, "0") == "" {
		return "", false
	}
	return id, true
}

func lowerHex(s string) bool {
	for i := range len(s) {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
