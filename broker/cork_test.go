package broker

import (
	"bytes"
	"errors"
	"net"
	"strings"
	"testing"
)

// writesConn records each Write it is given; failing makes them fail.
type writesConn struct {
	net.Conn
	writes  [][]byte
	failing error
}

func (w *writesConn) Write(p []byte) (int, error) {
	if w.failing != nil {
		return 0, w.failing
	}
	w.writes = append(w.writes, bytes.Clone(p))
	return len(p), nil
}

// TestCorkConn: uncorked writes pass straight through; corked ones leave
// as one write, in order, at Uncork, or as soon as more than corkLimit is
// held; a failed write at Uncork is reported.
func TestCorkConn(t *testing.T) {
	big := strings.Repeat("x", corkLimit)
	for _, tc := range []struct {
		name   string
		corked []string // written between Cork and Uncork
		want   []string // the writes the socket saw, in order
	}{
		{"nothing held", nil, nil},
		{"one", []string{"a"}, []string{"a"}},
		{"a batch is one write", []string{"a", "bb", "ccc"}, []string{"abbccc"}},
		{"over the limit goes early", []string{"a", big, "b"}, []string{"a" + big, "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &writesConn{}
			c := &corkConn{Conn: w}
			if _, err := c.Write([]byte("before")); err != nil {
				t.Fatal(err)
			}
			c.Cork()
			for _, s := range tc.corked {
				if n, err := c.Write([]byte(s)); err != nil || n != len(s) {
					t.Fatalf("corked Write(%d bytes) = %d, %v", len(s), n, err)
				}
			}
			if err := c.Uncork(); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Write([]byte("after")); err != nil {
				t.Fatal(err)
			}
			want := append(append([]string{"before"}, tc.want...), "after")
			if len(w.writes) != len(want) {
				t.Fatalf("%d writes, want %d", len(w.writes), len(want))
			}
			for i := range want {
				if string(w.writes[i]) != want[i] {
					t.Errorf("write %d is %d bytes %.10q..., want %d bytes %.10q...", i, len(w.writes[i]), w.writes[i], len(want[i]), want[i])
				}
			}
		})
	}
	t.Run("failed write", func(t *testing.T) {
		broken := errors.New("broken pipe")
		w := &writesConn{}
		c := &corkConn{Conn: w}
		c.Cork()
		if _, err := c.Write([]byte("a")); err != nil {
			t.Fatal(err)
		}
		w.failing = broken
		if err := c.Uncork(); !errors.Is(err, broken) {
			t.Fatalf("Uncork = %v, want %v", err, broken)
		}
		if err := c.Uncork(); err != nil {
			t.Fatalf("second Uncork = %v: what failed is not held for another try", err)
		}
	})
}
