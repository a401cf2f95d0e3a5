package scenarios

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/deliverycheck/deliverycheck/nemesis"
)

// FuzzSet: Set never panics; a failed Set leaves the scenario as it was
// and says why in *Errors; a successful one leaves a valid scenario that
// marshals and parses back to itself.
func FuzzSet(f *testing.F) {
	// A plain scenario, ones with most sections, a team's.
	bases := []string{"kafka-kill-broker", "order-confirmation", "kafka-random", "../examples/consumer/scenario.yaml"}
	values := []string{"", "5", "-1", "3s", "off", "on", "kafka", "at-least-once", "a,b", "[inventory]",
		"at 1s: kill relay-0; at 3s: pause consumer-* for 1s", "relay.before-publish=kill(2)",
		"{relay-0: relay.before-publish}", "{command: [./x]}", "x: [", "~"}
	for i, p := range Paths() {
		p = strings.NewReplacer("<worker>", "relay-0", "<subscription>", "inventory", "<name>", "LOG").Replace(p)
		f.Add(uint8(i), p, values[i%len(values)])
	}
	f.Add(uint8(1), "nemesis.failpoints.consumer-email-0", "consumer.after-commit-before-ack")
	f.Add(uint8(3), "system.consumers.inventory", "{command: [./bin/other], failpoints: [after-commit]}")
	f.Fuzz(func(t *testing.T, base uint8, path, value string) {
		s, err := Load(bases[int(base)%len(bases)])
		if err != nil {
			t.Fatal(err)
		}
		before := s.clone()
		if err := s.Set(path, value); err != nil {
			if !reflect.DeepEqual(s, before) {
				t.Fatalf("a failed Set changed the scenario: %v", err)
			}
			checkErrors(t, err)
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("Set(%q, %q) left an invalid scenario: %v", path, value, err)
		}
		if !utf8.ValidString(path + value) {
			return // YAML text is UTF-8: such a value cannot be written to a file
		}
		out, err := s.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse(s.Source, out)
		if err != nil {
			t.Fatalf("re-parse: %v\n%s", err, out)
		}
		s.Guarantees = s.Guarantees.Normalize()
		back.Guarantees = back.Guarantees.Normalize()
		// Steps compare as text: nemesis.ParseStep reads args a fault does
		// not use ("kill relay-0 1s" sets Delay), which Step.String drops.
		s.Nemesis.Timeline = reparse(t, s.Nemesis.Timeline)
		back.Nemesis.Timeline = reparse(t, back.Nemesis.Timeline)
		if !reflect.DeepEqual(content(back), content(s)) {
			t.Fatalf("round trip changed it\n got %+v\nwant %+v\n%s", back, s, out)
		}
	})
}

func reparse(t *testing.T, steps []nemesis.Step) []nemesis.Step {
	t.Helper()
	var out []nemesis.Step
	for _, st := range steps {
		again, err := nemesis.ParseStep(st.String())
		if err != nil {
			t.Fatalf("%q does not parse back: %v", st.String(), err)
		}
		out = append(out, again)
	}
	return out
}

// FuzzParseErrors: whatever Parse rejects, it rejects with *Errors naming
// the file and a line inside it (or none).
func FuzzParseErrors(f *testing.F) {
	entries, _ := builtinFS.ReadDir("builtin")
	for _, e := range entries {
		data, _ := builtinFS.ReadFile("builtin/" + e.Name())
		f.Add(data)
	}
	f.Add([]byte("broker: kafka\nworkload:\n  rat: 5\n  rate: x\nseed: 1\nseed: 2\n"))
	f.Add([]byte("broker: kafka\nnemesis:\n  timeline: [\"at 1s: explode relay-0\", {a: 1}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := Parse("f.yaml", data)
		if err == nil {
			return
		}
		lines := bytes.Count(data, []byte("\n")) + 1
		for _, e := range checkErrors(t, err) {
			if e.File != "f.yaml" || e.Line < 0 || e.Line > lines {
				t.Fatalf("%q: error %+v is not in f.yaml (%d lines)", err, e, lines)
			}
		}
	})
}

// checkErrors returns the *Errors err joins, failing on anything else.
func checkErrors(t *testing.T, err error) []*Error {
	t.Helper()
	var out []*Error
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("%T is not joined *Errors: %v", err, err)
	}
	for _, e := range joined.Unwrap() {
		var se *Error
		if !errors.As(e, &se) || se.Msg == "" {
			t.Fatalf("%T is not an *Error with a message: %v", e, e)
		}
		out = append(out, se)
	}
	return out
}

// content is s without where its values were written: a round trip
// through Marshal moves them to other lines, and they are not the
// scenario.
func content(s Scenario) Scenario {
	s.written = nil
	return s
}
