package scenarios

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
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
	b.WriteString(position{cmp.Or(e.File, "scenario"), e.Line}.String())
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// position is where a value was written: a file and 1-based line, or an
// override ("--set") with line 0.
type position struct {
	file string
	line int
}

// String is file:line, as errors start.
func (p position) String() string {
	if p.line > 0 {
		return p.file + ":" + strconv.Itoa(p.line)
	}
	return p.file
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
	d := newDecoder(filename)
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = root.Content[0]
	}
	if root.Kind != 0 && root.Kind != yaml.DocumentNode && !isNull(root) {
		if root.Kind != yaml.MappingNode {
			return Scenario{}, joinErrors([]*Error{{File: filename, Line: root.Line, Field: "scenario", Msg: "want a mapping, got " + describe(root)}})
		}
		d.fields(reflect.ValueOf(&s).Elem(), root, "")
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
	for p, l := range d.lines {
		if l > 0 && isWritten(p) {
			if s.written == nil {
				s.written = map[string]position{}
			}
			s.written[p] = position{filename, l}
		}
	}
	return s, nil
}

// loc is where path was written, as far as s knows: its line when Parse
// kept it, else the scenario's source.
func (s Scenario) loc(path string) (string, int) {
	if pos, ok := s.written[path]; ok {
		return pos.file, pos.line
	}
	return s.Source, 0
}

// isWritten reports whether Scenario.written keeps the position of path:
// the system section's, which only the database checks.
func isWritten(path string) bool { return strings.HasPrefix(path, "system.") }

// Set overrides one field by its dotted path, as --set k=v does: the same
// paths and checks as the YAML file, e.g. Set("workload.rate", "500"),
// Set("broker", "rabbitmq"), Set("nemesis.timeline", "at 1s: kill relay-0;
// at 3s: pause consumer-* for 1s"), Set("nemesis.failpoints.relay-0",
// "relay.before-publish=kill(2)"). List fields take items separated by
// ',' or ';'. On error s is unchanged.
//
// The value becomes a YAML fragment, {workload: {rate: "500"}}, that the
// file's decoder reads over a copy of s: a scalar as a string, a list
// split into items, a mapping (a whole nemesis.failpoints, one
// system.consumers.<subscription>) as YAML.
func (s *Scenario) Set(path, value string) error {
	keys, target, entry, err := lookupPath(path)
	if err != nil {
		return joinErrors([]*Error{err})
	}
	c := s.clone()
	d := newDecoder("--set")
	if n := d.setValue(target, entry, path, value); n != nil {
		// Wrap the value in the path's keys: {keys[0]: {keys[1]: … n}}.
		for i := len(keys) - 1; i >= 0; i-- {
			n = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{{Kind: yaml.ScalarNode, Tag: "!!str", Value: keys[i]}, n}}
		}
		d.fields(reflect.ValueOf(&c).Elem(), n, "")
	}
	if len(d.errs) > 0 {
		return joinErrors(d.errs)
	}
	if errs := c.validate(func(p string) (string, int) {
		if p == path || strings.HasPrefix(p, path+".") || strings.HasPrefix(path, p+".") {
			return "--set", 0
		}
		return s.loc(p)
	}); len(errs) > 0 {
		return joinErrors(errs)
	}
	// What the override replaced was written by it, not in the file.
	for p := range c.written {
		if p == path || strings.HasPrefix(p, path+".") || strings.HasPrefix(p, path+"[") {
			delete(c.written, p)
		}
	}
	for p := range d.lines {
		if isWritten(p) {
			if c.written == nil {
				c.written = map[string]position{}
			}
			c.written[p] = position{file: "--set"}
		}
	}
	*s = c
	return nil
}

// setValue is the node a --set value stands for at target, the field the
// path names (with entry, one key of that mapping), or nil after reporting
// why there is none.
func (d *decoder) setValue(target field, entry bool, path, value string) *yaml.Node {
	str := func() *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: value} }
	t := target.typ
	if entry {
		switch t.Elem().Kind() {
		case reflect.String:
			return str()
		case reflect.Slice:
			return listNode(value)
		}
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(value), &n); err != nil {
			d.fail(nil, path, "want YAML: %v", err)
			return nil
		}
		if len(n.Content) == 0 {
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}
		}
		return n.Content[0]
	}
	switch {
	case t.Kind() == reflect.Map:
		// The whole mapping replaces the old one.
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(value), &n); err != nil {
			d.fail(nil, path, "want a YAML mapping such as {relay-0: [relay.before-publish]}: %v", err)
			return nil
		}
		d.replace = path
		if len(n.Content) == 0 || isNull(n.Content[0]) { // nothing: empty it
			return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		}
		return n.Content[0]
	case sectionOf(t) != nil && !hasShorthand(t):
		var names []string
		for _, sub := range fieldsOf(sectionOf(t)) {
			names = append(names, path+"."+sub.key)
		}
		d.fail(nil, path, "is a section; set one of its fields: %s", strings.Join(names, ", "))
		return nil
	case formOf(t).Kind() == reflect.Slice:
		return listNode(value)
	}
	return str()
}

