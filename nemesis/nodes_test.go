package nemesis_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/cluster/netns"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/internal/testenv"
	"github.com/deliverycheck/deliverycheck/nemesis"
)

// The sender half of TestNodeFaults: run inside a node's namespace, it
// sends NEMESIS_TEST_UDP_COUNT datagrams to NEMESIS_TEST_UDP_TO.
func init() {
	to := os.Getenv("NEMESIS_TEST_UDP_TO")
	if to == "" {
		return
	}
	n, _ := strconv.Atoi(os.Getenv("NEMESIS_TEST_UDP_COUNT"))
	c, err := net.Dial("udp", to)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	for range n {
		_, _ = c.Write([]byte("x"))
	}
	os.Exit(0)
}

// The dialer half of TestCutReplication: run inside a node's namespace,
// it dials NEMESIS_TEST_TCP_TO once, for 300ms (one SYN), and says
// whether it connected.
func init() {
	to := os.Getenv("NEMESIS_TEST_TCP_TO")
	if to == "" {
		return
	}
	c, err := net.DialTimeout("tcp", to, 300*time.Millisecond)
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		fmt.Print("timeout")
	case err != nil:
		fmt.Print("refused") // no listener: a RST came back
	default:
		c.Close()
		fmt.Print("connected")
	}
	os.Exit(0)
}

// dialFrom dials node to's port from inside node from's namespace: what
// came of it (timeout, refused, connected).
func dialFrom(t *testing.T, nw *netns.Network, from, to string, port int) string {
	t.Helper()
	argv, err := nw.Command(from, os.Args[0], "-test.run=^$")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "NEMESIS_TEST_TCP_TO="+net.JoinHostPort(nw.Addr(to).String(), strconv.Itoa(port)))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("dial %s → %s:%d: %v\n%s", from, to, port, err, out)
	}
	return string(out)
}

