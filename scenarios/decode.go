package scenarios

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/failpoint"
	"github.com/deliverycheck/deliverycheck/nemesis"
	"github.com/deliverycheck/deliverycheck/pipeline/consumer"
	"github.com/deliverycheck/deliverycheck/pipeline/producer"
	"github.com/deliverycheck/deliverycheck/pipeline/relay"
)

// Error is one mistake in a scenario, with where it is. Parse, Set and
// Validate return every mistake they find, each an *Error, joined with
// errors.Join (one per line).
type Error struct {
	// File is the file name, "--set" for an override, or the scenario's
	// Source.
	File string
	// Line is 1-based; 0 when the mistake has no single line (a missing
	// field, an override).
	Line int
	// Field is the dotted path, as in YAML and --set (workload.rate); ""
	// for a YAML syntax error.
	Field string
	Msg   string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(cmp.Or(e.File, "scenario"))
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Parse reads a scenario from YAML. filename is only used in errors and
// for the default name. Every mistake is reported, each naming file, line
// and field; the Scenario is only meaningful when the error is nil.
func Parse(filename string, data []byte) (Scenario, error) {
	s := Default()
	s.Source = filename
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return Scenario{}, yamlError(filename, err)
	}
	d := &decoder{file: filename, lines: map[string]int{}, budget: maxNodes}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = root.Content[0]
	}
	if root.Kind != 0 && root.Kind != yaml.DocumentNode && !isNull(root) {
		if root.Kind != yaml.MappingNode {
			return Scenario{}, joinErrors([]*Error{{File: filename, Line: root.Line, Field: "scenario", Msg: "want a mapping, got " + describe(root)}})
		}
		d.mapping(&s, root, "", topFields(), nil)
	}
	if s.Name == "" {
		s.Name = nameFromFile(filename)
	}
	errs := d.errs
	// Cross-field rules run even when some fields were wrong, so one pass
	// shows every mistake; a rule about a field already reported wrong
	// (left at its default) would only repeat it, and is dropped.
	for _, e := range s.validate(func(path string) (string, int) { return filename, d.line(path) }) {
		if !slices.ContainsFunc(d.errs, func(f *Error) bool { return related(f.Field, e.Field) }) {
			errs = append(errs, e)
		}
	}
	slices.SortStableFunc(errs, func(a, b *Error) int { return cmp.Compare(a.Line, b.Line) })
	if len(errs) > 0 {
		return Scenario{}, joinErrors(errs)
	}
	return s, nil
}

// Set overrides one field by its dotted path, as --set k=v does: the same
// paths and checks as the YAML file, e.g. Set("workload.rate", "500"),
// Set("broker", "rabbitmq"), Set("nemesis.timeline", "at 1s: kill relay-0;
// at 3s: pause consumer-* for 1s"), Set("nemesis.failpoints.relay-0",
// "relay.before-publish=kill(2)"). List fields take items separated by
// ',' or ';'. On error s is unchanged.
func (s *Scenario) Set(path, value string) error {
	fields, parent, key, f := lookupPath(path)
	if f == nil && parent == nil {
		return joinErrors([]*Error{{File: "--set", Field: path, Msg: unknownPathMsg(path, fields)}})
	}
	c := s.clone()
	d := &decoder{file: "--set", lines: map[string]int{}, budget: maxNodes}
	switch {
	case f == nil: // an entry of a free-key mapping (nemesis.failpoints.<worker>)
		n, err := parent.entryNode(value)
		if err != nil {
			d.fail(nil, path, "want YAML: %v", err)
			break
		}
		parent.entry(d, &c, key, n, path)
	case f.scalar == nil && f.entry == nil:
		var names []string
		for _, sub := range f.fields() {
			names = append(names, path+"."+sub.key)
		}
		d.fail(nil, path, "is a section; set one of its fields: %s", strings.Join(names, ", "))
	case f.list:
		f.scalar(d, &c, listNode(value), path)
	case f.entry != nil:
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(value), &n); err != nil {
			d.fail(nil, path, "want a YAML mapping such as {relay-0: [relay.before-publish]}: %v", err)
		} else {
			// The whole mapping replaces the old one.
			if f.reset != nil {
				f.reset(&c)
			}
			if len(n.Content) > 0 {
				d.mapping(&c, n.Content[0], path, nil, f.entry)
			}
		}
	default:
		f.scalar(d, &c, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: value}, path)
	}
	if len(d.errs) > 0 {
		return joinErrors(d.errs)
	}
	if errs := c.validate(func(p string) (string, int) {
		if p == path || strings.HasPrefix(p, path+".") || strings.HasPrefix(path, p+".") {
			return "--set", 0
		}
		return s.Source, 0
	}); len(errs) > 0 {
		return joinErrors(errs)
	}
	*s = c
	return nil
}

