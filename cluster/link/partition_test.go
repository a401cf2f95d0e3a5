package link_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/cluster/link"
	"github.com/deliverycheck/deliverycheck/internal/testenv"
)

// peer is a line echo server that reports every line it receives, and
// that can be told not to read at all until released.
type peer struct {
	addr     string
	received chan string

	mu      sync.Mutex
	stalled chan struct{} // nil, or closed when the peer may read
}

func newPeer(t *testing.T) *peer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	p := &peer{addr: ln.Addr().String(), received: make(chan string, 1<<16)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			go p.serve(c)
		}
	}()
	return p
}

func (p *peer) serve(c net.Conn) {
	defer c.Close()
	p.mu.Lock()
	stalled := p.stalled
	p.mu.Unlock()
	if stalled != nil {
		<-stalled
	}
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		select {
		case p.received <- line:
		default: // the test reads only what it needs
		}
		if _, err := c.Write([]byte(line)); err != nil {
			return
		}
	}
}

// stall makes connections the peer accepts from now on wait for the
// returned release before they read a byte.
func (p *peer) stall(t *testing.T) (release func()) {
	ch := make(chan struct{})
	p.mu.Lock()
	p.stalled = ch
	p.mu.Unlock()
	var once sync.Once
	release = func() { once.Do(func() { close(ch) }) }
	t.Cleanup(release) // a failed test must not leave the peer blocking Close
	return release
}

func peerLink(t *testing.T, p *peer) *link.Link {
	t.Helper()
	s := link.NewServer()
	t.Cleanup(func() { s.Close() })
	l, err := s.Add("peer", "127.0.0.1:0", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// line is the i-th line of a test stream: numbered, so a lost, repeated
// or reordered line shows, and long enough to fill buffers quickly.
func line(i int) string {
	return fmt.Sprintf("%08d %s\n", i, strings.Repeat(string(rune('a'+i%26)), 200))
}

// readLines reads n lines from r and checks they are line(from)... in order.
func readLines(r *bufio.Reader, from, n int) error {
	for i := from; i < from+n; i++ {
		got, err := r.ReadString('\n')
		if err != nil {
			return fmt.Errorf("line %d: %w", i, err)
		}
		if want := line(i); got != want {
			return fmt.Errorf("line %d: got %.20q..., want %.20q...", i, got, want)
		}
	}
	return nil
}

// within runs f and fails the test if it takes longer than d: what this
// file guards against is a call that never returns.
func within(t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(d):
		t.Fatalf("%s did not return within %v (hung)", what, d)
	}
}

// quiet checks that nothing arrives on c for a while: a partition's whole
// point is an absence, which only a bounded wait can show.
func quiet(c net.Conn, d time.Duration) error {
	c.SetReadDeadline(time.Now().Add(d))
	defer c.SetReadDeadline(time.Time{})
	var b [1]byte
	if n, err := c.Read(b[:]); n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("read %d bytes, %v; want nothing", n, err)
	}
	return nil
}

// A connection opened before a partition survives it: what is written
// during the partition arrives after the heal, complete and in order, on
// the same connection, which then keeps working. Each direction is
// partitioned on its own and together; the peer's log shows which way
// the data stopped.
func TestPartitionDeliversHeldDataOnTheSameConnection(t *testing.T) {
	const during = 200 // lines written during the partition, ~40 KiB
	for _, tc := range []struct {
		d link.Direction
		// peerGets says the peer receives the lines during the
		// partition (only the way back is cut).
		peerGets bool
	}{
		{link.Upstream, false},
		{link.Downstream, true},
		{link.Both, false},
	} {
		t.Run(tc.d.String(), func(t *testing.T) {
			p := newPeer(t)
			l := peerLink(t, p)
			c := dial(t, l)
			r := bufio.NewReader(c)
			if _, err := c.Write([]byte(line(0))); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if err := readLines(r, 0, 1); err != nil {
				t.Fatalf("before the partition: %v", err)
			}
			<-p.received

			if err := l.Partition(tc.d); err != nil {
				t.Fatal(err)
			}
			// Written from a goroutine: a partition may block the writes.
			wrote := make(chan error, 1)
			go func() {
				for i := 1; i <= during; i++ {
					if _, err := c.Write([]byte(line(i))); err != nil {
						wrote <- err
						return
					}
				}
				wrote <- nil
			}()
			if tc.peerGets {
				for i := 1; i <= during; i++ {
					select {
					case got := <-p.received:
						if got != line(i) {
							t.Fatalf("peer got %.20q..., want line %d", got, i)
						}
					case <-time.After(5 * time.Second):
						t.Fatalf("peer got %d of %d lines written during a downstream partition", i-1, during)
					}
				}
			}
			// A connection opened during the partition is accepted and
			// carries nothing until the heal.
			late := dial(t, l)
			if _, err := late.Write([]byte(line(0))); err != nil {
				t.Fatalf("new connection during the partition: %v", err)
			}
			if err := quiet(c, 300*time.Millisecond); err != nil {
				t.Fatalf("during the partition: %v", err)
			}
			if err := quiet(late, 10*time.Millisecond); err != nil {
				t.Fatalf("new connection during the partition: %v", err)
			}
			if !tc.peerGets && len(p.received) > 0 {
				t.Fatalf("peer received %q through an upstream partition", <-p.received)
			}

			within(t, 5*time.Second, "heal", func() error { return l.RemoveToxic("partition", tc.d) })
			if a := l.Active(); len(a) != 0 {
				t.Fatalf("Active() after the heal = %v", a)
			}
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if err := readLines(r, 1, during); err != nil {
				t.Fatalf("after the heal: %v", err)
			}
			if err := <-wrote; err != nil {
				t.Fatalf("write during the partition: %v", err)
			}
			if _, err := c.Write([]byte(line(during + 1))); err != nil {
				t.Fatalf("write after the heal: %v", err)
			}
			if err := readLines(r, during+1, 1); err != nil {
				t.Fatalf("same connection after the heal: %v", err)
			}
			late.SetReadDeadline(time.Now().Add(5 * time.Second))
			if err := readLines(bufio.NewReader(late), 0, 1); err != nil {
				t.Fatalf("connection opened during the partition, after the heal: %v", err)
			}
		})
	}
}

