// Package freeport picks TCP ports on 127.0.0.1 for servers and proxies
// that bind them later, or again after a while.
//
// A restarted server or a refused link that accepts again binds the same
// port, so the ports come from below the kernel's ephemeral range, where
// no outgoing connection can take one in between.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// Take returns n distinct TCP ports that were free on 127.0.0.1 a moment
// ago, from below the kernel's ephemeral range. A server binds its ports
// later (Kafka's JVM seconds later, and a restarted server binds the same
// ones again after a crash): in the ephemeral range any outgoing
// connection on the machine may take one as its local port in between,
// and the server fails to start. Below it only another listener can. All
// listeners are held open together so the n ports differ.
func Take(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	out := make([]int, 0, n)
	lo, hi := minPort, ephemeralStart()
	for try := 0; len(out) < n && hi-lo >= 1000 && try < 100*n; try++ {
		p := lo + rand.IntN(hi-lo)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue // taken
		}
		ls = append(ls, l)
		out = append(out, p)
	}
	// A machine whose ephemeral range leaves no room below it (or is
	// that busy) gets ports from the kernel, as before.
	for len(out) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find free port: %w", err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// minPort is the lowest port Take picks: above the ones well-known
// services (and other test servers' defaults) tend to sit on.
const minPort = 10000

// ephemeralStart is the first port of the kernel's ephemeral range, from
// which it picks outgoing connections' local ports (32768 by default).
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	p, err := strconv.Atoi(f[0])
	if err != nil || p <= 0 {
		return 32768
	}
	return p
}
