package history

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// errSlow means the fast decoder met a shape it does not handle (escapes,
// unknown keys, null, floats, ...) and encoding/json must decide.
var errSlow = errors.New("history: fast path declined")

// interner shares the bytes of low-cardinality strings (process, consumer,
// key, ...) between ops. A small direct-mapped cache answers most lookups
// without hashing into the map, which stops growing at maxInterned entries.
type interner struct {
	m     map[string]string
	cache *[internCache]string // allocated on first use
}

const (
	maxInterned = 1 << 16
	internCache = 1 << 15
)

func (in *interner) slot(b []byte) *string {
	h := uint32(len(b)) * 0x9e3779b1
	for _, c := range b {
		h = (h ^ uint32(c)) * 0x01000193
	}
	if in.cache == nil {
		in.cache = new([internCache]string)
	}
	return &in.cache[h>>(32-15)]
}

// recent shares strings seen recently, such as the id of an event whose
// ops are close together, without remembering them for long.
func (in *interner) recent(b []byte) string {
	if in == nil {
		return string(b)
	}
	slot := in.slot(b)
	if *slot != string(b) {
		*slot = string(b)
	}
	return *slot
}

func (in *interner) get(b []byte) string {
	if in == nil {
		return string(b)
	}
	slot := in.slot(b)
	if *slot == string(b) {
		return *slot
	}
	s, ok := in.m[string(b)]
	if !ok {
		s = string(b)
		if in.m == nil {
			in.m = make(map[string]string)
		}
		if len(in.m) < maxInterned {
			in.m[s] = s
		}
	}
	*slot = s
	return s
}

// UnmarshalLine decodes one history line into op, which it resets first.
// It uses a dedicated scanner for the documented shape and falls back to
// encoding/json for anything else, so it decodes exactly as json.Unmarshal
// does. It then refuses, as json.Unmarshal would not, an op the checker
// could misjudge (see [CheckOp]).
func UnmarshalLine(line []byte, op *Op) error {
	*op = Op{}
	return unmarshalLine(line, op, nil)
}

// unmarshalLine is UnmarshalLine into an op that is already zero: readers
// decode into zeroed slots, and one pass less over a ~300-byte op per line
// is measurable.
func unmarshalLine(line []byte, op *Op, in *interner) error {
	d := decoder{b: line, in: in}
	if err := d.op(op); err == nil {
		return checkOp(op, d.nonASCII)
	}
	*op = Op{}
	if err := json.Unmarshal(line, op); err != nil {
		return err
	}
	return checkOp(op, true)
}

// An InvalidOpError is a line that is well-formed JSON, so not torn, but
// not an op the checker can judge. Readers report it as bad input.
type InvalidOpError struct {
	Problem string // in words, e.g. "it has no type (want invoke, ok, fail or info)"
}

func (e *InvalidOpError) Error() string { return "history: invalid op: " + e.Problem }

// CheckOp refuses what json.Unmarshal accepts but the checker would
// misjudge: an op without a type (its zero Type would otherwise be read
// as some outcome), and an identity field (event, source, key, consumer,
// process, topic, txn) holding U+FFFD, which is what invalid UTF-8 bytes and lone
// surrogate escapes such as "\ud800" decode to: two different ids would
// become one event and a false duplicate. Refusing them as bad input is
// sound; comparing them as decoded is not.
func CheckOp(op *Op) error { return checkOp(op, true) }

// checkOp is CheckOp; mayHaveFFFD false (every string was plain ASCII)
// skips the identity scan.
func checkOp(op *Op, mayHaveFFFD bool) error {
	if op.Type == 0 {
		return &InvalidOpError{Problem: "it has no type (want invoke, ok, fail or info)"}
	}
	if !mayHaveFFFD {
		return nil
	}
	for _, f := range [...]struct{ name, s string }{
		{"event", op.Value.Event}, {"source", op.Value.Source}, {"key", op.Value.Key},
		{"consumer", op.Value.Consumer}, {"process", op.Process},
		{"topic", op.Value.Topic}, {"txn", op.Value.Txn}, {"published_as", op.Value.PublishedAs},
	} {
		if strings.ContainsRune(f.s, utf8.RuneError) {
			return &InvalidOpError{Problem: fmt.Sprintf("its %s %q is not valid UTF-8 text: invalid bytes, or a lone surrogate escape such as \\ud800, read as U+FFFD, so two different ids could read as one; write identities as valid UTF-8", f.name, f.s)}
		}
	}
	return nil
}

