package scenarios

import (
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/failpoint"
	"github.com/deliverycheck/deliverycheck/nemesis"
	"github.com/deliverycheck/deliverycheck/pipeline/consumer"
	"github.com/deliverycheck/deliverycheck/pipeline/intruder"
	"github.com/deliverycheck/deliverycheck/pipeline/processor"
	"github.com/deliverycheck/deliverycheck/pipeline/producer"
	"github.com/deliverycheck/deliverycheck/pipeline/redrive"
	"github.com/deliverycheck/deliverycheck/pipeline/relay"
	"github.com/deliverycheck/deliverycheck/verdict"
)

// The tags a field of the format may carry, besides yaml's (its key, and
// omitempty for Marshal):
//
//	enum:"broker"        one of enumValues("broker"), each item for a list
//	check:"name"         its text (each item's) passes checkText("name", …)
//	range:">=0,<1"       numbers and durations: bounds, all of them hold
//	range:">=1,zero=default"
//	                     … and 0 set in Go passes too, standing for the
//	                     default (a file must give a value in range)
//	key:"worker"         a mapping with free keys: what a key stands for
//	keycheck:"env"       … and the check each key passes
//	want:"a preset name" what an error says it wanted, if not the enum
//
// The decoder, Set, Paths, Validate, Marshal, the generated reference and
// the JSON Schema all read them; nothing else says what a field accepts.

// field is one key of the format: a tagged struct field.
type field struct {
	key       string
	index     []int
	typ       reflect.Type
	goName    string
	omitempty bool
	enum      string
	check     string
	bounds    []bound
	// zeroDefault is range's zero=default: 0 set in Go keeps the default
	// and passes Validate, though a file may not write it.
	zeroDefault bool
	keyName     string
	keyCheck    string
	want        string // what the decoder says it wants, if not the enum's name
}

// bound is one range limit: the value must be op limit.
type bound struct {
	op    string // "≥", ">" or "<"
	limit float64
}

func (b bound) String() string { return b.op + " " + strconv.FormatFloat(b.limit, 'g', -1, 64) }

func (b bound) holds(x float64) bool {
	switch b.op {
	case "≥":
		return x >= b.limit
	case ">":
		return x > b.limit
	}
	return x < b.limit
}

// outOfRange is what the decoder and Validate say when x, written got,
// breaks one of f's bounds, or "" when it holds them all.
func (f field) outOfRange(x float64, got string) string {
	for _, b := range f.bounds {
		if !b.holds(x) {
			return fmt.Sprintf("must be %s, got %s", b, got)
		}
	}
	return ""
}

// fieldCache holds fieldsOf's answer per struct type: the tags of a type
// never change, and reading them is most of a parse's time otherwise
// (encoding/json caches its fields the same way).
var fieldCache sync.Map // reflect.Type -> []field

// fieldsOf lists the keys of struct type t in field order, which is the
// decode order and the order of "valid:" lists. The slice is shared:
// callers read it and never change it.
func fieldsOf(t reflect.Type) []field {
	if fs, ok := fieldCache.Load(t); ok {
		return fs.([]field)
	}
	fs, _ := fieldCache.LoadOrStore(t, readFields(t))
	return fs.([]field)
}

// readFields reads the fields of struct type t from its tags.
func readFields(t reflect.Type) []field {
	var out []field
	for i := range t.NumField() {
		sf := t.Field(i)
		name, opts, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
		if name == "-" || !sf.IsExported() {
			continue
		}
		if name == "" {
			panic(fmt.Sprintf("scenarios: %s.%s has no yaml key", t, sf.Name))
		}
		f := field{
			key: name, index: sf.Index, typ: sf.Type, goName: sf.Name,
			omitempty: opts == "omitempty",
			enum:      sf.Tag.Get("enum"), check: sf.Tag.Get("check"),
			keyName: sf.Tag.Get("key"), keyCheck: sf.Tag.Get("keycheck"), want: sf.Tag.Get("want"),
		}
		if r := sf.Tag.Get("range"); r != "" {
			for b := range strings.SplitSeq(r, ",") {
				if b == "zero=default" {
					f.zeroDefault = true
					continue
				}
				op, num := b[:1], b[1:]
				if strings.HasPrefix(b, ">=") {
					op, num = "≥", b[2:]
				}
				limit, err := strconv.ParseFloat(num, 64)
				if err != nil {
					panic(fmt.Sprintf("scenarios: %s.%s: range %q: %v", t, sf.Name, r, err))
				}
				f.bounds = append(f.bounds, bound{op: op, limit: limit})
			}
		}
		out = append(out, f)
	}
	return out
}