// Validate checks the cross-field rules (and the field ranges) after
// fields were changed by hand, e.g. Workload.Duration from --duration.
func (s Scenario) Validate() error {
	if errs := s.validate(func(string) (string, int) { return s.Source, 0 }); len(errs) > 0 {
		return joinErrors(errs)
	}
	return nil
}

// related reports whether two field paths are the same field or one
// contains the other (workload, workload.rate, nemesis.timeline[2]).
func related(a, b string) bool {
	trim := func(p string) string {
		if i := strings.IndexByte(p, '['); i >= 0 {
			return p[:i]
		}
		return p
	}
	a, b = trim(a), trim(b)
	return a == b || strings.HasPrefix(a, b+".") || strings.HasPrefix(b, a+".")
}

// maxNodes bounds the nodes a decode visits, so an alias bomb ends in an
// error instead of exhausting memory.
const maxNodes = 100000

type decoder struct {
	file   string
	errs   []*Error
	lines  map[string]int // field path → line of its value, for cross-field errors
	budget int
}

func (d *decoder) fail(n *yaml.Node, path, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Field: path, Msg: fmt.Sprintf(format, args...)})
}

// line is the line of path's value, or of the nearest enclosing section
// that has one.
func (d *decoder) line(path string) int {
	for p := path; p != ""; {
		if l, ok := d.lines[p]; ok {
			return l
		}
		i := max(strings.LastIndexByte(p, '.'), strings.LastIndexByte(p, '['))
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return 0
}

// field is one key of a mapping. A field has sub-fields (a section), a
// scalar handler (a value, or a section's one-line shorthand such as
// "broker: kafka"), or an entry handler (a mapping with free keys).
type field struct {
	key    string
	fields func() []field
	scalar func(d *decoder, s *Scenario, n *yaml.Node, path string)
	// entry handles one key of a free-key mapping.
	entry func(d *decoder, s *Scenario, key string, n *yaml.Node, path string)
	// enter runs before a section's mapping is decoded (e.g. to create
	// the Random part).
	enter func(s *Scenario)
	// list marks a list value: --set splits it on ',' and ';'.
	list bool
	// For a free-key mapping: what a key stands for in Paths ("worker"),
	// how --set reads one entry's value (entryScalar: as is; entryYAML: as
	// YAML; else a list), and reset empties the mapping before --set
	// replaces it whole.
	keyName    string
	entryValue entryKind
	reset      func(s *Scenario)
}

type entryKind int

const (
	entryList entryKind = iota
	entryScalar
	entryYAML
)

// entryNode is a --set value for one entry of f.
func (f *field) entryNode(value string) (*yaml.Node, error) {
	switch f.entryValue {
	case entryScalar:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: value}, nil
	case entryYAML:
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(value), &n); err != nil {
			return nil, err
		}
		if len(n.Content) == 0 {
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}, nil
		}
		return n.Content[0], nil
	}
	return listNode(value), nil
}

// mapping decodes n into s, with fs as the valid keys (or entry for free
// keys). Keys are checked in document order (unknown, repeated), then
// decoded in fs order, so a preset applies before the fields overriding
// it whatever order the file has them in.
func (d *decoder) mapping(s *Scenario, n *yaml.Node, path string, fs []field, entry func(*decoder, *Scenario, string, *yaml.Node, string)) {
	n = d.resolve(n, path)
	if n == nil || isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.fail(n, cmp.Or(path, "scenario"), "want a mapping, got %s", describe(n))
		return
	}
	seen := map[string]*yaml.Node{}
	var order []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := d.resolve(n.Content[i], path), n.Content[i+1]
		if k == nil {
			continue
		}
		if k.Kind != yaml.ScalarNode {
			d.fail(k, path, "want a key, got %s", describe(k))
			continue
		}
		p := join(path, k.Value)
		if first, ok := seen[k.Value]; ok {
			d.fail(k, p, "given twice (first on line %d)", first.Line)
			continue
		}
		if entry == nil && !slices.ContainsFunc(fs, func(f field) bool { return f.key == k.Value }) {
			d.fail(k, p, "unknown field%s (valid: %s)", suggest(k.Value, keys(fs)), strings.Join(keys(fs), ", "))
			continue
		}
		seen[k.Value] = k
		order = append(order, k.Value)
		d.lines[p] = v.Line
	}
	if entry != nil {
		for _, k := range order {
			entry(d, s, k, valueOf(n, k), join(path, k))
		}
		return
	}
	for _, f := range fs {
		if _, ok := seen[f.key]; ok {
			d.value(s, valueOf(n, f.key), join(path, f.key), f)
		}
	}
}

