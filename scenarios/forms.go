package scenarios

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/failpoint"
	"github.com/deliverycheck/deliverycheck/nemesis"
	"github.com/deliverycheck/deliverycheck/verdict"
)

// The forms: how the values the decoder cannot read from their fields
// alone are written. Each decodes itself (nodeDecoder), and those whose
// file form is not their fields say what Marshal writes (nodeEncoder);
// formOf maps the types of other packages to theirs.

// duration is a Go duration written as text: 500ms, 10s, 1m30s.
type duration time.Duration

func (t *duration) decodeNode(d *decoder, n *yaml.Node, path string, f field) {
	v, ok := d.scalarValue(n, path, "a duration such as 10s")
	if !ok {
		return
	}
	x, err := time.ParseDuration(v)
	if err != nil {
		d.fail(n, path, "want a duration such as 10s or 1m30s, got %q", v)
		return
	}
	if msg := f.outOfRange(float64(x), v); msg != "" {
		d.fail(n, path, "%s", msg)
		return
	}
	*t = duration(x)
}

func (t duration) encodeNode() any { return time.Duration(t).String() }

func (duration) jsonSchema(map[string]any) map[string]any {
	return map[string]any{"type": "string", "pattern": `^(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$`}
}

// size is a size in bytes written as checker.ParseSize reads it: 256MiB,
// 1GiB, or plain bytes.
type size int64

func (z *size) decodeNode(d *decoder, n *yaml.Node, path string, _ field) {
	v, ok := d.scalarValue(n, path, "a size such as 256MiB")
	if !ok {
		return
	}
	x, err := checker.ParseSize(v)
	if err != nil {
		d.fail(n, path, "%s", err)
		return
	}
	*z = size(x)
}

func (z size) encodeNode() any { return checker.FormatSize(int64(z)) }

func (size) jsonSchema(map[string]any) map[string]any {
	return map[string]any{"anyOf": []any{
		map[string]any{"type": "integer", "minimum": 0},
		map[string]any{"type": "string", "pattern": `^\s*[0-9]+\s*(B|KiB|MiB|GiB|TiB)?\s*$`},
	}}
}

// timeline is nemesis.timeline: steps written as nemesis.ParseStep reads
// them. An unquoted step ("- at 1s: kill relay-0") is a one-key mapping to
// YAML; it is read back as the line it was meant to be.
type timeline []nemesis.Step

func (tl *timeline) decodeNode(d *decoder, n *yaml.Node, path string, _ field) {
	var steps timeline
	ok := d.stepLines(n, path, "step", "at 2s: kill relay-0", func(it *yaml.Node, p, text string) bool {
		st, err := nemesis.ParseStep(text)
		if err != nil {
			d.fail(it, p, "%s", strings.ReplaceAll(err.Error(), "nemesis: ", ""))
			return false
		}
		if st.At < 0 || st.For < 0 {
			d.fail(it, p, "times must be ≥ 0 in %q", text)
			return false
		}
		if st.Fault.Kind == nemesis.Failpoint {
			// Any name parses here; validate checks it against the
			// worker, built-in or a team's.
			t, err := failpoint.ParseAny(st.Fault.Term)
			if err != nil {
				d.fail(it, p, "%s", strings.TrimPrefix(err.Error(), "failpoint: "))
				return false
			}
			st.Fault.Term = t.String()
		}
		steps = append(steps, st)
		return true
	})
	if ok {
		*tl = steps
	}
}

// stepLines reads a list of timeline lines ("at <time>: ..."), each
// written as a scalar or, unquoted, as the one-key mapping YAML makes of
// it, read back as the line it was meant to be; one scalar alone is a
// list of one. It hands each line to parse with its node and path, and
// reports whether every item was a line parse took: the caller keeps
// the steps only then. what and example word the errors ("step", "at 2s:
// kill relay-0").
func (d *decoder) stepLines(n *yaml.Node, path, what, example string, parse func(it *yaml.Node, p, text string) bool) bool {
	var items []*yaml.Node
	switch {
	case n.Kind == yaml.SequenceNode:
		items = n.Content
	case n.Kind == yaml.ScalarNode && !isNull(n):
		items = []*yaml.Node{n}
	case isNull(n):
	default:
		d.fail(n, path, "want a list of %ss such as %q, got %s", what, example, describe(n))
		return false
	}
	ok := true
	for i, it := range items {
		p := fmt.Sprintf("%s[%d]", path, i)
		it = d.resolve(it, p)
		if it == nil {
			return false
		}
		d.lines[p] = it.Line
		var text string
		switch {
		case it.Kind == yaml.ScalarNode && !isNull(it):
			text = it.Value
		case it.Kind == yaml.MappingNode && len(it.Content) == 2 && it.Content[0].Kind == yaml.ScalarNode && it.Content[1].Kind == yaml.ScalarNode:
			text = it.Content[0].Value + ": " + it.Content[1].Value
		default:
			d.fail(it, p, "want a %s such as %q, got %s", what, example, describe(it))
			ok = false
			continue
		}
		ok = parse(it, p, text) && ok
	}
	return ok
}

