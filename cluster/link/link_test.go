package link_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	zlog "github.com/rs/zerolog/log"

	"github.com/deliverycheck/deliverycheck/cluster/link"
)

// echoServer answers each line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

// roundTrip sends one line on c and waits (bounded) for its echo.
func roundTrip(c net.Conn, d time.Duration) (time.Duration, error) {
	start := time.Now()
	c.SetDeadline(start.Add(d))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	buf := make([]byte, 5)
	if _, err := c.Read(buf); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func newLink(t *testing.T) (*link.Server, *link.Link) {
	t.Helper()
	s := link.NewServer()
	t.Cleanup(func() { s.Close() })
	l, err := s.Add("echo", "127.0.0.1:0", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	return s, l
}

func dial(t *testing.T, l *link.Link) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", l.Addr(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestPartitionHangsThenHeals(t *testing.T) {
	_, l := newLink(t)
	c := dial(t, l)
	if _, err := roundTrip(c, 2*time.Second); err != nil {
		t.Fatalf("before partition: %v", err)
	}
	for _, d := range []link.Direction{link.Upstream, link.Downstream, link.Both} {
		if err := l.Partition(d); err != nil {
			t.Fatal(err)
		}
		_, err := roundTrip(c, 300*time.Millisecond)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("partition %v: want a hang (deadline exceeded), got %v", d, err)
		}
		if err := l.Heal(); err != nil {
			t.Fatal(err)
		}
		// The held ping comes back after the heal, on the same connection.
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := io.ReadFull(c, make([]byte, 5)); err != nil {
			t.Fatalf("after healing %v, the held ping: %v", d, err)
		}
		if _, err := roundTrip(c, 2*time.Second); err != nil {
			t.Fatalf("after healing %v: %v", d, err)
		}
	}
}

func TestLatencyShowsInRoundTrip(t *testing.T) {
	_, l := newLink(t)
	c := dial(t, l)
	base, err := roundTrip(c, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Latency(link.Downstream, 100*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	got, err := roundTrip(c, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got < 100*time.Millisecond {
		t.Fatalf("round trip with 100ms latency took %v (without: %v)", got, base)
	}
	if a := l.Active(); len(a) != 1 || a[0] != "latency_downstream" {
		t.Fatalf("Active() = %v", a)
	}
}

func TestRefuseClosesAndRefusesThenHealsOnSamePort(t *testing.T) {
	s, l := newLink(t)
	addr := l.Addr()
	c := dial(t, l)
	if err := l.Refuse(); err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(c, 2*time.Second); err == nil {
		t.Fatal("open connection survived Refuse")
	}
	if c2, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c2.Close()
		t.Fatal("new connection accepted while refused")
	}
	if err := s.HealAll(); err != nil {
		t.Fatal(err)
	}
	if l.Addr() != addr {
		t.Fatalf("address changed across heal: %s → %s", addr, l.Addr())
	}
	if _, err := roundTrip(dial(t, l), 2*time.Second); err != nil {
		t.Fatalf("after heal: %v", err)
	}
}

func TestResetPeerAffectsNewConnections(t *testing.T) {
	_, l := newLink(t)
	if err := l.ResetPeer(link.Upstream, 0); err != nil {
		t.Fatal(err)
	}
	c := dial(t, l)
	if _, err := roundTrip(c, 2*time.Second); err == nil {
		t.Fatal("round trip succeeded through reset_peer")
	}
}

func TestParseDirection(t *testing.T) {
	for _, d := range []link.Direction{link.Upstream, link.Downstream, link.Both} {
		got, err := link.ParseDirection(d.String())
		if err != nil || got != d {
			t.Errorf("ParseDirection(%q) = %v, %v", d.String(), got, err)
		}
	}
	if _, err := link.ParseDirection("sideways"); err == nil {
		t.Error("ParseDirection(sideways) succeeded")
	}
}

func TestSetUpstreamKeepsPort(t *testing.T) {
	s := link.NewServer()
	defer s.Close()
	l, err := s.Add("late", "127.0.0.1:0", "127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr()
	if err := l.SetUpstream(echoServer(t)); err != nil {
		t.Fatal(err)
	}
	if l.Addr() != addr {
		t.Fatalf("listen address moved: %s → %s", addr, l.Addr())
	}
	if _, err := roundTrip(dial(t, l), 2*time.Second); err != nil {
		t.Fatal(err)
	}
}

// RemoveToxic and Accept heal one fault and leave the others in place.
func TestRemoveToxicAndAcceptHealOneFault(t *testing.T) {
	_, l := newLink(t)
	if err := l.Latency(link.Both, 50*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	if err := l.Partition(link.Upstream); err != nil {
		t.Fatal(err)
	}
	if err := l.RemoveToxic("partition", link.Upstream); err != nil {
		t.Fatal(err)
	}
	if err := l.RemoveToxic("partition", link.Upstream); err != nil {
		t.Fatalf("removing an absent toxic: %v", err)
	}
	if a := l.Active(); len(a) != 2 || a[0] != "latency_downstream" || a[1] != "latency_upstream" {
		t.Fatalf("Active() after removing the partition = %v", a)
	}
	if got, err := roundTrip(dial(t, l), 5*time.Second); err != nil || got < 50*time.Millisecond {
		t.Fatalf("round trip = %v, %v; want the latency and no hang", got, err)
	}
	if err := l.Refuse(); err != nil {
		t.Fatal(err)
	}
	if err := l.Accept(); err != nil {
		t.Fatal(err)
	}
	if a := l.Active(); len(a) != 2 {
		t.Fatalf("Active() after Accept = %v, want the latency kept", a)
	}
	if _, err := roundTrip(dial(t, l), 5*time.Second); err != nil {
		t.Fatalf("after Accept: %v", err)
	}
}

// TestToxicsDoNotLogToStderr: the bandwidth toxic logs each interrupted
// write through zerolog's global logger at trace level; a run's stderr
// must not carry thousands of those lines.
func TestToxicsDoNotLogToStderr(t *testing.T) {
	link.NewServer()
	if zlog.Trace().Enabled() || zlog.Error().Enabled() {
		t.Fatal("zerolog's global logger is enabled: toxics would log on stderr")
	}
}

// TestAddPortInUse: a link on a port another process holds fails with an
// error that is EADDRINUSE, which the cluster's addLink trades for
// another port.
func TestAddPortInUse(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	s := link.NewServer()
	defer s.Close()
	_, err = s.Add("taken", held.Addr().String(), "127.0.0.1:1")
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("Add on a port in use: %v, want EADDRINUSE", err)
	}
}