// value decodes one field's value.
func (d *decoder) value(s *Scenario, v *yaml.Node, path string, f field) {
	v = d.resolve(v, path)
	if v == nil {
		return
	}
	switch {
	case isNull(v) && f.fields != nil: // "workload:" or "random:" with nothing under it
		if f.enter != nil {
			f.enter(s)
		}
	case v.Kind == yaml.MappingNode && f.fields != nil:
		if f.enter != nil {
			f.enter(s)
		}
		d.mapping(s, v, path, f.fields(), nil)
	case v.Kind == yaml.MappingNode && f.entry != nil:
		d.mapping(s, v, path, nil, f.entry)
	case f.scalar != nil:
		f.scalar(d, s, v, path)
	default:
		d.fail(v, path, "want a mapping, got %s", describe(v))
	}
}

// resolve follows aliases and spends the node budget.
func (d *decoder) resolve(n *yaml.Node, path string) *yaml.Node {
	for hops := 0; n != nil && n.Kind == yaml.AliasNode; hops++ {
		if hops > 100 {
			d.fail(n, path, "alias chain too long")
			return nil
		}
		n = n.Alias
	}
	if n == nil {
		return nil
	}
	d.budget -= 1 + len(n.Content)
	if d.budget < 0 {
		if d.budget+1+len(n.Content) >= 0 { // report once
			d.fail(n, path, "scenario too large (more than %d YAML nodes, aliases expanded)", maxNodes)
		}
		return nil
	}
	return n
}

func valueOf(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		for k.Kind == yaml.AliasNode && k.Alias != nil {
			k = k.Alias
		}
		if k.Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "nothing"
		}
		return strconv.Quote(n.Value)
	}
	return "something else"
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func keys(fs []field) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.key
	}
	return out
}

// scalarValue returns n's text, or reports what it got instead.
func (d *decoder) scalarValue(n *yaml.Node, path, want string) (string, bool) {
	if n.Kind != yaml.ScalarNode || isNull(n) {
		d.fail(n, path, "want %s, got %s", want, describe(n))
		return "", false
	}
	return n.Value, true
}

// stringList reads a list of strings; a single string is a list of one.
func (d *decoder) stringList(n *yaml.Node, path string) ([]string, bool) {
	if n.Kind == yaml.ScalarNode && !isNull(n) {
		return []string{n.Value}, true
	}
	if n.Kind != yaml.SequenceNode {
		d.fail(n, path, "want a list, got %s", describe(n))
		return nil, false
	}
	var out []string
	ok := true
	for i, it := range n.Content {
		it = d.resolve(it, path)
		if it == nil {
			return nil, false
		}
		p := fmt.Sprintf("%s[%d]", path, i)
		if v, good := d.scalarValue(it, p, "a string"); good {
			out = append(out, v)
		} else {
			ok = false
		}
	}
	return out, ok
}

// listNode turns a --set value into a list: items separated by ',' or ';',
// optionally in brackets.
func listNode(v string) *yaml.Node {
	v = strings.TrimSpace(v)
	v = strings.TrimSuffix(strings.TrimPrefix(v, "["), "]")
	n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for it := range strings.FieldsFuncSeq(v, func(r rune) bool { return r == ',' || r == ';' }) {
		if it = strings.TrimSpace(it); it != "" {
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: it})
		}
	}
	return n
}

// Typed field constructors: each checks its value the same way for YAML
// and --set.

func stringField(key string, get func(*Scenario) *string, check func(string) string) field {
	return field{key: key, scalar: func(d *decoder, s *Scenario, n *yaml.Node, path string) {
		v, ok := d.scalarValue(n, path, "a string")
		if !ok {
			return
		}
		if msg := check(v); msg != "" {
			d.fail(n, path, "%s", msg)
			return
		}
		*get(s) = v
	}}
}

func intField[T int | int32 | int64](key string, get func(*Scenario) *T, lo T) field {
	return field{key: key, scalar: func(d *decoder, s *Scenario, n *yaml.Node, path string) {
		v, ok := d.scalarValue(n, path, "an integer")
		if !ok {
			return
		}
		var zero T
		i, err := strconv.ParseInt(strings.ReplaceAll(v, "_", ""), 10, bitSize(zero))
		if err != nil {
			d.fail(n, path, "want an integer, got %q", v)
			return
		}
		if T(i) < lo {
			d.fail(n, path, "must be ≥ %d, got %d", lo, i)
			return
		}
		*get(s) = T(i)
	}}
}

