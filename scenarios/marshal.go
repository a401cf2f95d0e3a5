package scenarios

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// MarshalYAML writes the scenario in the file format [Parse] reads, from
// the same tags: every field explicit, defaults included, but those
// tagged omitempty when empty, so a marshaled scenario says everything a
// run will do. Parse of the result gives the same Scenario.
func (s Scenario) MarshalYAML() (any, error) {
	return encode(reflect.ValueOf(s)), nil
}

// Marshal renders the scenario as a YAML file.
func (s Scenario) Marshal() ([]byte, error) {
	out, err := yaml.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("scenarios: marshal %s: %w", strconv.Quote(s.Name), err)
	}
	return out, nil
}

// encode is v as the file writes it.
func encode(v reflect.Value) *yaml.Node {
	if form := formOf(v.Type()); form != v.Type() {
		v = v.Convert(form)
	}
	if e, ok := v.Interface().(nodeEncoder); ok {
		return encode(reflect.ValueOf(e.encodeNode()))
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
		}
		return encode(v.Elem())
	case reflect.Struct:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		for _, f := range fieldsOf(v.Type()) {
			fv := v.FieldByIndex(f.index)
			if f.omitempty && fv.IsZero() {
				continue
			}
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: f.key}, encode(fv))
		}
		return n
	case reflect.Map:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
		for _, k := range keys {
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k.String()}, encode(v.MapIndex(k)))
		}
		return n
	case reflect.Slice:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for i := range v.Len() {
			n.Content = append(n.Content, encode(v.Index(i)))
		}
		return n
	}
	var n yaml.Node
	if err := n.Encode(v.Interface()); err != nil {
		panic(fmt.Sprintf("scenarios: encode %s: %v", v.Type(), err)) // numbers and strings always encode
	}
	return &n
}