// Validate checks the cross-field rules (and the field ranges) after
// fields were changed by hand, e.g. Workload.Duration from --duration.
func (s Scenario) Validate() error {
	if errs := s.validate(s.loc); len(errs) > 0 {
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

// decoder reads YAML nodes into the scenario's types, collecting every
// mistake instead of stopping at the first.
type decoder struct {
	file   string
	errs   []*Error
	lines  map[string]int // field path → line of its value, for cross-field errors
	budget int
	// replace is the path of the mapping a --set replaces whole.
	replace string
}

func newDecoder(file string) *decoder {
	return &decoder{file: file, lines: map[string]int{}, budget: maxNodes}
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

// fields decodes mapping n into the struct v, one key per tagged field,
// and returns how many fields it set (without a mistake; a mapping when
// it has an entry or --set replaced it). Keys are checked in document
// order (unknown, repeated), then decoded in field order, so a preset
// applies before the fields overriding it whatever order the file has
// them in.
func (d *decoder) fields(v reflect.Value, n *yaml.Node, path string) int {
	n = d.resolve(n, path)
	if n == nil || isNull(n) {
		return 0
	}
	if n.Kind != yaml.MappingNode {
		d.fail(n, cmp.Or(path, "scenario"), "want a mapping, got %s", describe(n))
		return 0
	}
	fs := fieldsOf(v.Type())
	valid := make([]string, len(fs))
	for i, f := range fs {
		valid[i] = f.key
	}
	given := map[string]*yaml.Node{}
	for k, val := range d.keys(n, path, valid) {
		given[k] = val
	}
	set := 0
	for _, f := range fs {
		if val, ok := given[f.key]; ok {
			before := len(d.errs)
			fv, p := v.FieldByIndex(f.index), join(path, f.key)
			d.value(fv, val, p, f)
			if len(d.errs) == before && (fv.Kind() != reflect.Map || !fv.IsNil() || p == d.replace) {
				set++
			}
			if h, ok := v.Addr().Interface().(interface{ decodedField(key string) }); ok {
				h.decodedField(f.key)
			}
		}
	}
	return set
}

// keys yields mapping n's keys in document order with their values,
// reporting keys that are not scalars, keys given twice and, unless valid
// is nil (free keys), keys not in valid; it records the line of each
// value.
func (d *decoder) keys(n *yaml.Node, path string, valid []string) func(yield func(string, *yaml.Node) bool) {
	return func(yield func(string, *yaml.Node) bool) {
		seen := map[string]*yaml.Node{}
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
			if valid != nil && !slices.Contains(valid, k.Value) {
				d.fail(k, p, "unknown field%s (valid: %s)", suggest(k.Value, valid), strings.Join(valid, ", "))
				continue
			}
			seen[k.Value] = k
			d.lines[p] = v.Line
			if !yield(k.Value, v) {
				return
			}
		}
	}
}

// value decodes one field's value into v.
func (d *decoder) value(v reflect.Value, n *yaml.Node, path string, f field) {
	n = d.resolve(n, path)
	if n == nil {
		return
	}
	if form := formOf(v.Type()); form != v.Type() {
		v = v.Addr().Convert(reflect.PointerTo(form)).Elem()
	}
	if dec, ok := v.Addr().Interface().(nodeDecoder); ok {
		dec.decodeNode(d, n, path, f)
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		d.fields(v, n, path)
	case reflect.Pointer:
		d.pointer(v, n, path, f)
	case reflect.Map:
		d.mapping(v, n, path, f)
	case reflect.Slice:
		d.list(v, n, path, f)
	default:
		if x, ok := d.scalar(v.Type(), n, path, f); ok {
			v.Set(x)
		}
	}
}

// pointer decodes an optional section (system.relay, nemesis.random). It
// comes to exist when one of its fields is set ("relay: {}" is no relay),
// or, for a section with a shorthand, when it is left non-zero ("random:"
// is the default random part, "random: off" none).
func (d *decoder) pointer(v reflect.Value, n *yaml.Node, path string, f field) {
	p := v
	if v.IsNil() {
		p = reflect.New(v.Type().Elem())
	}
	if hasShorthand(v.Type()) {
		d.value(p.Elem(), n, path, f)
		if p.Elem().IsZero() {
			v.SetZero()
		} else {
			v.Set(p)
		}
		return
	}
	if n.Kind != yaml.MappingNode && !isNull(n) {
		d.fail(n, path, "want a mapping, got %s", describe(n))
		return
	}
	if d.fields(p.Elem(), n, path) > 0 {
		v.Set(p)
	}
}

// mapping decodes a mapping with free keys (nemesis.failpoints.<worker>,
// env.<name>) entry by entry into the map v, over the entries it has. An
// entry whose list value is empty is removed. The mapping --set replaces
// whole (d.replace) is emptied first.
func (d *decoder) mapping(v reflect.Value, n *yaml.Node, path string, f field) {
	if path == d.replace {
		v.SetZero()
	}
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "want a mapping, got %s", describe(n))
		return
	}
	t := v.Type()
	for k, val := range d.keys(n, path, nil) {
		p := join(path, k)
		key := reflect.ValueOf(k).Convert(t.Key())
		elem := reflect.New(t.Elem()).Elem()
		if old := v.MapIndex(key); old.IsValid() {
			elem.Set(old)
		}
		before := len(d.errs)
		d.value(elem, val, p, f)
		wrong := len(d.errs) > before
		if msg := checkKey(f.keyCheck, k); !wrong && msg != "" {
			d.fail(d.resolve(val, p), p, "%s", msg)
			wrong = true
		}
		switch {
		case elem.Kind() == reflect.Pointer: // a section: it exists once a field is set
			if elem.IsNil() {
				continue
			}
		case wrong:
			continue
		case elem.Kind() == reflect.Slice && elem.Len() == 0:
			if !v.IsNil() {
				v.SetMapIndex(key, reflect.Value{})
			}
			continue
		}
		if v.IsNil() {
			v.Set(reflect.MakeMap(t))
		}
		v.SetMapIndex(key, elem)
	}
	if !v.IsNil() && v.Len() == 0 {
		v.SetZero()
	}
}

