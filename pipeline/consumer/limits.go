package consumer

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/deliverycheck/deliverycheck/broker"
)

// The consumer's limits on what a message may claim (docs/security.md,
// "Hostile payloads and headers"). The payload and the headers are
// untrusted input: each limit is checked before anything is parsed or
// allocated by the size a message claims, and a message over one is
// dead-lettered at once (no redelivery makes it smaller).
const (
	// MaxHeaders is the most headers a message may carry: the event's own
	// are at most nine, and a broker adds a few.
	MaxHeaders = 64
	// MaxHeaderValue is the longest header value, in bytes.
	MaxHeaderValue = 4 << 10
	// MaxJSONDepth is the deepest a payload's JSON may nest; the
	// consumer's schema nests one deep.
	MaxJSONDepth = 32
	// contentEncoding is the header naming a payload's encoding; gzip is
	// the only one understood.
	contentEncoding = "content-encoding"
)

// bounded reports whether the consumer's variant applies the limits:
// every variant but the unbounded one, whose one flaw is not to.
func (c *Consumer) bounded() bool { return c.cfg.Variant != Unbounded }

// check returns why d can never be applied, or "" if it can, and whether
// the reason is permanent in that no redelivery can change it (a message
// over a limit, of an unknown type), so it is dead-lettered at once. It
// must not panic, nor allocate by what d claims, on anything a broker
// hands it.
func (c *Consumer) check(d *broker.Delivery) (reason string, permanent bool) {
	if c.bounded() {
		if r := headerLimits(d.Headers); r != "" {
			return r, true
		}
	}
	switch {
	case d.ID == "":
		return "missing event id", false
	case d.Source == "":
		return "missing source", false
	case len(c.cfg.Sources) > 0 && !slices.Contains(c.cfg.Sources, d.Source):
		return "unknown source " + strconv.QuoteToASCII(truncate(d.Source, 128)), false
	case d.Key == "" || (c.bounded() && !utf8.ValidString(d.Key)):
		return "missing or malformed aggregate id", false
	case d.Version <= 0:
		return "missing or malformed version", false
	case !slices.Contains(KnownTypes(), d.Type):
		return "unknown type " + strconv.QuoteToASCII(truncate(d.Type, 64)), true
	}
	payload, r := c.decoded(d)
	if r != "" {
		return r, true
	}
	if c.bounded() && jsonDeeper(payload, MaxJSONDepth) {
		return "JSON nested deeper than " + strconv.Itoa(MaxJSONDepth), true
	}
	// A payload refused by the schema is retried up to the limit before
	// it is dead-lettered: not permanent.
	return c.schema(d, payload), false
}

// headerLimits checks the headers' count, then each value's encoding and
// length (in name order, so the reason is the same on every delivery).
func headerLimits(h map[string]string) string {
	if len(h) > MaxHeaders {
		return "too many headers: " + strconv.Itoa(len(h))
	}
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		v := h[k]
		switch {
		case !utf8.ValidString(k):
			return "header name " + strconv.QuoteToASCII(truncate(k, 64)) + " is not valid UTF-8"
		case !utf8.ValidString(v):
			return "header " + strconv.QuoteToASCII(truncate(k, 64)) + " is not valid UTF-8"
		case len(v) > MaxHeaderValue:
			return "header " + strconv.QuoteToASCII(truncate(k, 64)) + " is over " + strconv.Itoa(MaxHeaderValue) + " bytes: " + strconv.Itoa(len(v))
		}
	}
	return ""
}

// decoded returns d's payload as the consumer parses it: inflated when
// its content-encoding is gzip. The bounded consumer refuses a payload
// over MaxPayload, an encoding other than gzip, and inflates through a
// limit of MaxPayload+1 bytes, so a bomb costs it at most that much; the
// unbounded one reads whatever it inflates to.
func (c *Consumer) decoded(d *broker.Delivery) ([]byte, string) {
	if c.bounded() && len(d.Payload) > c.cfg.MaxPayload {
		return nil, "payload too large: " + strconv.Itoa(len(d.Payload)) + " bytes"
	}
	enc, ok := d.Headers[contentEncoding]
	if !ok {
		return d.Payload, ""
	}
	if enc != "gzip" {
		if c.bounded() {
			return nil, "unknown content-encoding " + strconv.QuoteToASCII(truncate(enc, 64))
		}
		return d.Payload, ""
	}
	zr, err := gzip.NewReader(bytes.NewReader(d.Payload))
	if err != nil {
		return nil, "malformed gzip payload: " + truncate(err.Error(), 120)
	}
	var r io.Reader = zr
	if c.bounded() {
		r = io.LimitReader(zr, int64(c.cfg.MaxPayload)+1)
	}
	out, err := io.ReadAll(r)
	if c.bounded() && len(out) > c.cfg.MaxPayload {
		return nil, "decompressed payload over " + strconv.Itoa(c.cfg.MaxPayload) + " bytes"
	}
	if err != nil {
		return nil, "malformed gzip payload: " + truncate(err.Error(), 120)
	}
	return out, ""
}