// formOf is the type whose methods and tags say how values of t are
// written in a file: t's own form for a type of another package (a
// duration, a timeline, the guarantees, the expectation), t itself
// otherwise. A form has t's underlying type, so a *t converts to it.
func formOf(t reflect.Type) reflect.Type {
	switch t {
	case reflect.TypeFor[time.Duration]():
		return reflect.TypeFor[duration]()
	case reflect.TypeFor[[]nemesis.Step]():
		return reflect.TypeFor[timeline]()
	case reflect.TypeFor[[]RateStep]():
		return reflect.TypeFor[rateTimeline]()
	case reflect.TypeFor[checker.Guarantees]():
		return reflect.TypeFor[guarantees]()
	case reflect.TypeFor[verdict.Expectation]():
		return reflect.TypeFor[expectFields]()
	}
	return t
}

// The two interfaces of a form with a shorthand (broker: kafka), or with
// its own text (10s, "at 2s: kill relay-0").
type (
	nodeDecoder interface {
		decodeNode(d *decoder, n *yaml.Node, path string, f field)
	}
	nodeEncoder interface {
		// encodeNode is the value Marshal writes instead.
		encodeNode() any
	}
	// schemaForm states the form's JSON Schema, for the generated
	// docs/scenario.schema.json; section is the schema of its section's
	// keys, nil for a value.
	schemaForm interface {
		jsonSchema(section map[string]any) map[string]any
	}
)

// sectionOf is the struct type whose fields are t's keys (following a
// pointer, and a form's section), or nil when t is not a section.
func sectionOf(t reflect.Type) reflect.Type {
	form := formOf(t)
	if form.Kind() == reflect.Pointer {
		form = form.Elem()
	}
	if s, ok := reflect.Zero(form).Interface().(interface{ section() reflect.Type }); ok {
		return s.section()
	}
	if form.Kind() == reflect.Struct {
		return form
	}
	return nil
}

// asSection is v, a value of a section's type (sectionOf), as a value of
// the section's struct: converted to its form, dereferenced and, for a
// form whose section is another struct, what Marshal writes of it. ok is
// false for a nil pointer, a section left out.
func asSection(v reflect.Value) (_ reflect.Value, ok bool) {
	if form := formOf(v.Type()); form != v.Type() {
		v = v.Convert(form)
	}
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return v, false
		}
		v = v.Elem()
	}
	if _, ok := v.Interface().(interface{ section() reflect.Type }); ok {
		v = reflect.ValueOf(v.Interface().(nodeEncoder).encodeNode())
	}
	return v, true
}

// hasShorthand reports whether t's form decodes itself: a section that
// takes a scalar too, or a value with its own syntax.
func hasShorthand(t reflect.Type) bool {
	form := formOf(t)
	if form.Kind() == reflect.Pointer {
		form = form.Elem()
	}
	return reflect.PointerTo(form).Implements(reflect.TypeFor[nodeDecoder]())
}

// enumValues lists the valid names of an enum tag, in the order errors
// list them.
func enumValues(what string) []string {
	switch what {
	case "broker":
		return Brokers()
	case "standby":
		return Standbys()
	case "queue type":
		return QueueTypes()
	case "isolation level":
		return IsolationLevels()
	case "producer variant":
		return strs(producer.Variants())
	case "relay variant":
		return strs(relay.Variants())
	case "consumer variant":
		return strs(consumer.Variants())
	case "redrive variant":
		return strs(redrive.Variants())
	case "offset reset":
		return OffsetResets()
	case "trace mode":
		return TraceModes()
	case "processor variant":
		return strs(processor.Variants())
	case "processor effect":
		return strs(processor.Effects())
	case "fault family":
		return slices.Sorted(maps.Keys(nemesis.Families()))
	case "guarantee preset":
		return checker.PresetNames()
	case "allowance":
		return strs([]checker.Allowance{checker.None, checker.Allowed})
	case "order":
		return strs([]checker.Order{checker.PerKey, checker.Unordered})
	case "verdict":
		return strs([]checker.Validity{checker.Valid, checker.Invalid})
	case "anomaly":
		return strs(anomalyKinds())
	case "intruder kind":
		return strs(intruder.AllKinds())
	case "intruder permissions":
		return strs([]intruder.Permissions{intruder.Publish, intruder.None})
	}
	panic("scenarios: no enum " + strconv.Quote(what))
}