// list decodes a list of scalars; a single scalar is a list of one. Items
// are checked one by one, and the list is only set when all are right.
func (d *decoder) list(v reflect.Value, n *yaml.Node, path string, f field) {
	var items []*yaml.Node
	switch {
	case n.Kind == yaml.ScalarNode && !isNull(n):
		items = []*yaml.Node{n}
	case n.Kind == yaml.SequenceNode:
		items = n.Content
	default:
		d.fail(n, path, "want a list, got %s", describe(n))
		return
	}
	// Every item must be a string before any is checked.
	texts := make([]string, len(items))
	ok := true
	for i, it := range items {
		if it = d.resolve(it, path); it == nil {
			return
		}
		text, good := d.scalarValue(it, fmt.Sprintf("%s[%d]", path, i), "a string")
		texts[i], ok = text, ok && good
	}
	if !ok {
		return
	}
	out := reflect.MakeSlice(v.Type(), 0, len(items))
	for i, text := range texts {
		p := fmt.Sprintf("%s[%d]", path, i)
		if f.check == "failpoint-term" { // one worker's terms: named by the worker, not the item
			p = path
		} else {
			d.lines[p] = items[i].Line
		}
		if x, good := d.text(v.Type().Elem(), items[i], p, text, f); good {
			out = reflect.Append(out, x)
		} else {
			ok = false
		}
	}
	if !ok {
		return
	}
	if f.check == "program" && (len(texts) == 0 || texts[0] == "") {
		d.fail(n, path, "name the program to run, e.g. [./bin/consumer, --flag]")
		return
	}
	if out.Len() == 0 {
		out = reflect.Zero(v.Type())
	}
	v.Set(out)
}

// scalar decodes a scalar of type t: a number, a string, a name.
func (d *decoder) scalar(t reflect.Type, n *yaml.Node, path string, f field) (reflect.Value, bool) {
	want := "a string"
	switch t.Kind() {
	case reflect.Int, reflect.Int32, reflect.Int64:
		want = "an integer"
	case reflect.Uint64:
		want = "a non-negative integer"
	case reflect.Float64:
		want = "a number"
	case reflect.Bool:
		want = "true or false"
	}
	if f.enum != "" {
		want = f.enum
	}
	if f.want != "" {
		want = f.want
	}
	v, ok := d.scalarValue(n, path, want)
	if !ok {
		return reflect.Value{}, false
	}
	return d.text(t, n, path, v, f)
}

