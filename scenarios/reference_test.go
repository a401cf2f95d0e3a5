package scenarios

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

// The field reference and the table of built-in scenarios in
// docs/scenarios.md, and docs/scenario.schema.json, are generated: the
// field reference and the schema from the Scenario type (its tags, through
// the same field model the decoder walks, its defaults (Default) and its
// doc comments), the table from the catalogue (Builtin). go generate
// ./scenarios runs TestGeneratedReference -update.

var update = flag.Bool("update", false, "rewrite the generated parts of docs/scenarios.md and docs/scenario.schema.json")

const (
	docPath    = "../docs/scenarios.md"
	schemaPath = "../docs/scenario.schema.json"
)

// TestGeneratedReference fails when the generated docs are stale, and
// rewrites them with -update.
func TestGeneratedReference(t *testing.T) {
	g, err := newGenerator(".")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	wantDoc := string(doc)
	for _, part := range []struct{ name, from, edit, text string }{
		{"FIELDS", "the Scenario type", "the doc comments and tags in scenarios/", g.markdown()},
		{"BUILTIN", "the catalogue", "the files in scenarios/builtin/", catalogue()},
	} {
		note := fmt.Sprintf("<!-- generated from %s by go generate ./scenarios: edit %s, not this -->\n", part.from, part.edit)
		if wantDoc, err = replacePart(wantDoc, part.name, note+part.text); err != nil {
			t.Fatalf("%s: %v", docPath, err)
		}
	}
	wantSchema, err := g.schema()
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string][]byte{docPath: []byte(wantDoc), schemaPath: wantSchema} {
		got, _ := os.ReadFile(path)
		switch {
		case bytes.Equal(got, want):
		case *update:
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
		default:
			t.Errorf("%s is stale: run go generate ./scenarios", path)
		}
	}
}

// replacePart replaces what stands between doc's markers of the part
// name (<!-- BEGIN name --> and <!-- END name -->, each a line) with text.
func replacePart(doc, name, text string) (string, error) {
	begin, end := "<!-- BEGIN "+name+" -->\n", "<!-- END "+name+" -->\n"
	before, rest, ok1 := strings.Cut(doc, begin)
	_, after, ok2 := strings.Cut(rest, end)
	if !ok1 || !ok2 {
		return "", fmt.Errorf("no %q … %q markers", begin, end)
	}
	return before + begin + text + end + after, nil
}

// catalogue is the table of built-in scenarios: name, broker, the
// expected verdict and what each shows, as deliverycheck list prints them.
func catalogue() string {
	var b strings.Builder
	b.WriteString("\n| name | broker | expect | description |\n|---|---|---|---|\n")
	for _, s := range Builtin() {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", s.Name, s.Broker.Kind, s.Expect.Label(), cell(s.Description))
	}
	b.WriteString("\n")
	return b.String()
}

// generator renders the format's reference from the field model and the
// package's doc comments.
type generator struct {
	typeDocs  map[string]string // type name → doc comment
	fieldDocs map[string]string // "Type.Field" → doc comment
}

func newGenerator(dir string) (*generator, error) {
	g := &generator{typeDocs: map[string]string{}, fieldDocs: map[string]string{}}
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				doc := ts.Doc
				if doc == nil && len(gd.Specs) == 1 {
					doc = gd.Doc
				}
				g.typeDocs[ts.Name.Name] = doc.Text()
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				for _, fld := range st.Fields.List {
					for _, name := range fld.Names {
						g.fieldDocs[ts.Name.Name+"."+name.Name] = fld.Doc.Text()
					}
				}
			}
		}
	}
	return g, nil
}

// A section is one struct of the format, wherever it appears: its rows
// and the paths that lead to it.
type section struct {
	typ   reflect.Type
	paths []string
	rows  []row
}

type row struct {
	f       field
	path    string
	def     reflect.Value // the default value
	section reflect.Type  // the section it opens, if any
}