type decoder struct {
	b        []byte
	i        int
	in       *interner
	nonASCII bool // some string had non-ASCII bytes
}

func (d *decoder) ws() {
	for d.i < len(d.b) && d.b[d.i] <= ' ' {
		switch d.b[d.i] {
		case ' ', '\t', '\r', '\n':
			d.i++
		default:
			return
		}
	}
}

func (d *decoder) byte(c byte) bool {
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// strClass classifies string bytes for raw: 0 plain ASCII, 1 closing
// quote, 2 needs encoding/json (escape or control), 3 non-ASCII.
var strClass = func() (t [256]uint8) {
	for c := range 0x20 {
		t[c] = 2
	}
	t['"'] = 1
	t['\\'] = 2
	for c := 0x80; c < 0x100; c++ {
		t[c] = 3
	}
	return t
}()

// raw returns the bytes of a plain JSON string: no escapes, no control
// characters, valid UTF-8.
func (d *decoder) raw() ([]byte, error) {
	d.ws()
	b := d.b
	i := d.i
	if i >= len(b) || b[i] != '"' {
		return nil, errSlow
	}
	i++
	start := i
	ascii := true
	for ; i < len(b); i++ {
		switch strClass[b[i]] {
		case 0:
			continue
		case 1:
			s := b[start:i]
			d.i = i + 1
			if !ascii {
				if !utf8.Valid(s) {
					return nil, errSlow
				}
				d.nonASCII = true
			}
			return s, nil
		case 2:
			return nil, errSlow
		default:
			ascii = false
		}
	}
	return nil, errSlow
}

func (d *decoder) str(intern bool) (string, error) {
	b, err := d.raw()
	if err != nil {
		return "", err
	}
	if intern {
		return d.in.get(b), nil
	}
	return d.in.recent(b), nil
}

func (d *decoder) int() (int64, error) {
	d.ws()
	neg := false
	if d.i < len(d.b) && d.b[d.i] == '-' {
		neg = true
		d.i++
	}
	start := d.i
	var n int64
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		n = n*10 + int64(d.b[d.i]-'0')
		d.i++
	}
	digits := d.i - start
	if digits == 0 || digits > 18 || (digits > 1 && d.b[start] == '0') {
		return 0, errSlow
	}
	if d.i < len(d.b) {
		switch d.b[d.i] {
		case '.', 'e', 'E':
			return 0, errSlow
		}
	}
	if neg {
		n = -n
	}
	return n, nil
}

func (d *decoder) bool() (bool, error) {
	d.ws()
	if len(d.b)-d.i >= 4 && string(d.b[d.i:d.i+4]) == "true" {
		d.i += 4
		return true, nil
	}
	if len(d.b)-d.i >= 5 && string(d.b[d.i:d.i+5]) == "false" {
		d.i += 5
		return false, nil
	}
	return false, errSlow
}

// key reads the next key of an object whose '{' has been read, and the
// ':' after it. It reports end at the closing '}'.
func (d *decoder) key(first bool) (k []byte, end bool, err error) {
	d.ws()
	if d.i >= len(d.b) {
		return nil, false, errSlow
	}
	switch c := d.b[d.i]; {
	case c == '}':
		d.i++
		return nil, true, nil
	case !first && c == ',':
		d.i++
	case !first:
		return nil, false, errSlow
	}
	k, err = d.raw()
	if err != nil {
		return nil, false, err
	}
	if !d.byte(':') {
		return nil, false, errSlow
	}
	return k, false, nil
}