// cut-replication cuts the leader's replication port from its peers,
// both ways, and nothing else: another port still answers (the
// controller's), the peers still reach each other on the cut port, and
// the evidence counts the dropped SYNs.
func TestCutReplication(t *testing.T) {
	testenv.MustHaveServer(t, "network namespaces", netns.Check())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nw, err := netns.New(ctx, netns.Options{Nodes: []string{"kafka-0", "kafka-1", "kafka-2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer nw.Close()
	buf := &syncBuffer{}
	env := &nemesis.Env{Network: nw, Broker: "kafka", ReplicationPort: 9093, Recorder: history.NewWriterRecorder(buf, "nemesis", time.Now()),
		Leader: func(context.Context, string) (string, error) { return "kafka-2", nil }}
	st, err := nemesis.ParseStep("at 0s: cut-replication broker:leader for 1s")
	if err != nil {
		t.Fatal(err)
	}
	heal, err := st.Fault.Inject(ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		from, to string
		port     int
		want     string
	}{
		{"kafka-0", "kafka-2", 9093, "timeout"}, // to the leader's listener
		{"kafka-2", "kafka-1", 9093, "timeout"}, // from the leader to a peer's
		{"kafka-0", "kafka-2", 9094, "refused"}, // another port: answered (no listener, a RST)
		{"kafka-0", "kafka-1", 9093, "refused"}, // between the peers: answered
	} {
		if got := dialFrom(t, nw, tc.from, tc.to, tc.port); got != tc.want {
			t.Errorf("%s → %s:%d during the cut: %s, want %s", tc.from, tc.to, tc.port, got, tc.want)
		}
	}
	if err := heal(ctx); err != nil {
		t.Fatal(err)
	}
	ops := buf.history(t)
	last := ops[len(ops)-1]
	if want := "kafka-2's replication (tcp/9093) cut from kafka-0, kafka-1: 2 packets dropped"; last.Type != history.OK || !strings.HasPrefix(last.Value.Evidence, want) {
		t.Errorf("completion %s %q (error %q), want ok with evidence %q", last.Type, last.Value.Evidence, last.Value.Error, want)
	}
	if got := dialFrom(t, nw, "kafka-0", "kafka-2", 9093); got != "refused" {
		t.Errorf("kafka-0 → kafka-2:9093 healed: %s, want refused (answered)", got)
	}
	// Without a port to cut (no cluster, no override) it does not start.
	env.ReplicationPort = 0
	if _, err := st.Fault.Inject(ctx, env); err == nil || !strings.Contains(err.Error(), "replication port") {
		t.Errorf("cut-replication without a replication port: %v", err)
	}
}

// send sends n datagrams from node from to node to, from inside from's
// namespace, and returns once they are sent.
func send(t *testing.T, nw *netns.Network, from, to string, n int) {
	t.Helper()
	argv, err := nw.Command(from, os.Args[0], "-test.run=^$")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "NEMESIS_TEST_UDP_TO="+net.JoinHostPort(nw.Addr(to).String(), "9"), "NEMESIS_TEST_UDP_COUNT="+strconv.Itoa(n))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("send %s → %s: %v\n%s", from, to, err, out)
	}
}

// Faults between the nodes of a replicated service, on real namespaces:
// each cuts exactly the pairs its shape says (counted by the rules'
// packet counters, which are its evidence), and one that dropped nothing
// never bit.
func TestNodeFaults(t *testing.T) {
	testenv.MustHaveServer(t, "network namespaces", netns.Check())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nw, err := netns.New(ctx, netns.Options{Nodes: []string{"kafka-0", "kafka-1", "kafka-2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer nw.Close()

	type flow struct {
		from, to string
		n        int
	}
	for _, tc := range []struct {
		step     string
		flows    []flow
		evidence string // the ok completion's, "" for a fail
		err      string // the fail completion's
	}{
		{"at 0s: isolate kafka-1 for 1s", []flow{{"kafka-0", "kafka-1", 3}, {"kafka-1", "kafka-2", 4}, {"kafka-0", "kafka-2", 5}},
			"kafka-1 isolated from kafka-0, kafka-2: 7 packets dropped", ""},
		{"at 0s: isolate broker:leader for 1s", []flow{{"kafka-1", "kafka-2", 2}},
			"kafka-2 isolated from kafka-0, kafka-1: 2 packets dropped", ""},
		{"at 0s: isolate kafka-1 for 1s", nil, "", "kafka-1 isolated from kafka-0, kafka-2, but no packet was dropped during the window"},
		// Halves of three: the first node alone.
		{"at 0s: split kafka for 1s", []flow{{"kafka-1", "kafka-0", 2}, {"kafka-1", "kafka-2", 5}},
			"kafka-0 | kafka-1,kafka-2: 2 packets dropped", ""},
		// The bridge, kafka-1, still talks to both sides.
		{"at 0s: split broker bridge for 1s", []flow{{"kafka-0", "kafka-2", 3}, {"kafka-1", "kafka-0", 4}, {"kafka-2", "kafka-1", 4}},
			"kafka-0 | kafka-2, bridged by kafka-1: 3 packets dropped", ""},
		// The ring: each node hears itself and the next, so exactly
		// these three one-way pairs are cut. (Only a dropped flow is
		// sent: a delivered datagram to a closed port answers with an
		// ICMP error the ring may drop too, rate-limited, so uncounted.)
		{"at 0s: split kafka ring for 1s", []flow{{"kafka-0", "kafka-1", 3}},
			"majorities ring over kafka-0,kafka-1,kafka-2: 3 packets dropped (kafka-2→kafka-0 0, kafka-0→kafka-1 3, kafka-1→kafka-2 0)", ""},
	} {
		t.Run(tc.step, func(t *testing.T) {
			buf := &syncBuffer{}
			env := &nemesis.Env{Network: nw, Broker: "kafka", Recorder: history.NewWriterRecorder(buf, "nemesis", time.Now()),
				Leader: func(context.Context, string) (string, error) { return "kafka-2", nil }}
			st, err := nemesis.ParseStep(tc.step)
			if err != nil {
				t.Fatal(err)
			}
			heal, err := st.Fault.Inject(ctx, env)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range tc.flows {
				send(t, nw, f.from, f.to, f.n)
			}
			if err := heal(ctx); err != nil {
				t.Fatal(err)
			}
			ops := buf.history(t)
			last := ops[len(ops)-1]
			if tc.evidence != "" {
				if last.Type != history.OK || !strings.HasPrefix(last.Value.Evidence, tc.evidence) {
					t.Errorf("completion %s %q (error %q), want ok with evidence %q", last.Type, last.Value.Evidence, last.Value.Error, tc.evidence)
				}
			} else if last.Type != history.Fail || last.Value.Error != tc.err {
				t.Errorf("completion %s error %q, want fail %q", last.Type, last.Value.Error, tc.err)
			}
			if err := nw.HealAll(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
