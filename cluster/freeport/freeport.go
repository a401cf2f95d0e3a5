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
	"sync"
)

// handedOut is every port Take has returned in this process, so it never
// returns one twice: a port handed to a server that binds it seconds
// later (a JVM, an Erlang VM) is free until then, and a second Take in
// between (the next service of the same run, a proxy link) would
// otherwise pick it again with probability n/range per port, which over
// the hundreds of services a test binary starts is a start failure in
// some runs (a RabbitMQ node whose distribution port a Kafka node took
// exits during its boot). It is package state on purpose: the ports are
// the process's, whoever asks for them.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

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
	handedOut.Lock()
	defer handedOut.Unlock()
	if len(handedOut.ports) > (hi-lo)/2 {
		// A long-lived process has used half the range: the servers of
		// those ports are long gone or bound, so start afresh.
		clear(handedOut.ports)
	}
	for try := 0; len(out) < n && hi-lo >= 1000 && try < 100*n; try++ {
		p := lo + rand.IntN(hi-lo)
		if handedOut.ports[p] {
			continue
		}
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
	for _, p := range out {
		handedOut.ports[p] = true
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
