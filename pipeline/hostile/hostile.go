// Package hostile crafts hostile messages (docs/security.md, "Hostile
// payloads and headers"): each a well-formed event made hostile in one
// way a consumer must survive without exhausting its memory, its CPU or
// its inbox. The payload and the headers are untrusted input: a correct
// consumer bounds what it reads before it parses or allocates by the
// message's own claims, dead-letters each such message at once with the
// reason, and keeps going.
package hostile

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/internal/choice"
	"github.com/deliverycheck/deliverycheck/pipeline/producer"
)

// Kind is one way a message is hostile.
type Kind string

// The kinds, in the order Kinds lists them.
const (
	// Oversize is a payload of OversizeBytes: over the consumer's 64 KiB
	// default, under what both brokers accept (Kafka's default
	// message.max.bytes is about 1 MiB).
	Oversize Kind = "oversize"
	// CompressionBomb is a small gzip payload (header content-encoding:
	// gzip) that inflates to BombBytes of valid JSON (the event's payload
	// followed by spaces): a consumer that decompresses without a limit
	// holds all of it.
	CompressionBomb Kind = "compression-bomb"
	// DeepJSON is a payload nested DeepJSONDepth deep, under the size
	// limit: a recursive parser without a depth limit recurses that far.
	DeepJSON Kind = "deep-json"
	// InvalidUTF8 carries invalid UTF-8 bytes in its event-id header and in
	// another one: PostgreSQL refuses them in a text column, so a consumer
	// that stores them as they are fails forever.
	InvalidUTF8 Kind = "invalid-utf8"
	// UnknownType is an event of type Sabotage, which no consumer
	// understands.
	UnknownType Kind = "unknown-type"
	// ManyHeaders carries ManyHeadersCount extra headers.
	ManyHeaders Kind = "many-headers"
)

// The sizes of the hostile kinds.
const (
	// OversizeBytes is 900 KiB: the 4 MiB is over Kafka's default
	// message.max.bytes (1 MiB), which would refuse it before any
	// consumer saw it.
	OversizeBytes = 900 << 10
	// BombBytes is 60 MiB, not the 512 MiB: deflate inflates at
	// most about 1030:1, so 512 MiB compresses to about 510 KiB, over the
	// consumer's 64 KiB payload limit, which would reject it by its size
	// before it ever decompressed it. 60 MiB compresses to about 60 KiB,
	// under that limit, so only the decompression limit stops it.
	BombBytes = 60 << 20
	// DeepJSONDepth is how deep a deep-json payload nests (about 40 KB).
	DeepJSONDepth = 20000
	// ManyHeadersCount is how many extra headers a many-headers message
	// carries: 5000 of 12 bytes each in an AMQP table is about 60 KB, under
	// RabbitMQ's 128 KiB frame_max (the headers travel in one frame), and
	// well under Kafka's record limit.
	ManyHeadersCount = 5000
	// SabotageType is the unknown-type kind's event type.
	SabotageType = "Sabotage"
)

// HeaderContentEncoding names a payload's encoding; gzip is the only one
// a consumer understands.
const HeaderContentEncoding = "content-encoding"

// Kinds lists every kind.
func Kinds() []Kind {
	return []Kind{Oversize, CompressionBomb, DeepJSON, InvalidUTF8, UnknownType, ManyHeaders}
}

// ParseKind checks a kind name.
func ParseKind(s string) (Kind, error) {
	return choice.Parse(s, Kinds(), "hostile: unknown kind")
}

// Crafter makes hostile messages. The bomb's inflating part is the same
// for every message, so it is compressed once, on first use, and kept.
// The zero value is ready; a Crafter is safe for concurrent use.
type Crafter struct {
	once sync.Once
	tail []byte // a gzip member of BombBytes spaces
	err  error
}

// Craft makes message n of kind from base, a well-formed event whose ID is
// the run-unique suffix of the hostile id: hostile-<kind>-<n>-<base.ID>
// (invalid-utf8 appends invalid bytes to that). Every other field is
// base's, with the payload made again to match its headers, except what
// makes the kind hostile.
func (c *Crafter) Craft(kind Kind, n int, base broker.Event) (broker.Event, error) {
	e := base
	e.ID = "hostile-" + string(kind) + "-" + strconv.Itoa(n) + "-" + base.ID
	e.Payload = producer.Payload(e.Key, e.Version, false)
	e.Extra = nil
	switch kind {
	case Oversize:
		e.Payload = padded(e.Payload, OversizeBytes)
	case CompressionBomb:
		p, err := c.bomb(e.Payload)
		if err != nil {
			return broker.Event{}, err
		}
		e.Payload = p
		e.Extra = map[string]string{HeaderContentEncoding: "gzip"}
	case DeepJSON:
		e.Payload = deep(DeepJSONDepth)
	case InvalidUTF8:
		e.ID += "-\xff\xfe"
		e.Extra = map[string]string{"x-note": "caf\xc3\x28"}
	case UnknownType:
		e.Type = SabotageType
	case ManyHeaders:
		e.Extra = make(map[string]string, ManyHeadersCount)
		for i := range ManyHeadersCount {
			e.Extra[fmt.Sprintf("h%04d", i)] = "x"
		}
	default:
		return broker.Event{}, fmt.Errorf("hostile: unknown kind %q", kind)
	}
	return e, nil
}

// padded returns the JSON object p with a "pad" string field added, so the
// whole is size bytes (p must be shorter).
func padded(p []byte, size int) []byte {
	const field = `,"pad":""}`
	out := make([]byte, 0, size)
	out = append(out, p[:len(p)-1]...) // without its closing brace
	out = append(out, field[:len(field)-2]...)
	out = append(out, bytes.Repeat([]byte("x"), size-len(out)-2)...)
	return append(out, `"}`...)
}

// deep returns {"order":[[[...]]]} nested depth arrays deep.
func deep(depth int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"order":`)
	b.Write(bytes.Repeat([]byte("["), depth))
	b.Write(bytes.Repeat([]byte("]"), depth))
	b.WriteString(`}`)
	return b.Bytes()
}

// bomb returns the gzip stream of payload followed by BombBytes spaces
// (still valid JSON): a member holding payload, then the cached member of
// spaces. A gzip stream may hold several members, which a reader
// concatenates (RFC 1952), so the expensive part is compressed once.
func (c *Crafter) bomb(payload []byte) ([]byte, error) {
	c.once.Do(func() { c.tail, c.err = gzipped(io.LimitReader(spaces{}, BombBytes)) })
	if c.err != nil {
		return nil, c.err
	}
	head, err := gzipped(bytes.NewReader(payload))
	if err != nil {
		return nil, err
	}
	return append(head, c.tail...), nil
}

// gzipped is r's content as one gzip member, compressed as well as gzip can.
func gzipped(r io.Reader) ([]byte, error) {
	var b bytes.Buffer
	w, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := io.Copy(w, r); err != nil {
		return nil, fmt.Errorf("hostile: compress: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("hostile: compress: %w", err)
	}
	return b.Bytes(), nil
}

// spaces reads as an endless run of spaces.
type spaces struct{}

func (spaces) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}
