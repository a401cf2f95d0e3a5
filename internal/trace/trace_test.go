package trace

import (
	"strings"
	"testing"
)

func TestNewAndChild(t *testing.T) {
	root := New()
	id, ok := ID(root)
	if !ok {
		t.Fatalf("New() = %q is not well-formed", root)
	}
	child := Child(root)
	cid, ok := ID(child)
	if !ok || cid != id {
		t.Fatalf("Child(%q) = %q: trace id %q, want %q", root, child, cid, id)
	}
	if child == root {
		t.Fatalf("Child(%q) kept the span id", root)
	}
	if other, _ := ID(New()); other == id {
		t.Fatalf("two New() share trace id %q", id)
	}
}

func TestChildOfMalformedStartsATrace(t *testing.T) {
	for _, p := range []string{"", "garbage", "00-abc-def-01"} {
		if _, ok := ID(Child(p)); !ok {
			t.Errorf("Child(%q) is not well-formed", p)
		}
	}
}

func TestID(t *testing.T) {
	good := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tc := range []struct {
		tp string
		ok bool
	}{
		{good, true},
		{strings.ToUpper(good), false},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", false},
		{"", false},
	} {
		id, ok := ID(tc.tp)
		if ok != tc.ok || ok && id != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("ID(%q) = %q, %v; want ok %v", tc.tp, id, ok, tc.ok)
		}
	}
}

func FuzzID(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Add("")
	f.Fuzz(func(t *testing.T, tp string) {
		id, ok := ID(tp)
		if !ok {
			return
		}
		if len(id) != 32 || !strings.Contains(tp, id) {
			t.Fatalf("ID(%q) = %q", tp, id)
		}
		if cid, ok := ID(Child(tp)); !ok || cid != id {
			t.Fatalf("Child(%q) left the trace: %q", tp, cid)
		}
	})
}