func (timeline) jsonSchema(map[string]any) map[string]any {
	step := map[string]any{"type": "string", "pattern": `^\s*at\s+\S+\s*:\s*\S`}
	unquoted := map[string]any{
		"type": "object", "minProperties": 1, "maxProperties": 1,
		"propertyNames": map[string]any{"pattern": `^\s*at\s+\S+$`}, "additionalProperties": map[string]any{"type": "string"},
	}
	return map[string]any{"anyOf": []any{
		map[string]any{"type": "null"}, step,
		map[string]any{"type": "array", "items": map[string]any{"anyOf": []any{step, unquoted}}},
	}}
}

func (tl timeline) encodeNode() any {
	out := make([]string, len(tl))
	for i, st := range tl {
		out[i] = st.String()
	}
	return out
}

// guarantees is the guarantees: value: a preset, or the check command's
// form ("effectively-once,order=per-key"), as a string; or the mapping
// guaranteeFields.
type guarantees checker.Guarantees

func (g *guarantees) decodeNode(d *decoder, n *yaml.Node, path string, _ field) {
	switch {
	case isNull(n):
	case n.Kind == yaml.MappingNode:
		var form guaranteeFields
		copyFields(&form, g)
		d.fields(reflect.ValueOf(&form).Elem(), n, path)
		copyFields(g, &form)
	default:
		v, ok := d.scalarValue(n, path, "a preset or a mapping")
		if !ok {
			return
		}
		p, err := checker.ParseGuarantees(v)
		if err != nil {
			d.fail(n, path, "%s", strings.TrimPrefix(err.Error(), "checker: "))
			return
		}
		*g = guarantees(p)
	}
}

func (guarantees) section() reflect.Type { return reflect.TypeFor[guaranteeFields]() }

func (guarantees) jsonSchema(section map[string]any) map[string]any {
	return map[string]any{"anyOf": []any{map[string]any{"type": "string"}, section}}
}

// encodeNode writes the guarantees normalized, in the order given.
func (g guarantees) encodeNode() any {
	norm := checker.Guarantees(g).Normalize()
	norm.Subscriptions = g.Subscriptions
	var form guaranteeFields
	copyFields(&form, &norm)
	return form
}

// guaranteeFields are what the run promises (the checker judges against
// it, see docs/results.md): which anomaly kinds are fatal and which only
// reported, and a preset the settings override. A string is a preset or
// the `check --guarantees` form:
//
//	guarantees: at-least-once
//	guarantees: effectively-once,order=per-key
//	guarantees:
//	  preset: effectively-once   # applied first, whatever the order of the keys
//	  order: per-key
//	  subscriptions: [inventory]
//
// unexpected, unauthorized-effect, dlq-unaccounted, wrongly-dead-lettered,
// poison-applied, inbox-mismatch, unrecovered, over-retried, poll-skip,
// nonmonotonic-poll and redrive-rate are always fatal; stall, memory,
// retry-storm and backlog-age only when max-stall, max-rss,
// max-retry-sync and max-backlog-age are set.
type guaranteeFields struct {
	// Preset is a named set of the settings below, applied before them
	// whatever the order of the keys; the subscriptions are kept.
	Preset string `yaml:"preset,omitempty" enum:"guarantee preset" want:"a preset name"`
	// Loss says whether lost events are fatal (`none`, the default) or
	// only reported (`allowed`).
	Loss checker.Allowance `yaml:"loss" enum:"allowance"`
	// DuplicateEffects says whether an event applied twice is fatal
	// (`none`, the default) or only reported (`allowed`).
	DuplicateEffects checker.Allowance `yaml:"duplicate-effects" enum:"allowance"`
	// Order says whether an older version applied after a newer one of
	// the same key is fatal (`per-key`) or only reported (`none`, the
	// default).
	Order checker.Order `yaml:"order" enum:"order"`
	// Gaps says whether a skipped version of a key is fatal (`none`) or
	// only reported (`allowed`, the default).
	Gaps checker.Allowance `yaml:"gaps" enum:"allowance"`
	// Subscriptions must each apply every committed event; each must be
	// a workload subscription. Empty means every workload subscription.
	Subscriptions []string `yaml:"subscriptions,omitempty" check:"name"`
	// MaxStall is the longest a subscription may have committed events
	// waiting and settle none (apply, skip-stale, dlq); a longer stall is
	// fatal. Empty promises nothing (the longest is still reported).
	MaxStall time.Duration `yaml:"max-stall,omitempty" range:">=0"`
	// MaxRSS is the highest peak resident set any process of the run may
	// reach (sampled by the supervisor), e.g. 256MiB, 1GiB or plain
	// bytes; a higher one is fatal. Empty promises nothing (each
	// process's peak is still reported).
	MaxRSS size `yaml:"max-rss,omitempty"`
	// MaxRetrySync is how synchronized the consumers' transient retries
	// may be, as the peak-to-mean figure docs/results.md ("Retries")
	// defines, at least 1; more is fatal (retry-storm). Empty promises
	// nothing (the figure is still reported).
	MaxRetrySync float64 `yaml:"max-retry-sync,omitempty" range:">=0"`
	// MaxBacklogAge is the longest a subscription's oldest unapplied
	// event may wait; longer is fatal (backlog-age). Empty promises
	// nothing (the oldest age is still reported).
	MaxBacklogAge time.Duration `yaml:"max-backlog-age,omitempty" range:">=0"`
}