// Partitioning and healing with watches on the link, traffic held by the
// partition and other faults coming and going over it all return
// promptly, even while the peer reads nothing and every buffer between
// client and peer is full. (A partition that was a toxiproxy toxic hung
// here: a watch's counting toxic blocked on its output, and removing it
// waited for it forever, holding the proxy's locks.) Afterwards every
// byte arrives, in order, on the same connection.
func TestPartitionAndWatchNeverHang(t *testing.T) {
	for _, tc := range []struct {
		name  string
		d     link.Direction
		stall bool // the peer reads nothing until the end
		other bool // a latency fault added and removed during the partition
	}{
		{"upstream", link.Upstream, false, false},
		{"both", link.Both, false, false},
		{"upstream stalled peer", link.Upstream, true, false},
		{"downstream stalled peer", link.Downstream, true, false},
		{"both stalled peer", link.Both, true, false},
		{"both with latency on top", link.Both, false, true},
		{"both stalled peer with latency on top", link.Both, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const step = 5 * time.Second
			p := newPeer(t)
			release := func() {}
			if tc.stall {
				release = p.stall(t)
			}
			l := peerLink(t, p)
			c := dial(t, l)

			var written atomic.Int64
			stop := make(chan struct{})
			wrote := make(chan error, 1)
			go func() { // writes until told to stop, blocking when the buffers are full
				for i := 0; ; i++ {
					select {
					case <-stop:
						wrote <- nil
						return
					default:
					}
					if _, err := c.Write([]byte(line(i))); err != nil {
						wrote <- err
						return
					}
					written.Store(int64(i + 1))
				}
			}()
			got := make(chan error, 1)
			var read atomic.Int64
			go func() { // reads the echo, checking it line by line
				r := bufio.NewReader(c)
				for i := 0; ; i++ {
					if err := readLines(r, i, 1); err != nil {
						got <- err
						return
					}
					read.Store(int64(i + 1))
				}
			}()
			if tc.stall {
				waitBlocked(t, &written)
			} else {
				waitFor(t, "the echo", func() bool { return read.Load() > 10 })
			}

			var w1, w2 *link.Watch
			within(t, step, "watch", func() (err error) { w1, err = l.Watch(tc.d, 0); return err })
			within(t, step, "partition", func() error { return l.Partition(tc.d) })
			within(t, step, "second watch", func() (err error) { w2, err = l.Watch(link.Both, 0); return err })
			if tc.other {
				within(t, step, "latency during the partition", func() error {
					return l.Latency(link.Both, time.Millisecond, 0)
				})
			}
			if !tc.stall {
				waitBlocked(t, &written) // the partition has filled the buffers
			}
			if tc.other {
				within(t, step, "latency removed during the partition", func() error {
					return l.RemoveToxic("latency", link.Both)
				})
			}
			// A stalled peer sends nothing back: no data meets a
			// downstream partition.
			wantHeld := int64(1)
			if tc.stall && tc.d == link.Downstream {
				wantHeld = 0
			} else {
				waitFor(t, "the watch to see the connection held", func() bool { return w1.Traffic().Held > 0 })
			}
			within(t, step, "heal", func() error { return l.RemoveToxic("partition", tc.d) })
			var tr link.Traffic
			within(t, step, "stop watch", func() (err error) { tr, err = w1.Stop(); return err })
			within(t, step, "stop second watch", func() (err error) { _, err = w2.Stop(); return err })
			if tr.Conns != 1 || tr.Held != wantHeld || (tr.HeldBytes == 0) != (wantHeld == 0) {
				t.Errorf("watch: %+v, want 1 connection, %d held with its bytes", tr, wantHeld)
			}
			if tc.stall {
				// Only now may the peer read: everything must arrive.
				release()
			}
			waitFor(t, "the echo after the heal", func() bool { return read.Load() > written.Load()/2+10 })
			close(stop)
			if err := <-wrote; err != nil {
				t.Fatalf("write: %v", err)
			}
			total := written.Load()
			waitFor(t, "the whole echo", func() bool { return read.Load() >= total })
			select {
			case err := <-got:
				t.Fatalf("echo: %v", err)
			default:
			}
			within(t, step, "heal all", l.Heal)
		})
	}
}

// waitFor waits (bounded) until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, context.Background(), 15*time.Second, what, func() error {
		if !cond() {
			return errors.New("not yet")
		}
		return nil
	})
}

// waitBlocked waits until the writer counting into written stops making
// progress: its writes block, so the buffers between it and wherever the
// data stopped (a partition, a peer that does not read) are full.
func waitBlocked(t *testing.T, written *atomic.Int64) {
	t.Helper()
	last, since := written.Load(), time.Now()
	waitFor(t, "the writer to block", func() bool {
		if n := written.Load(); n != last {
			last, since = n, time.Now()
		}
		return last > 0 && time.Since(since) > 200*time.Millisecond
	})
}
