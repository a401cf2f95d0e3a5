package main

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/deliverycheck/deliverycheck/broker"
)

// The limits on what a message may claim (docs/contract.md, "Hostile
// messages: limits your consumer should apply"). The payload and the
// headers are untrusted input: anyone who can publish to the broker
// chooses them. Each limit is checked before anything is parsed or
// allocated by the size a message claims, and a message over one is
// turned away at its first delivery (no redelivery makes it smaller).
// The numbers and the reasons are those of the harness's own consumer.
const (
	// maxHeaders is the most headers a message may carry: an event's own
	// are at most nine, and a broker adds a few.
	maxHeaders = 64
	// maxHeaderValue is the longest header value, in bytes.
	maxHeaderValue = 4 << 10
	// maxPayload is the largest payload, in bytes, as it arrives and
	// once inflated.
	maxPayload = 64 << 10
	// maxJSONDepth is the deepest a payload's JSON may nest; ours nests
	// one deep.
	maxJSONDepth = 32
	// orderConfirmed is the one event type this service handles.
	orderConfirmed = "OrderConfirmed"
)

// header is one message header as the broker client hands it over.
type header struct {
	name, value string
	// text is whether the value is a string. RabbitMQ's headers are
	// typed: the quorum queue adds an integer x-delivery-count to every
	// redelivery, and refusing a message for carrying it would refuse
	// every redelivery. Only text values are checked for UTF-8 and length.
	text bool
}

// message is a delivery before anything in it is trusted, whichever the
// broker: kafkaMessage and rabbitMessage make one.
type message struct {
	id, order string
	headers   []header // as they arrived
	payload   []byte
}

// header returns the value of the first header called name, or "".
func (m message) header(name string) string {
	for _, h := range m.headers {
		if h.name == name {
			return h.value
		}
	}
	return ""
}

// inspect checks m against the limits, then reads the event from it: it
// returns the event and why it must be turned away, "" if it may go on to
// the authority checks. The order is the contract's: the headers' count
// and each header's encoding and length, the identity, a known type, the
// payload's size, its encoding (gzip inflated through a bounded reader),
// its JSON depth, and only then the parser.
//
// The event's id is as the database and the history can hold it, and as
// the harness records it: as it came when it is valid UTF-8 without NUL
// bytes, else quoted as strconv.QuoteToASCII does (broker.SafeText). An
// id PostgreSQL refuses, written as it came, would fail its insert on
// every delivery and stall the subscription.
func inspect(m message) (event, string) {
	ev := event{id: broker.SafeText(m.id), order: m.order,
		source: m.header("source"), typ: m.header("type"), tenant: m.header("tenant"), time: m.header("time"),
		signature: m.header("signature"), payload: m.payload}
	if r := headerLimits(m.headers); r != "" {
		return ev, r
	}
	var err error
	ev.version, err = strconv.ParseInt(m.header("version"), 10, 64)
	switch {
	case m.id == "":
		return ev, "missing event id"
	case m.order == "" || broker.SafeText(m.order) != m.order:
		// Stored as it is (shop_stock_moves.order_id), it must be text.
		return ev, "missing or malformed aggregate id"
	case err != nil || ev.version <= 0:
		return ev, "missing or malformed version"
	case ev.typ != orderConfirmed:
		return ev, "unknown type " + strconv.QuoteToASCII(truncate(ev.typ, 64))
	}
	payload, r := decoded(m)
	if r != "" {
		return ev, r
	}
	if jsonDeeper(payload, maxJSONDepth) {
		return ev, "JSON nested deeper than " + strconv.Itoa(maxJSONDepth)
	}
	return ev, schema(&ev, payload)
}