// jsonDeeper reports whether JSON text p nests (objects and arrays)
// deeper than max: a byte scan, skipping strings, before any parser
// recurses into it. It does not validate p; the parser does.
func jsonDeeper(p []byte, max int) bool {
	depth, inString, escaped := 0, false, false
	for _, b := range p {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case b == '\\':
				escaped = true
			case b == '"':
				inString = false
			}
		case b == '"':
			inString = true
		case b == '{' || b == '[':
			depth++
			if depth > max {
				return true
			}
		case b == '}' || b == ']':
			depth--
		}
	}
	return false
}

// schema checks payload against the event schema and d's headers, then
// its schema version against the versions this build accepts
// (Config.SchemaVersions): a version it does not know yet is refused as
// an event from a newer producer is, retried to the limit, then
// dead-lettered, to be redriven once a build that knows it is deployed. The bounded consumer decodes into the
// schema's fields only; the unbounded one into any, holding every value
// the payload has.
func (c *Consumer) schema(d *broker.Delivery, payload []byte) string {
	var p EventPayload
	if c.bounded() {
		if err := json.Unmarshal(payload, &p); err != nil {
			return "payload does not match the schema: " + truncate(err.Error(), 120)
		}
	} else {
		var v any
		if err := json.Unmarshal(payload, &v); err != nil {
			return "payload does not match the schema: " + truncate(err.Error(), 120)
		}
		m, _ := v.(map[string]any)
		p.Order, _ = m["order"].(string)
		f, _ := m["version"].(float64)
		p.Version = int64(f)
		p.Status, _ = m["status"].(string)
		f, _ = m["schema"].(float64)
		p.Schema = int64(f)
	}
	if p.Order != d.Key || p.Version != d.Version || p.Status == "" {
		return "payload disagrees with its headers"
	}
	if accepts := c.schemaVersions(); !slices.Contains(accepts, p.SchemaVersion()) {
		return "schema version " + strconv.FormatInt(p.SchemaVersion(), 10) + " is not supported (accepts " + JoinVersions(accepts) + ")"
	}
	return ""
}

// EventPayload is the event schema: the fields of a payload the consumer
// reads.
type EventPayload struct {
	Order   string `json:"order"`
	Version int64  `json:"version"`
	Status  string `json:"status"`
	// Schema is the payload's schema version; absent (0) is 1.
	Schema int64 `json:"schema,omitempty"`
}

// SchemaVersion is p's schema version, 1 when the payload has none.
func (p EventPayload) SchemaVersion() int64 { return max(p.Schema, 1) }

// ParsePayload decodes payload as the bounded consumer does; an error
// means no build of the consumer will ever accept it (poison).
func ParsePayload(payload []byte) (EventPayload, error) {
	var p EventPayload
	if err := json.Unmarshal(payload, &p); err != nil {
		return p, err
	}
	if p.Order == "" || p.Version <= 0 || p.Status == "" {
		return p, errors.New("payload lacks an order, a version or a status")
	}
	return p, nil
}

// DefaultSchemaVersions are the schema versions a consumer accepts unless
// told otherwise: the first only.
var DefaultSchemaVersions = []int64{1}

// schemaVersions are the versions this consumer accepts.
func (c *Consumer) schemaVersions() []int64 {
	if len(c.cfg.SchemaVersions) == 0 {
		return DefaultSchemaVersions
	}
	return c.cfg.SchemaVersions
}

// JoinVersions writes schema versions as a list, "1,2": how reasons,
// evidence and DELIVERYCHECK_SCHEMA_VERSIONS write them.
func JoinVersions(vs []int64) string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = strconv.FormatInt(v, 10)
	}
	return strings.Join(out, ",")
}