// text reads v, the text of node n, as a value of type t, checked against
// f's tags.
func (d *decoder) text(t reflect.Type, n *yaml.Node, path, v string, f field) (reflect.Value, bool) {
	x := reflect.New(t).Elem()
	switch t.Kind() {
	case reflect.Int, reflect.Int32, reflect.Int64:
		i, err := strconv.ParseInt(strings.ReplaceAll(v, "_", ""), 10, t.Bits())
		if err != nil {
			d.fail(n, path, "want an integer, got %q", v)
			return x, false
		}
		if msg := f.outOfRange(float64(i), strconv.FormatInt(i, 10)); msg != "" {
			d.fail(n, path, "%s", msg)
			return x, false
		}
		x.SetInt(i)
	case reflect.Uint64:
		i, err := strconv.ParseUint(strings.ReplaceAll(v, "_", ""), 10, 64)
		if err != nil {
			d.fail(n, path, "want a non-negative integer, got %q", v)
			return x, false
		}
		x.SetUint(i)
	case reflect.Float64:
		fl, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(fl) || math.IsInf(fl, 0) {
			d.fail(n, path, "want a number, got %q", v)
			return x, false
		}
		if msg := f.outOfRange(fl, v); msg != "" {
			d.fail(n, path, "%s", msg)
			return x, false
		}
		x.SetFloat(fl)
	case reflect.Bool:
		// YAML 1.2's two spellings only: yes, on and 1 read differently
		// in other tools.
		if v != "true" && v != "false" {
			d.fail(n, path, "want true or false, got %q", v)
			return x, false
		}
		x.SetBool(v == "true")
	case reflect.String:
		if f.enum != "" {
			if valid := enumValues(f.enum); !slices.Contains(valid, v) {
				d.fail(n, path, "%s", unknownName(f.enum, v, valid))
				return x, false
			}
		}
		norm, msg := checkText(f.check, v)
		if msg != "" {
			d.fail(n, path, "%s", msg)
			return x, false
		}
		x.SetString(norm)
	default:
		panic(fmt.Sprintf("scenarios: %s: no decoder for %s", path, t))
	}
	return x, true
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

// scalarValue returns n's text, or reports what it got instead.
func (d *decoder) scalarValue(n *yaml.Node, path, want string) (string, bool) {
	if n.Kind != yaml.ScalarNode || isNull(n) {
		d.fail(n, path, "want %s, got %s", want, describe(n))
		return "", false
	}
	return n.Value, true
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

// lookupPath finds the field a dotted path names, and the keys of the
// fragment Set decodes. A key under a mapping with free keys
// (nemesis.failpoints.relay-0) names that mapping's field, and entry is
// true.
func lookupPath(path string) (keys []string, f field, entry bool, err *Error) {
	parts := strings.Split(path, ".")
	t := reflect.TypeFor[Scenario]()
	for i, part := range parts {
		fs := fieldsOf(t)
		j := slices.IndexFunc(fs, func(f field) bool { return f.key == part })
		if j < 0 {
			return nil, field{}, false, &Error{File: "--set", Field: path, Msg: unknownPathMsg(path, fs)}
		}
		f = fs[j]
		isMap := f.typ.Kind() == reflect.Map
		switch {
		case i == len(parts)-1:
			return parts, f, false, nil
		case isMap && i == len(parts)-2:
			return parts, f, true, nil
		}
		if t = sectionOf(f.typ); t == nil || isMap {
			return nil, field{}, false, &Error{File: "--set", Field: path, Msg: unknownPathMsg(path, nil)}
		}
	}
	panic("unreachable") // strings.Split returns at least one part
}

// Paths lists every path Set accepts ("nemesis.failpoints.<worker>" stands
// for any worker).
func Paths() []string {
	var out []string
	var walk func(prefix string, t reflect.Type)
	walk = func(prefix string, t reflect.Type) {
		for _, f := range fieldsOf(t) {
			p := join(prefix, f.key)
			sec := sectionOf(f.typ)
			if sec == nil || hasShorthand(f.typ) {
				out = append(out, p)
			}
			switch {
			case f.typ.Kind() == reflect.Map:
				out = append(out, p+".<"+f.keyName+">")
			case sec != nil:
				walk(p, sec)
			}
		}
	}
	walk("", reflect.TypeFor[Scenario]())
	return out
}

func unknownPathMsg(path string, fields []field) string {
	last := path[strings.LastIndexByte(path, '.')+1:]
	hint := suggestPath(path)
	if hint == "" && fields != nil {
		var keys []string
		for _, f := range fields {
			keys = append(keys, f.key)
		}
		hint = suggest(last, keys)
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