func bitSize(v any) int {
	switch v.(type) {
	case int32:
		return 32
	}
	return 64
}

func uintField(key string, get func(*Scenario) *uint64) field {
	return field{key: key, scalar: func(d *decoder, s *Scenario, n *yaml.Node, path string) {
		v, ok := d.scalarValue(n, path, "a non-negative integer")
		if !ok {
			return
		}
		i, err := strconv.ParseUint(strings.ReplaceAll(v, "_", ""), 10, 64)
		if err != nil {
			d.fail(n, path, "want a non-negative integer, got %q", v)
			return
		}
		*get(s) = i
	}}
}

// floatField reads a number in [lo, hi) (hi 0: no upper bound).
func floatField(key string, get func(*Scenario) *float64, lo, hi float64) field {
	return field{key: key, scalar: func(d *decoder, s *Scenario, n *yaml.Node, path string) {
		v, ok := d.scalarValue(n, path, "a number")
		if !ok {
			return
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			d.fail(n, path, "want a number, got %q", v)
			return
		}
		switch {
		case f < lo:
			d.fail(n, path, "must be ≥ %g, got %s", lo, v)
		case hi > 0 && f >= hi:
			d.fail(n, path, "must be < %g, got %s", hi, v)
		default:
			*get(s) = f
		}
	}}
}

// durationField reads a Go duration (10s, 1m30s, 500ms); positive
// requires > 0, otherwise ≥ 0.
func durationField(key string, get func(*Scenario) *time.Duration, positive bool) field {
	return field{key: key, scalar: func(d *decoder, s *Scenario, n *yaml.Node, path string) {
		v, ok := d.scalarValue(n, path, "a duration such as 10s")
		if !ok {
			return
		}
		t, err := time.ParseDuration(v)
		if err != nil {
			d.fail(n, path, "want a duration such as 10s or 1m30s, got %q", v)
			return
		}
		switch {
		case positive && t <= 0:
			d.fail(n, path, "must be > 0, got %s", v)
		case t < 0:
			d.fail(n, path, "must be ≥ 0, got %s", v)
		default:
			*get(s) = t
		}
	}}
}

func namesField(key string, get func(*Scenario) *[]string, check func(string) string) field {
	return field{key: key, list: true, scalar: func(d *decoder, s *Scenario, n *yaml.Node, path string) {
		vs, ok := d.stringList(n, path)
		if !ok {
			return
		}
		for i, v := range vs {
			if msg := check(v); msg != "" {
				d.fail(itemNode(n, i), fmt.Sprintf("%s[%d]", path, i), "%s", msg)
				ok = false
			}
		}
		if ok {
			*get(s) = vs
		}
	}}
}

func itemNode(n *yaml.Node, i int) *yaml.Node {
	if n.Kind == yaml.SequenceNode && i < len(n.Content) {
		return n.Content[i]
	}
	return n
}