// sections lists the format's sections depth first, in field order.
func (g *generator) sections() []*section {
	var out []*section
	byType := map[reflect.Type]*section{}
	var walk func(path string, t reflect.Type, def reflect.Value)
	walk = func(path string, t reflect.Type, def reflect.Value) {
		if s, ok := byType[t]; ok {
			s.paths = append(s.paths, path)
			return
		}
		s := &section{typ: t, paths: []string{path}}
		byType[t] = s
		out = append(out, s)
		var inner []func()
		for _, f := range fieldsOf(t) {
			r := row{f: f, path: join(path, f.key), def: def.FieldByIndex(f.index)}
			sec, val, p := sectionOf(f.typ), r.def, r.path
			if f.typ.Kind() == reflect.Map {
				sec, val, p = sectionOf(f.typ.Elem()), reflect.Zero(f.typ.Elem()), p+".<"+f.keyName+">"
			}
			if sec != nil {
				r.section = sec
				inner = append(inner, func() { walk(p, sec, sectionValue(val)) })
			}
			s.rows = append(s.rows, r)
		}
		for _, w := range inner {
			w()
		}
	}
	walk("", reflect.TypeFor[Scenario](), reflect.ValueOf(Default()))
	return out
}

// sectionValue is v as its section: the form of another package's type,
// and for an absent optional section what "key:" alone gives.
func sectionValue(v reflect.Value) reflect.Value {
	if v.Kind() == reflect.Pointer && v.IsNil() {
		v = reflect.New(v.Type().Elem())
		newDecoder("").value(v.Elem(), &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}, "", field{})
	}
	sec, _ := asSection(v)
	return sec
}

// markdown is the field reference: one table per section.
func (g *generator) markdown() string {
	var b strings.Builder
	for i, s := range g.sections() {
		if i == 0 {
			b.WriteString("\n### Top level\n\n")
		} else {
			var heads []string
			for _, p := range s.paths {
				heads = append(heads, "`"+p+"`")
			}
			fmt.Fprintf(&b, "\n### %s\n\n", strings.Join(heads, ", "))
			if doc := g.typeDoc(s.typ); doc != "" {
				b.WriteString(markdownBlocks(doc) + "\n")
			}
		}
		b.WriteString("| field | default | meaning |\n|---|---|---|\n")
		for _, r := range s.rows {
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", r.f.key, cell(defaultText(r)), cell(g.meaning(s.typ, r.f)))
		}
	}
	b.WriteString("\n")
	return b.String()
}

// typeDoc is a type's doc comment as the reference shows it.
func (g *generator) typeDoc(t reflect.Type) string {
	return readerText(t.Name(), g.typeDocs[t.Name()])
}

// meaning is a field's doc comment as the reference shows it, with what
// its tags say added.
func (g *generator) meaning(t reflect.Type, f field) string {
	doc := readerText(f.goName, g.fieldDocs[t.Name()+"."+f.goName])
	if doc == "" {
		panic(fmt.Sprintf("%s.%s has no doc comment", t.Name(), f.goName))
	}
	text := strings.Join(strings.Fields(doc), " ")
	if f.enum != "" {
		var vs []string
		for _, v := range enumValues(f.enum) {
			vs = append(vs, "`"+v+"`")
		}
		one := "One"
		if f.typ.Kind() == reflect.Slice {
			one = "Each one"
		}
		text += fmt.Sprintf(" %s of %s.", one, strings.Join(vs, ", "))
	}
	if len(f.bounds) > 0 {
		var bs []string
		for _, b := range f.bounds {
			bs = append(bs, b.String())
		}
		text += " Must be " + strings.Join(bs, " and ") + "."
	}
	return text
}

// defaultText is a field's default as YAML, blank when there is none to
// state (an empty string, list or section, a zero the file leaves out).
func defaultText(r row) string {
	if r.section != nil || r.f.typ.Kind() == reflect.Map || r.f.omitempty && r.def.IsZero() {
		return ""
	}
	switch r.def.Kind() {
	case reflect.Int, reflect.Int32, reflect.Int64, reflect.Uint64, reflect.Float64:
	default:
		if r.def.IsZero() {
			return ""
		}
	}
	n := encode(r.def)
	n.Style = yaml.FlowStyle
	out, err := yaml.Marshal(n)
	if err != nil {
		panic(err)
	}
	return "`" + strings.TrimSpace(string(out)) + "`"
}

// goNameRe is a doc comment's Go name and the verb after it: "Rate is",
// "Families are", "Seed makes".
var goNameRe = regexp.MustCompile(`^(\w+) (is |are |\w+s )`)

// readerText turns a doc comment written for Go ("Rate is ops per second
// …", "Seed makes the run …") into the reference's ("Ops per second …",
// "Makes the run …").
func readerText(goName, doc string) string {
	doc = strings.TrimSpace(doc)
	if m := goNameRe.FindStringSubmatch(doc); m != nil && m[1] == goName {
		if m[2] != "is " && m[2] != "are " {
			m[0] = m[1] + " "
		}
		doc = doc[len(m[0]):]
		r := []rune(doc)
		if len(r) > 0 {
			r[0] = unicode.ToUpper(r[0])
		}
		doc = string(r)
	}
	return doc
}