func (d *decoder) op(op *Op) error {
	if !d.byte('{') {
		return errSlow
	}
	for first := true; ; first = false {
		k, end, err := d.key(first)
		if err != nil {
			return err
		}
		if end {
			break
		}
		switch string(k) {
		case "index":
			op.Index, err = d.int()
		case "time":
			op.Time, err = d.int()
		case "process":
			op.Process, err = d.str(true)
		case "type":
			var b []byte
			b, err = d.raw()
			if err == nil {
				switch string(b) {
				case "invoke":
					op.Type = Invoke
				case "ok":
					op.Type = OK
				case "fail":
					op.Type = Fail
				case "info":
					op.Type = Info
				default:
					err = errSlow
				}
			}
		case "f":
			var b []byte
			b, err = d.raw()
			if err == nil {
				op.F = internF(b, d.in)
			}
		case "value":
			err = d.value(&op.Value)
		default:
			err = errSlow
		}
		if err != nil {
			return err
		}
	}
	d.ws()
	if d.i != len(d.b) {
		return errSlow
	}
	return nil
}

func internF(b []byte, in *interner) F {
	switch string(b) {
	case "commit":
		return Commit
	case "publish":
		return Publish
	case "deliver":
		return Deliver
	case "apply":
		return Apply
	case "ack":
		return Ack
	case "final-read":
		return FinalRead
	case "skip-stale":
		return SkipStale
	case "dlq":
		return DLQ
	}
	return F(in.get(b))
}

func (d *decoder) value(v *Value) error {
	if !d.byte('{') {
		return errSlow
	}
	for first := true; ; first = false {
		k, end, err := d.key(first)
		if err != nil {
			return err
		}
		if end {
			return nil
		}
		switch string(k) {
		case "event":
			v.Event, err = d.str(false)
		case "source":
			v.Source, err = d.str(true)
		case "key":
			v.Key, err = d.str(true)
		case "version":
			v.Version, err = d.int()
		case "partition":
			v.Partition, err = d.int()
		case "offset":
			v.Offset, err = d.int()
		case "tag":
			v.Tag, err = d.int()
		case "attempt":
			v.Attempt, err = d.int()
		case "consumer":
			v.Consumer, err = d.str(true)
		case "table":
			v.Table, err = d.str(true)
		case "published":
			v.Published, err = d.bool()
		case "poison":
			v.Poison, err = d.bool()
		case "error":
			v.Error, err = d.str(true)
		case "reason":
			v.Reason, err = d.str(true)
		case "fault":
			v.Fault, err = d.str(true)
		case "target":
			v.Target, err = d.str(true)
		case "detail":
			v.Detail, err = d.str(true)
		case "evidence":
			v.Evidence, err = d.str(true)
		case "commit_time":
			v.CommitTime, err = d.int()
		case "subscriptions":
			v.Subscriptions, err = d.strings()
		case "topic":
			v.Topic, err = d.str(true)
		case "txn":
			v.Txn, err = d.str(false)
		case "transactional_id":
			v.TransactionalID, err = d.str(true)
		case "input_partition":
			v.InputPartition, err = d.int()
		case "input_offset":
			v.InputOffset, err = d.int()
		case "last_stable_offset":
			v.LastStableOffset, err = d.int()
		case "high_watermark":
			v.HighWatermark, err = d.int()
		case "topics":
			v.Topics, err = d.strings()
		case "published_as":
			v.PublishedAs, err = d.str(false)
		case "rss":
			v.RSS, err = d.int()
		case "schema":
			v.Schema, err = d.int()
		case "rate":
			v.Rate, err = d.int()
		case "lag":
			v.Lag, err = d.int()
		case "trace":
			v.Trace, err = d.str(false)
		default:
			err = errSlow
		}
		if err != nil {
			return err
		}
	}
}

func (d *decoder) strings() ([]string, error) {
	if !d.byte('[') {
		return nil, errSlow
	}
	out := []string{}
	if d.byte(']') {
		return out, nil
	}
	for {
		s, err := d.str(true)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
		if d.byte(',') {
			continue
		}
		if d.byte(']') {
			return out, nil
		}
		return nil, errSlow
	}
}