// enumField reads one of valid, listing them when wrong.
func enumField[T ~string](key, what string, get func(*Scenario) *T, valid []T) field {
	return field{key: key, scalar: func(d *decoder, s *Scenario, n *yaml.Node, path string) {
		v, ok := d.scalarValue(n, path, what)
		if !ok {
			return
		}
		if !slices.Contains(valid, T(v)) {
			d.fail(n, path, "%s", unknownName(what, v, strs(valid)))
			return
		}
		*get(s) = T(v)
	}}
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

// Services lists the servers a fault can target besides workers; "broker"
// is the run's broker whichever it is.
func services(brokerKind string) []string {
	if brokerKind == "" {
		return []string{"postgres", "broker"}
	}
	return []string{"postgres", "broker", brokerKind}
}

// topFields is the scenario file's schema. Each call builds it afresh
// (no package state); its order is the decode order.
func topFields() []field {
	return []field{
		stringField("name", func(s *Scenario) *string { return &s.Name }, checkName),
		stringField("description", func(s *Scenario) *string { return &s.Description }, func(v string) string {
			if strings.ContainsAny(strings.TrimSpace(v), "\r\n") {
				return "must be one line"
			}
			return ""
		}),
		{key: "broker", fields: brokerFields, scalar: func(d *decoder, s *Scenario, n *yaml.Node, path string) {
			// "broker: kafka" is short for "broker: {kind: kafka}".
			brokerFields()[0].scalar(d, s, n, path)
		}},
		{key: "variants", fields: func() []field {
			return []field{
				enumField("producer", "producer variant", func(s *Scenario) *producer.Variant { return &s.Variants.Producer }, producer.Variants()),
				enumField("relay", "relay variant", func(s *Scenario) *relay.Variant { return &s.Variants.Relay }, relay.Variants()),
				enumField("consumer", "consumer variant", func(s *Scenario) *consumer.Variant { return &s.Variants.Consumer }, consumer.Variants()),
			}
		}},
		{key: "workload", fields: workloadFields},
		{key: "system", fields: systemFields},
		{key: "nemesis", fields: nemesisFields},
		{key: "guarantees", fields: guaranteeFields, scalar: func(d *decoder, s *Scenario, n *yaml.Node, path string) {
			// "guarantees: at-least-once" or the check command's form,
			// "effectively-once,order=per-key".
			v, ok := d.scalarValue(n, path, "a preset or a mapping")
			if !ok {
				return
			}
			g, err := checker.ParseGuarantees(v)
			if err != nil {
				d.fail(n, path, "%s", strings.TrimPrefix(err.Error(), "checker: "))
				return
			}
			s.Guarantees = g
		}},
		{key: "drain", fields: func() []field {
			return []field{
				durationField("timeout", func(s *Scenario) *time.Duration { return &s.Drain.Timeout }, true),
				durationField("quiet", func(s *Scenario) *time.Duration { return &s.Drain.Quiet }, true),
			}
		}},
		{key: "expect", fields: func() []field {
			return []field{
				enumField("verdict", "verdict", func(s *Scenario) *checker.Validity { return &s.Expect.Verdict }, []checker.Validity{checker.Valid, checker.Invalid}),
				enumField("anomaly", "anomaly", func(s *Scenario) *checker.Kind { return &s.Expect.Anomaly }, checker.AnomalyKinds()),
			}
		}},
		{key: "images", fields: func() []field {
			return []field{
				stringField("postgres", func(s *Scenario) *string { return &s.Images.Postgres }, checkImage),
				stringField("kafka", func(s *Scenario) *string { return &s.Images.Kafka }, checkImage),
				stringField("rabbitmq", func(s *Scenario) *string { return &s.Images.RabbitMQ }, checkImage),
			}
		}},
		uintField("seed", func(s *Scenario) *uint64 { return &s.Seed }),
	}
}

// checkImage accepts an image reference as an engine would: no spaces,
// nothing empty.
func checkImage(v string) string {
	if v == "" || strings.ContainsAny(v, " \t\r\n") {
		return fmt.Sprintf("want an image reference such as postgres:17, got %q", v)
	}
	return ""
}

// systemFields is the system: section, a team's own components.
func systemFields() []field {
	anyText := func(string) string { return "" }
	return []field{
		stringField("setup", func(s *Scenario) *string { return &s.System.Setup }, anyText),
		{key: "transaction", list: true, scalar: func(d *decoder, s *Scenario, n *yaml.Node, path string) {
			vs, ok := d.stringList(n, path)
			if !ok {
				return
			}
			for i, v := range vs {
				if _, err := producer.Bind(v); err != nil {
					d.fail(itemNode(n, i), fmt.Sprintf("%s[%d]", path, i), "%s", err)
					ok = false
				}
			}
			if ok {
				s.System.Transaction = vs
			}
		}},
		{key: "relay", fields: func() []field {
			return commandFields(func(s *Scenario) *Command {
				if s.System.Relay == nil {
					s.System.Relay = &Command{}
				}
				return s.System.Relay
			})
		}},
		{key: "consumer", fields: func() []field {
			return commandFields(func(s *Scenario) *Command {
				if s.System.Consumer == nil {
					s.System.Consumer = &Command{}
				}
				return s.System.Consumer
			})
		}},
		{key: "consumers", keyName: "subscription", entryValue: entryYAML, reset: func(s *Scenario) { s.System.Consumers = nil }, entry: func(d *decoder, s *Scenario, sub string, n *yaml.Node, path string) {
			d.value(s, n, path, field{key: sub, fields: func() []field {
				return commandFields(func(s *Scenario) *Command {
					if s.System.Consumers == nil {
						s.System.Consumers = map[string]*Command{}
					}
					if s.System.Consumers[sub] == nil {
						s.System.Consumers[sub] = &Command{}
					}
					return s.System.Consumers[sub]
				})
			}})
		}},
		stringField("effects_query", func(s *Scenario) *string { return &s.System.EffectsQuery }, anyText),
		stringField("dead_letters_query", func(s *Scenario) *string { return &s.System.DeadLettersQuery }, anyText),
		stringField("inbox_query", func(s *Scenario) *string { return &s.System.InboxQuery }, anyText),
		stringField("pending_query", func(s *Scenario) *string { return &s.System.PendingQuery }, anyText),
	}
}

// commandFields are an external component's keys: command, env, dir.
func commandFields(get func(*Scenario) *Command) []field {
	return []field{
		{key: "command", list: true, scalar: func(d *decoder, s *Scenario, n *yaml.Node, path string) {
			vs, ok := d.stringList(n, path)
			if !ok {
				return
			}
			if len(vs) == 0 || vs[0] == "" {
				d.fail(n, path, "name the program to run, e.g. [./bin/consumer, --flag]")
				return
			}
			get(s).Command = vs
		}},
		{key: "env", keyName: "name", entryValue: entryScalar, reset: func(s *Scenario) { get(s).Env = nil }, entry: func(d *decoder, s *Scenario, key string, n *yaml.Node, path string) {
			n = d.resolve(n, path)
			if n == nil {
				return
			}
			v, ok := d.scalarValue(n, path, "a string")
			if !ok {
				return
			}
			if key == "" || strings.ContainsAny(key, "= \t\n") {
				d.fail(n, path, "%q is not an environment variable name", key)
				return
			}
			c := get(s)
			if c.Env == nil {
				c.Env = map[string]string{}
			}
			c.Env[key] = v
		}},
		stringField("dir", func(s *Scenario) *string { return &get(s).Dir }, func(string) string { return "" }),
		{key: "failpoints", list: true, scalar: func(d *decoder, s *Scenario, n *yaml.Node, path string) {
			vs, ok := d.stringList(n, path)
			if !ok {
				return
			}
			for i, v := range vs {
				if _, err := failpoint.ParseAny(v); err != nil || strings.Contains(v, "=") {
					d.fail(itemNode(n, i), fmt.Sprintf("%s[%d]", path, i), "want a failpoint name such as after-commit-before-ack, got %q", v)
					ok = false
				}
			}
			if ok {
				get(s).Failpoints = vs
			}
		}},
	}
}

func brokerFields() []field {
	return []field{
		enumField("kind", "broker", func(s *Scenario) *string { return &s.Broker.Kind }, Brokers()),
		intField("partitions", func(s *Scenario) *int32 { return &s.Broker.Partitions }, 1),
		intField("max_attempts", func(s *Scenario) *int64 { return &s.Broker.MaxAttempts }, 1),
		namesField("unbound", func(s *Scenario) *[]string { return &s.Broker.Unbound }, checkName),
		intField("prefetch", func(s *Scenario) *int { return &s.Broker.Prefetch }, 1),
	}
}

func workloadFields() []field {
	return []field{
		durationField("duration", func(s *Scenario) *time.Duration { return &s.Workload.Duration }, true),
		intField("producers", func(s *Scenario) *int { return &s.Workload.Producers }, 1),
		intField("producer_processes", func(s *Scenario) *int { return &s.Workload.ProducerProcesses }, 0),
		floatField("rate", func(s *Scenario) *float64 { return &s.Workload.Rate }, 0, 0),
		intField("keys", func(s *Scenario) *int { return &s.Workload.Keys }, 1),
		floatField("poison_ratio", func(s *Scenario) *float64 { return &s.Workload.PoisonRatio }, 0, 1),
		floatField("abort_ratio", func(s *Scenario) *float64 { return &s.Workload.AbortRatio }, 0, 1),
		namesField("subscriptions", func(s *Scenario) *[]string { return &s.Workload.Subscriptions }, checkName),
		intField("consumers", func(s *Scenario) *int { return &s.Workload.Consumers }, 1),
		intField("consumer_workers", func(s *Scenario) *int { return &s.Workload.ConsumerWorkers }, 0),
		durationField("consumer_work", func(s *Scenario) *time.Duration { return &s.Workload.ConsumerWork }, false),
		intField("relays", func(s *Scenario) *int { return &s.Workload.Relays }, 0),
		intField("relay_batch", func(s *Scenario) *int { return &s.Workload.RelayBatch }, 0),
	}
}

func nemesisFields() []field {
	return []field{
		{key: "timeline", list: true, scalar: decodeTimeline},
		{key: "random", fields: randomFields, enter: func(s *Scenario) {
			if s.Nemesis.Random == nil {
				s.Nemesis.Random = defaultRandom()
			}
		}, scalar: func(d *decoder, s *Scenario, n *yaml.Node, path string) {
			v, _ := d.scalarValue(n, path, "a mapping, or off")
			switch v {
			case "off", "none", "false":
				s.Nemesis.Random = nil
			case "on", "true", "default":
				s.Nemesis.Random = defaultRandom()
			default:
				if n.Kind == yaml.ScalarNode && !isNull(n) {
					d.fail(n, path, "want a mapping (families, interval, seed_offset, targets), on or off, got %q", v)
				}
			}
		}},
		{key: "failpoints", entry: decodeFailpoints, reset: func(s *Scenario) { s.Nemesis.Failpoints = nil }},
		durationField("restart_delay", func(s *Scenario) *time.Duration { return &s.Nemesis.RestartDelay }, false),
	}
}

func randomFields() []field {
	families := strs(sortedKeys(nemesis.Families()))
	return []field{
		namesField("families", func(s *Scenario) *[]string { return &s.randomPart().Families }, func(v string) string {
			if !slices.Contains(families, v) {
				return unknownName("fault family", v, families)
			}
			return ""
		}),
		durationField("interval", func(s *Scenario) *time.Duration { return &s.randomPart().Interval }, true),
		uintField("seed_offset", func(s *Scenario) *uint64 { return &s.randomPart().SeedOffset }),
		namesField("targets", func(s *Scenario) *[]string { return &s.randomPart().Targets }, func(string) string { return "" }),
	}
}

// randomPart is the Random part, created with its defaults when a field of
// it is set (--set nemesis.random.interval=3s).
func (s *Scenario) randomPart() *Random {
	if s.Nemesis.Random == nil {
		s.Nemesis.Random = defaultRandom()
	}
	return s.Nemesis.Random
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func guaranteeFields() []field {
	presets := checker.PresetNames()
	return []field{
		{key: "preset", scalar: func(d *decoder, s *Scenario, n *yaml.Node, path string) {
			v, ok := d.scalarValue(n, path, "a preset name")
			if !ok {
				return
			}
			p, found := checker.Preset(v)
			if !found {
				d.fail(n, path, "%s", unknownName("guarantee preset", v, presets))
				return
			}
			subs := s.Guarantees.Subscriptions
			s.Guarantees = p
			s.Guarantees.Subscriptions = subs
		}},
		enumField("loss", "allowance", func(s *Scenario) *checker.Allowance { return &s.Guarantees.Loss }, []checker.Allowance{checker.None, checker.Allowed}),
		enumField("duplicate-effects", "allowance", func(s *Scenario) *checker.Allowance { return &s.Guarantees.DuplicateEffects }, []checker.Allowance{checker.None, checker.Allowed}),
		enumField("order", "order", func(s *Scenario) *checker.Order { return &s.Guarantees.Order }, []checker.Order{checker.PerKey, checker.Unordered}),
		enumField("gaps", "allowance", func(s *Scenario) *checker.Allowance { return &s.Guarantees.Gaps }, []checker.Allowance{checker.None, checker.Allowed}),
		namesField("subscriptions", func(s *Scenario) *[]string { return &s.Guarantees.Subscriptions }, checkName),
	}
}

// decodeTimeline reads steps as nemesis.ParseStep does. An unquoted step
// ("- at 1s: kill relay-0") is a one-key mapping to YAML; it is read back
// as the line it was meant to be.
func decodeTimeline(d *decoder, s *Scenario, n *yaml.Node, path string) {
	var items []*yaml.Node
	switch {
	case n.Kind == yaml.SequenceNode:
		items = n.Content
	case n.Kind == yaml.ScalarNode && !isNull(n):
		items = []*yaml.Node{n}
	case isNull(n):
	default:
		d.fail(n, path, "want a list of steps such as \"at 2s: kill relay-0\", got %s", describe(n))
		return
	}
	var steps []nemesis.Step
	ok := true
	for i, it := range items {
		p := fmt.Sprintf("%s[%d]", path, i)
		it = d.resolve(it, p)
		if it == nil {
			return
		}
		d.lines[p] = it.Line
		var text string
		switch {
		case it.Kind == yaml.ScalarNode && !isNull(it):
			text = it.Value
		case it.Kind == yaml.MappingNode && len(it.Content) == 2 && it.Content[0].Kind == yaml.ScalarNode && it.Content[1].Kind == yaml.ScalarNode:
			text = it.Content[0].Value + ": " + it.Content[1].Value
		default:
			d.fail(it, p, "want a step such as \"at 2s: kill relay-0\", got %s", describe(it))
			ok = false
			continue
		}
		st, err := nemesis.ParseStep(text)
		if err != nil {
			d.fail(it, p, "%s", strings.ReplaceAll(err.Error(), "nemesis: ", ""))
			ok = false
			continue
		}
		if st.At < 0 || st.For < 0 {
			d.fail(it, p, "times must be ≥ 0 in %q", text)
			ok = false
			continue
		}
		if st.Fault.Kind == nemesis.Failpoint {
			// Any name parses here; validate checks it against the
			// worker, built-in or a team's.
			t, err := failpoint.ParseAny(st.Fault.Term)
			if err != nil {
				d.fail(it, p, "%s", strings.TrimPrefix(err.Error(), "failpoint: "))
				ok = false
				continue
			}
			st.Fault.Term = t.String()
		}
		steps = append(steps, st)
	}
	if ok {
		s.Nemesis.Timeline = steps
	}
}

// decodeFailpoints reads one worker's failpoint terms (a term or a list).
func decodeFailpoints(d *decoder, s *Scenario, worker string, n *yaml.Node, path string) {
	n = d.resolve(n, path)
	if n == nil {
		return
	}
	terms, ok := d.stringList(n, path)
	if !ok {
		return
	}
	out := make([]string, 0, len(terms))
	for i, t := range terms {
		term, err := failpoint.ParseAny(t) // validate checks the name against the worker
		if err != nil {
			d.fail(itemNode(n, i), path, "%s", strings.TrimPrefix(err.Error(), "failpoint: "))
			ok = false
			continue
		}
		out = append(out, term.String())
	}
	if !ok {
		return
	}
	if s.Nemesis.Failpoints == nil {
		s.Nemesis.Failpoints = map[string][]string{}
	}
	if len(out) == 0 {
		delete(s.Nemesis.Failpoints, worker)
	} else {
		s.Nemesis.Failpoints[worker] = out
	}
	if len(s.Nemesis.Failpoints) == 0 {
		s.Nemesis.Failpoints = nil
	}
}

// lookupPath finds the field a dotted path names. For a key under a
// free-key mapping it returns that mapping's field as parent and the key.
// fields is the list the last element was looked up in, for suggestions.
func lookupPath(path string) (fields []field, parent *field, key string, f *field) {
	fields = topFields()
	parts := strings.Split(path, ".")
	for i, part := range parts {
		j := slices.IndexFunc(fields, func(f field) bool { return f.key == part })
		if j < 0 {
			return fields, nil, "", nil
		}
		cur := fields[j]
		if i == len(parts)-1 {
			return fields, nil, "", &cur
		}
		if cur.entry != nil && i == len(parts)-2 {
			return fields, &cur, parts[i+1], nil
		}
		if cur.fields == nil {
			return nil, nil, "", nil
		}
		fields = cur.fields()
	}
	return fields, nil, "", nil
}

// Paths lists every path Set accepts ("nemesis.failpoints.<worker>" stands
// for any worker).
func Paths() []string {
	var out []string
	var walk func(prefix string, fs []field)
	walk = func(prefix string, fs []field) {
		for _, f := range fs {
			p := join(prefix, f.key)
			if f.scalar != nil || f.entry != nil {
				out = append(out, p)
			}
			if f.entry != nil {
				out = append(out, p+".<"+cmp.Or(f.keyName, "worker")+">")
			}
			if f.fields != nil {
				walk(p, f.fields())
			}
		}
	}
	walk("", topFields())
	return out
}

func unknownPathMsg(path string, fields []field) string {
	last := path[strings.LastIndexByte(path, '.')+1:]
	hint := suggestPath(path)
	if hint == "" && fields != nil {
		hint = suggest(last, keys(fields))
	}
	return fmt.Sprintf("unknown field%s (valid: %s)", hint, strings.Join(Paths(), ", "))
}

func suggestPath(path string) string {
	best, bestD := "", math.MaxInt
	for _, p := range Paths() {
		if dd := distance(path, p); dd < bestD {
			best, bestD = p, dd
		}
	}
	if bestD <= max(2, len(path)/4) {
		return fmt.Sprintf("; did you mean %s?", best)
	}
	return ""
}

// suggest returns "; did you mean X?" for the closest valid name, if
// close enough to be a typo.
func suggest(got string, valid []string) string {
	best, bestD := "", math.MaxInt
	for _, v := range valid {
		if dd := distance(got, v); dd < bestD {
			best, bestD = v, dd
		}
	}
	if best != "" && bestD <= max(2, len(got)/4) {
		return fmt.Sprintf("; did you mean %s?", best)
	}
	return ""
}

// distance is the Levenshtein distance.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			c := 1
			if ra[i-1] == rb[j-1] {
				c = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+c)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

var yamlLineRe = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlError turns yaml's own error into file:line: message.
func yamlError(file string, err error) error {
	msg := err.Error()
	if m := yamlLineRe.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return joinErrors([]*Error{{File: file, Line: line, Msg: m[2]}})
	}
	return joinErrors([]*Error{{File: file, Msg: strings.TrimPrefix(msg, "yaml: ")}})
}

func joinErrors(errs []*Error) error {
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = e
	}
	return errors.Join(out...)
}