// decodedField applies the preset as soon as it is read, before the
// fields that override it.
func (g *guaranteeFields) decodedField(key string) {
	if key != "preset" || g.Preset == "" {
		return
	}
	p, _ := checker.Preset(g.Preset) // the enum tag checked the name
	var kept checker.Guarantees
	copyFields(&kept, g)
	p = p.Keep(kept)
	copyFields(g, &p)
}

// copyFields copies the fields of *src to the fields of the same name of
// *dst (a type and its file form).
func copyFields(dst, src any) {
	d, s := reflect.ValueOf(dst).Elem(), reflect.ValueOf(src).Elem()
	for i := range d.NumField() {
		if v := s.FieldByName(d.Type().Field(i).Name); v.IsValid() {
			d.Field(i).Set(v.Convert(d.Field(i).Type()))
		}
	}
}

// expectFields is what a catalogue scenario must produce (the file form
// of verdict.Expectation), for the detection matrix; `run` reports it next
// to the verdict. `invalid` needs an anomaly, and the anomaly must be
// fatal under the guarantees (expecting order-regression needs
// `order: per-key`).
type expectFields struct {
	// Verdict is what the run must conclude.
	Verdict checker.Validity `yaml:"verdict,omitempty" enum:"verdict"`
	// Anomaly is the fatal anomaly an invalid run must show.
	Anomaly checker.Kind `yaml:"anomaly,omitempty" enum:"anomaly"`
}

// The forms of other packages' types keep their fields: these fail to
// compile when one changes.
func _() {
	_ = (*expectFields)((*verdict.Expectation)(nil))
}

// decodeNode reads broker: kafka as broker: {kind: kafka}.
func (b *Broker) decodeNode(d *decoder, n *yaml.Node, path string, _ field) {
	if n.Kind == yaml.MappingNode || isNull(n) {
		d.fields(reflect.ValueOf(b).Elem(), n, path)
		return
	}
	kind := fieldsOf(reflect.TypeFor[Broker]())[0]
	if x, ok := d.scalar(kind.typ, n, path, kind); ok {
		b.Kind = x.String()
	}
}

func (Broker) jsonSchema(section map[string]any) map[string]any {
	return map[string]any{"anyOf": []any{map[string]any{"type": "string", "enum": Brokers()}, section}}
}

// decodeNode reads random: as the default random part, and on and off as
// words: random: off leaves it zero, which is no random part.
func (r *Random) decodeNode(d *decoder, n *yaml.Node, path string, _ field) {
	if reflect.ValueOf(*r).IsZero() {
		*r = *defaultRandom()
	}
	if n.Kind == yaml.MappingNode || isNull(n) {
		d.fields(reflect.ValueOf(r).Elem(), n, path)
		return
	}
	v, _ := d.scalarValue(n, path, "a mapping, or off")
	switch v {
	case "off", "none", "false":
		*r = Random{}
	case "on", "true", "default":
		*r = *defaultRandom()
	default:
		if n.Kind == yaml.ScalarNode && !isNull(n) {
			d.fail(n, path, "want a mapping (families, interval, seed_offset, targets), on or off, got %q", v)
		}
	}
}

func (Random) jsonSchema(section map[string]any) map[string]any {
	return map[string]any{"anyOf": []any{map[string]any{"enum": []any{"on", "off", "none", "default", true, false}}, section}}
}
