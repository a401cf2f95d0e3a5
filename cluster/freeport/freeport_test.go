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