// checkText checks v against a check tag and returns it normalized
// (failpoint terms are written as failpoint.Term prints them), or why it
// is wrong. "program" is a check of the whole list (decoder.list).
func checkText(check, v string) (string, string) {
	switch check {
	case "", "program":
	case "name":
		return v, checkName(v)
	case "one-line":
		if strings.ContainsAny(strings.TrimSpace(v), "\r\n") {
			return v, "must be one line"
		}
	case "image":
		return v, checkImage(v)
	case "source":
		return v, checkSource(v)
	case "event-type":
		return v, checkEventType(v)
	case "statement":
		if _, err := producer.Bind(v); err != nil {
			return v, err.Error()
		}
	case "failpoint":
		if _, err := failpoint.ParseAny(v); err != nil || strings.Contains(v, "=") {
			return v, fmt.Sprintf("want a failpoint name such as after-commit-before-ack, got %q", v)
		}
	case "failpoint-term": // validate checks the name against the worker
		t, err := failpoint.ParseAny(v)
		if err != nil {
			return v, strings.TrimPrefix(err.Error(), "failpoint: ")
		}
		return t.String(), ""
	default:
		panic("scenarios: no check " + strconv.Quote(check))
	}
	return v, ""
}

// checkKey checks a free key against a keycheck tag.
func checkKey(check, k string) string {
	switch check {
	case "":
	case "env":
		if k == "" || strings.ContainsAny(k, "= \t\n") {
			return fmt.Sprintf("%q is not an environment variable name", k)
		}
	case "source":
		return checkSource(k)
	default:
		panic("scenarios: no key check " + strconv.Quote(check))
	}
	return ""
}

func strs[T ~string](vs []T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

func unknownName(what, got string, valid []string) string {
	return fmt.Sprintf("unknown %s %q%s (valid: %s)", what, got, suggest(got, valid), strings.Join(valid, ", "))
}

var nameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

func checkName(v string) string {
	if len(v) > 63 || !nameRe.MatchString(v) {
		return fmt.Sprintf("want lowercase letters, digits and '-' (at most 63, not starting with '-'), got %q", v)
	}
	return ""
}

// checkSource accepts a CloudEvents source: a non-empty URI reference,
// here anything without spaces or control characters, at most 255 bytes.
func checkSource(v string) string {
	if v == "" || len(v) > 255 || strings.IndexFunc(v, func(r rune) bool { return r <= ' ' || r == 0x7f || r == utf8.RuneError }) >= 0 {
		return fmt.Sprintf("want a CloudEvents source such as /orders (a URI reference, no spaces), got %q", v)
	}
	return ""
}

var eventTypeRe = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._-]{0,63}$`)

// checkEventType accepts an event type as the type header carries it: a
// letter, then letters, digits, '.', '_' or '-', at most 64.
func checkEventType(v string) string {
	if !eventTypeRe.MatchString(v) {
		return fmt.Sprintf("want an event type such as OrderConfirmed (a letter, then letters, digits, '.', '_' or '-', at most 64), got %q", v)
	}
	return ""
}

// checkImage accepts an image reference as an engine would: no spaces,
// nothing empty.
func checkImage(v string) string {
	if v == "" || strings.ContainsAny(v, " \t\r\n") {
		return fmt.Sprintf("want an image reference such as postgres:17, got %q", v)
	}
	return ""
}

// nameFromFile is the default name of a file without one.
func nameFromFile(filename string) string {
	base := strings.TrimSuffix(filepath.Base(filename), filepath.Ext(filename))
	var b strings.Builder
	for _, r := range strings.ToLower(base) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	name := strings.Trim(b.String(), "-")
	if checkName(name) != "" {
		return "scenario"
	}
	return name
}

// Brokers lists the brokers a scenario can name.
func Brokers() []string { return []string{"kafka", "rabbitmq"} }

// Standbys lists the values of postgres.standby ("" in Go is none).
func Standbys() []string { return []string{"none", "async", "sync"} }

// OffsetResets lists where a Kafka group without a committed offset may
// start (broker.offset_reset).
func OffsetResets() []string { return []string{broker.OffsetEarliest, broker.OffsetLatest} }

// TraceModes lists how the trace context may travel
// (observability.traces).
func TraceModes() []string { return []string{"propagate", "per-attempt"} }

// QueueTypes lists the RabbitMQ queue types a scenario can ask for.
func QueueTypes() []string { return []string{"quorum", "classic"} }

// The isolation levels of a stage's reader of its output topics.
const (
	ReadCommitted   = "read_committed"
	ReadUncommitted = "read_uncommitted"
)

// IsolationLevels lists the isolation levels a stage's reader may use:
// the correct one first.
func IsolationLevels() []string { return []string{ReadCommitted, ReadUncommitted} }

// Services lists the servers a fault can target besides workers; "broker"
// is the run's broker whichever it is.
func services(brokerKind string) []string {
	if brokerKind == "" {
		return []string{"postgres", "broker"}
	}
	return []string{"postgres", "broker", brokerKind}
}