// markdownBlocks renders a doc comment's paragraphs, and its indented
// blocks as YAML.
func markdownBlocks(doc string) string {
	var b strings.Builder
	for _, para := range strings.Split(doc, "\n\n") {
		lines := strings.Split(para, "\n")
		var text, code []string
		flush := func() {
			if len(text) > 0 {
				b.WriteString(strings.Join(text, "\n") + "\n\n")
				text = nil
			}
			if len(code) > 0 {
				b.WriteString("```yaml\n" + strings.Join(code, "\n") + "\n```\n\n")
				code = nil
			}
		}
		for _, l := range lines {
			if c, ok := strings.CutPrefix(l, "\t"); ok {
				if len(text) > 0 {
					flush()
				}
				code = append(code, c)
				continue
			}
			if len(code) > 0 {
				flush()
			}
			text = append(text, l)
		}
		flush()
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// schema is the JSON Schema (2020-12) of scenario files.
func (g *generator) schema() ([]byte, error) {
	root := g.sectionSchema(g.sections()[0].typ, reflect.ValueOf(Default()))
	root["type"] = "object"
	s := map[string]any{
		"$schema":     "https://json-schema.org/draft/2020-12/schema",
		"$id":         "https://github.com/deliverycheck/deliverycheck/docs/scenario.schema.json",
		"title":       "deliverycheck scenario",
		"description": "A deliverycheck scenario file (docs/scenarios.md). Generated from the Scenario type (scenarios/scenario.go) by go generate ./scenarios; the decoder is the judge, this schema helps editors check and complete files.",
	}
	for k, v := range root {
		s[k] = v
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// sectionSchema is the object schema of section t, def its defaults.
func (g *generator) sectionSchema(t reflect.Type, def reflect.Value) map[string]any {
	props := map[string]any{}
	for _, f := range fieldsOf(t) {
		p := g.fieldSchema(f, def.FieldByIndex(f.index))
		p["description"] = g.meaning(t, f)
		props[f.key] = p
	}
	return map[string]any{"type": []string{"object", "null"}, "additionalProperties": false, "properties": props}
}

// fieldSchema is the schema of one field's value.
func (g *generator) fieldSchema(f field, def reflect.Value) map[string]any {
	t := f.typ
	if t.Kind() == reflect.Map {
		s := map[string]any{"type": "object", "additionalProperties": g.valueSchema(f, t.Elem(), reflect.Zero(t.Elem()))}
		if f.keyCheck == "env" {
			s["propertyNames"] = map[string]any{"pattern": `^[^= \t\n]+$`}
		}
		return s
	}
	s := g.valueSchema(f, t, def)
	if !def.IsZero() && sectionOf(t) == nil {
		var v any
		if err := encode(def).Decode(&v); err != nil {
			panic(err)
		}
		s["default"] = v
	}
	return s
}

// valueSchema is the schema of a value of type t in field f.
func (g *generator) valueSchema(f field, t reflect.Type, def reflect.Value) map[string]any {
	form := formOf(t)
	if sec := sectionOf(t); sec != nil {
		obj := g.sectionSchema(sec, sectionValue(def))
		if sf, ok := reflect.Zero(derefType(form)).Interface().(schemaForm); ok {
			return sf.jsonSchema(obj)
		}
		return obj
	}
	if sf, ok := reflect.Zero(form).Interface().(schemaForm); ok {
		return sf.jsonSchema(nil)
	}
	if t.Kind() == reflect.Slice {
		item := g.valueSchema(f, t.Elem(), reflect.Value{})
		arr := map[string]any{"type": "array", "items": item}
		if f.check == "program" {
			arr["minItems"] = 1
		}
		return map[string]any{"anyOf": []any{item, arr}}
	}
	s := map[string]any{}
	switch t.Kind() {
	case reflect.String:
		s["type"] = "string"
		if f.enum != "" {
			s["enum"] = enumValues(f.enum)
		}
		switch f.check {
		case "name":
			s["pattern"], s["maxLength"] = nameRe.String(), 63
		case "image":
			s["pattern"] = `^\S+$`
		case "one-line":
			s["pattern"] = `^\s*[^\r\n]*\s*$`
		case "event-type":
			s["pattern"] = eventTypeRe.String()
		}
	case reflect.Int, reflect.Int32, reflect.Int64:
		s["type"] = "integer"
		if t.Bits() == 32 {
			s["maximum"] = 1<<31 - 1
		}
	case reflect.Uint64:
		s["type"], s["minimum"] = "integer", 0
	case reflect.Float64:
		s["type"] = "number"
	case reflect.Bool:
		s["type"] = "boolean"
	default:
		panic(fmt.Sprintf("no schema for %s", t))
	}
	for _, b := range f.bounds {
		s[map[string]string{"≥": "minimum", ">": "exclusiveMinimum", "<": "exclusiveMaximum"}[b.op]] = b.limit
	}
	return s
}

func derefType(t reflect.Type) reflect.Type {
	if t.Kind() == reflect.Pointer {
		return t.Elem()
	}
	return t
}

// Every scenario file in the repository validates against the schema: the
// catalogue, the examples, and the full example of docs/scenarios.md.
func TestScenarioFilesMatchSchema(t *testing.T) {
	sch := compileScenarioSchema(t)
	files := map[string][]byte{}
	entries, _ := builtinFS.ReadDir("builtin")
	for _, e := range entries {
		data, _ := builtinFS.ReadFile("builtin/" + e.Name())
		files["builtin/"+e.Name()] = data
	}
	examples, _ := filepath.Glob(filepath.Join("..", "examples", "*", "*.yaml"))
	if len(examples) == 0 {
		t.Fatal("no example scenarios found under ../examples")
	}
	for _, p := range examples {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files[p] = data
	}
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(doc), "## A full example\n\n```yaml\n")
	example, _, _ := strings.Cut(rest, "```")
	files[docPath] = []byte(example)
	for name, data := range files {
		if _, err := Parse(name, data); err != nil {
			t.Errorf("%s does not parse: %v", name, err)
		}
		if err := sch.Validate(yamlInstance(t, data)); err != nil {
			t.Errorf("%s does not match %s:\n%v", name, schemaPath, err)
		}
	}
}

// The schema rejects what the decoder rejects by shape: unknown keys,
// wrong types, unknown names.
func TestSchemaRejects(t *testing.T) {
	sch := compileScenarioSchema(t)
	for _, src := range []string{
		"broker: kafka\nworkload: {rat: 5}\n",
		"broker: kafak\n",
		"broker: kafka\nvariants: {consumer: inbx}\n",
		"broker: kafka\nworkload: {producers: two}\n",
		"broker: kafka\nworkload: {poison_ratio: 1}\n",
		"broker: kafka\nworkload: {duration: 10}\n",
		"broker: {kind: kafka, partitions: 0}\n",
		"name: My_Scenario\nbroker: kafka\n",
		"broker: kafka\nnemesis: {random: {families: [disk]}}\n",
		"broker: kafka\nnemesis: {timeline: [{a: 1, b: 2}]}\n",
		"broker: kafka\nsystem: {relay: {command: []}}\n",
	} {
		if err := sch.Validate(yamlInstance(t, []byte(src))); err == nil {
			t.Errorf("the schema accepts\n%s", src)
		}
		if _, err := Parse("x.yaml", []byte(src)); err == nil {
			t.Errorf("Parse accepts\n%s", src)
		}
	}
}

func compileScenarioSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	sch, err := jsonschema.NewCompiler().Compile(schemaPath)
	if err != nil {
		t.Fatalf("%s: %v", schemaPath, err)
	}
	return sch
}

// yamlInstance is a YAML document as the JSON value a schema validates.
func yamlInstance(t *testing.T, data []byte) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	return inst
}

// The guarantees' file form has a field for each of checker.Guarantees'.
func TestGuaranteeFieldsCoverChecker(t *testing.T) {
	form := reflect.TypeFor[guaranteeFields]()
	g := reflect.TypeFor[guarantees]()
	for i := range g.NumField() {
		if _, ok := form.FieldByName(g.Field(i).Name); !ok {
			t.Errorf("guaranteeFields has no %s: checker.Guarantees gained a field", g.Field(i).Name)
		}
	}
	var names []string
	for _, f := range fieldsOf(form) {
		names = append(names, f.key)
	}
	if !slices.Contains(names, "preset") {
		t.Errorf("guaranteeFields keys %v", names)
	}
}