// headerLimits checks the headers' count, then each name's and text
// value's encoding and each value's length, in name order so the reason
// is the same on every delivery. Kafka may repeat a name: each counts.
func headerLimits(hs []header) string {
	if len(hs) > maxHeaders {
		return "too many headers: " + strconv.Itoa(len(hs))
	}
	sorted := slices.SortedFunc(slices.Values(hs), func(a, b header) int { return cmp.Compare(a.name, b.name) })
	for _, h := range sorted {
		switch {
		case !utf8.ValidString(h.name):
			return "header name " + strconv.QuoteToASCII(truncate(h.name, 64)) + " is not valid UTF-8"
		case !h.text:
		case !utf8.ValidString(h.value):
			return "header " + strconv.QuoteToASCII(truncate(h.name, 64)) + " is not valid UTF-8"
		case len(h.value) > maxHeaderValue:
			return "header " + strconv.QuoteToASCII(truncate(h.name, 64)) + " is over " + strconv.Itoa(maxHeaderValue) + " bytes: " + strconv.Itoa(len(h.value))
		}
	}
	return ""
}

// decoded returns m's payload as the service parses it: at most
// maxPayload bytes as it arrived, inflated when its content-encoding is
// gzip through a reader that stops one byte past maxPayload, so a
// compression bomb costs at most that much.
func decoded(m message) ([]byte, string) {
	if len(m.payload) > maxPayload {
		return nil, "payload too large: " + strconv.Itoa(len(m.payload)) + " bytes"
	}
	switch enc := m.header("content-encoding"); enc {
	case "":
		return m.payload, ""
	case "gzip":
	default:
		return nil, "unknown content-encoding " + strconv.QuoteToASCII(truncate(enc, 64))
	}
	zr, err := gzip.NewReader(bytes.NewReader(m.payload))
	if err != nil {
		return nil, "malformed gzip payload: " + truncate(err.Error(), 120)
	}
	out, err := io.ReadAll(io.LimitReader(zr, maxPayload+1))
	if len(out) > maxPayload {
		return nil, "decompressed payload over " + strconv.Itoa(maxPayload) + " bytes"
	}
	if err != nil {
		return nil, "malformed gzip payload: " + truncate(err.Error(), 120)
	}
	return out, ""
}

// jsonDeeper reports whether JSON text p nests (objects and arrays)
// deeper than max: a byte scan, skipping strings, before the parser
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

// schema checks the payload, decoded into the fields the service reads
// only, against the event's headers, and notes its schema version in ev
// (which versions this build accepts is decided in apply). This service
// has no retries for these: a payload that does not match (the
// workload's poison events) is turned away at its first delivery too,
// since no redelivery changes it.
func schema(ev *event, payload []byte) string {
	var p struct {
		Order   string `json:"order"`
		Version int64  `json:"version"`
		Status  string `json:"status"`
		Schema  int64  `json:"schema"`
	}
	if err := json.Unmarshal(payload, &p); err != nil {
		return "payload does not match the schema: " + truncate(err.Error(), 120)
	}
	if p.Order != ev.order || p.Version != ev.version || p.Status == "" {
		return "payload disagrees with its headers"
	}
	ev.schema = p.Schema
	return ""
}

// schemaVersionsFromEnv reads DELIVERYCHECK_SCHEMA_VERSIONS, "1" when
// unset: the event schema versions this build accepts.
func schemaVersionsFromEnv() ([]int64, error) {
	v := cmp.Or(os.Getenv("DELIVERYCHECK_SCHEMA_VERSIONS"), "1")
	var out []int64
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("DELIVERYCHECK_SCHEMA_VERSIONS=%q: want versions like 1,2", v)
		}
		out = append(out, n)
	}
	return out, nil
}

// unsupported is a refusal that is not the event's fault but this build's:
// an event in a schema version it does not know yet. A later build may
// accept it, so it is not turned away at once: given back until its last
// delivery, then dead-lettered through the broker, where a redrive after
// the fix brings it back (docs/contract.md, "Dead letters and redrive").
type unsupported struct{ reason string }

func (u *unsupported) Error() string { return u.reason }

// checkSchema is an unsupported error when ev's schema version is not one
// of versions.
func checkSchema(ev event, versions []int64) error {
	v := max(ev.schema, 1)
	if slices.Contains(versions, v) {
		return nil
	}
	s := make([]string, len(versions))
	for i, n := range versions {
		s[i] = strconv.FormatInt(n, 10)
	}
	return &unsupported{fmt.Sprintf("schema version %d is not supported (accepts %s)", v, strings.Join(s, ","))}
}

// truncate cuts s to at most n bytes, at a rune boundary, so a cut never
// makes valid text invalid.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
