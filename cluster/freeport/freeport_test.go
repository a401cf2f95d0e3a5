package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestTake: distinct ports, below the ephemeral range (where no
// outgoing connection can take one before its server binds it), and
// free once returned.
func TestTake(t *testing.T) {
	ports, err := Take(5)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d twice in %v", p, ports)
		}
		seen[p] = true
		if p < minPort || p >= ephemeralStart() {
			t.Errorf("port %d outside [%d, %d)", p, minPort, ephemeralStart())
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d not free after Take: %v", p, err)
		}
		l.Close()
	}
}

// TestTakeNeverTwice: ports handed out earlier in the process are not
// handed out again, although they are free (their servers have not bound
// them yet).
func TestTakeNeverTwice(t *testing.T) {
	seen := map[int]bool{}
	for range 200 {
		ports, err := Take(3)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ports {
			if seen[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			seen[p] = true
		}
	}
}
