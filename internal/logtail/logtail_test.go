package logtail

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestLines(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want []string
	}{
		{"", 3, nil},
		{"a\nb\nc\n", 2, []string{"b", "c"}},
		{"a\n\n  \nb\n\n", 5, []string{"a", "b"}},
		{"\tat x\n\n\tat y\n", 1, []string{"\tat y"}},
	} {
		if got := Lines([]byte(tc.in), tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("Lines(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.log")
	if got := File(p, 3); got != "" {
		t.Errorf("File of a missing log = %q, want \"\"", got)
	}
	if err := os.WriteFile(p, []byte("one\ntwo\n\nthree\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := File(p, 2), "two\nthree"; got != want {
		t.Errorf("File = %q, want %q", got, want)
	}
}
