package netns

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/internal/testenv"
)

// short is the connect deadline a partitioned dial must run into.
const short = 300 * time.Millisecond

func TestCheck(t *testing.T) {
	all := uint64(1<<capNetAdmin | 1<<capSysAdmin)
	found := func(string) (string, error) { return "/usr/sbin/x", nil }
	noIptables := func(name string) (string, error) {
		if strings.HasPrefix(name, "iptables") {
			return "", exec.ErrNotFound
		}
		return "/usr/sbin/" + name, nil
	}
	for _, tc := range []struct {
		name   string
		caps   uint64
		look   func(string) (string, error)
		want   string // "" : no error
		absent string
	}{
		{"everything", all, found, "", ""},
		{"not root", 0, found, "missing CAP_NET_ADMIN, CAP_SYS_ADMIN (run as root)", "command"},
		{"no CAP_SYS_ADMIN", 1 << capNetAdmin, found, "missing CAP_SYS_ADMIN (run as root)", "NET_ADMIN"},
		{"no iptables", all, noIptables, "missing the iptables command, the iptables-restore command", "CAP_"},
		{"nothing", 0, noIptables, "CAP_NET_ADMIN, CAP_SYS_ADMIN (run as root), the iptables command", "the ip command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := check(tc.caps, tc.look)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var u *UnsupportedError
			if !errors.As(err, &u) || !errors.Is(err, errors.ErrUnsupported) {
				t.Fatalf("got %v, want an *UnsupportedError", err)
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), tc.absent) {
				t.Errorf("got %q, want it to say %q and not %q", err, tc.want, tc.absent)
			}
		})
	}
}

// TestCheckRefusesForReal runs Check in a process without the
// capabilities, and in one without the commands on its PATH.
func TestCheckRefusesForReal(t *testing.T) {
	testenv.MustHaveServer(t, "network namespaces", Check())
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	setpriv, err := exec.LookPath("setpriv")
	testenv.MustHaveServer(t, "setpriv", err)
	for _, tc := range []struct {
		name string
		argv []string
		env  string
		want string
	}{
		{"capabilities dropped", []string{setpriv, "--bounding-set=-net_admin,-sys_admin", self, "check"}, "", "missing CAP_NET_ADMIN, CAP_SYS_ADMIN (run as root)\n"},
		{"no commands", []string{self, "check"}, "PATH=/nonexistent", "missing the ip command, the iptables command, the iptables-restore command\n"},
		{"as is", []string{self, "check"}, "", "ok\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(tc.argv[0], tc.argv[1:]...)
			cmd.Env = append(os.Environ(), helperEnv+"=1", raceQuick)
			if tc.env != "" {
				cmd.Env = append(cmd.Env, tc.env)
			}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if !strings.HasSuffix(string(out), tc.want) {
				t.Errorf("got %q, want it to end %q", out, tc.want)
			}
		})
	}
}

func TestBadOptions(t *testing.T) {
	testenv.MustHaveServer(t, "network namespaces", Check())
	eth := hostSubnet(t)
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"no nodes", Options{}, "no nodes"},
		{"bad name", Options{Nodes: []string{"a", "b_c"}}, `node name "b_c"`},
		{"dash first", Options{Nodes: []string{"-a"}}, `node name "-a"`},
		{"twice", Options{Nodes: []string{"a", "a"}}, `node "a" named twice`},
		{"subnet too small", Options{Nodes: []string{"a", "b"}, Subnet: netip.MustParsePrefix("10.170.0.0/30")}, "room for the host and 2 nodes"},
		{"subnet of the host", Options{Nodes: []string{"a"}, Subnet: eth}, "in use on this host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := New(context.Background(), tc.o)
			if err == nil {
				n.Close()
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %q, want it to say %q", err, tc.want)
			}
		})
	}
}

// hostSubnet is the prefix of one of the host's IPv4 addresses that is not
// loopback.
func hostSubnet(t *testing.T) netip.Prefix {
	ps, err := hostPrefixes(context.Background(), "ip")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.Addr().Is4() && !p.Addr().IsLoopback() && p.Bits() < 32 {
			return p
		}
	}
	t.Skip("the host has no IPv4 subnet")
	return netip.Prefix{}
}

// TestSubnetClaimed: a subnet a live network holds is refused to another,
// and free again once it is closed.
func TestSubnetClaimed(t *testing.T) {
	n := newNetwork(t, "a")
	if m, err := New(context.Background(), Options{Nodes: []string{"a"}, Subnet: n.Subnet()}); err == nil {
		m.Close()
		t.Fatal("a subnet in use was given to a second network")
	} else if !strings.Contains(err.Error(), "claimed by another run") {
		t.Errorf("got %v", err)
	}
	sub := n.Subnet()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	m, err := New(context.Background(), Options{Nodes: []string{"a"}, Subnet: sub})
	if err != nil {
		t.Fatalf("subnet not released by Close: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestConnectivity(t *testing.T) {
	n := newNetwork(t, "kafka-0", "kafka-1", "kafka-2")
	// The same port in two namespaces at once.
	start(t, n, "kafka-1", "ready", "listen", "9092", "one")
	start(t, n, "kafka-2", "ready", "listen", "9092", "two")
	for _, tc := range []struct {
		from, to string // from "" : the host
		want     string
	}{
		{"kafka-0", "kafka-1:9092", "ok one"},
		{"kafka-0", "kafka-2:9092", "ok two"},
		{"kafka-1", "kafka-2:9092", "ok two"},
		{"kafka-2", "localhost:9092", "ok two"},
		{"", hostPort(n.Addr("kafka-1"), 9092), "ok one"},
		{"", hostPort(n.Addr("kafka-2"), 9092), "ok two"},
	} {
		from := tc.from
		if from == "" {
			from = "host"
		}
		t.Run(from+"→"+tc.to, func(t *testing.T) {
			var got string
			if tc.from == "" {
				got = hostDial(tc.to, 5*time.Second)
			} else {
				got = dial(t, n, tc.from, tc.to, 5*time.Second)
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("nothing else", func(t *testing.T) {
		// No route out of the run's subnet: the host's own addresses
		// outside it are unreachable from a node.
		out := hostSubnet(t).Addr().Next()
		if got := dial(t, n, "kafka-0", hostPort(out, 22), short); !strings.Contains(got, "network is unreachable") {
			t.Errorf("dial %s from a node: %q, want network is unreachable", out, got)
		}
	})
}

func TestPartitionAndHeal(t *testing.T) {
	n := newNetwork(t, "a", "b", "c")
	for _, node := range n.Nodes() {
		start(t, n, node, "ready", "listen", "7000", node)
	}
	ctx := context.Background()
	f, err := n.Partition(ctx, []string{"a"}, []string{"b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		from, to string
		cut      bool
	}{
		{"a", "b", true}, {"b", "a", true}, {"c", "a", true}, {"b", "c", false}, {"c", "b", false},
	}
	for _, tc := range cases {
		want := "ok " + tc.to
		if tc.cut {
			want = "timeout"
		}
		if got := dial(t, n, tc.from, tc.to+":7000", short); got != want {
			t.Errorf("partitioned: %s→%s: %q, want %q", tc.from, tc.to, got, want)
		}
	}
	// The harness still reaches every node: clients' paths are the links'.
	if got := hostDial(hostPort(n.Addr("a"), 7000), 5*time.Second); got != "ok a" {
		t.Errorf("host→a while a is isolated: %q", got)
	}
	e, err := f.Evidence(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if e.Packets() == 0 || len(e.Pairs) != 4 {
		t.Errorf("evidence %v: want 4 pairs with packets dropped", e)
	}
	healed, err := f.Heal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if healed.Packets() < e.Packets() {
		t.Errorf("evidence at heal %v is less than before %v", healed, e)
	}
	for _, tc := range cases {
		if got := dial(t, n, tc.from, tc.to+":7000", 5*time.Second); got != "ok "+tc.to {
			t.Errorf("healed: %s→%s: %q", tc.from, tc.to, got)
		}
	}
	if again, err := f.Heal(ctx); err != nil || again.Packets() != healed.Packets() {
		t.Errorf("second heal: %v, %v", again, err)
	}
	assertNoFaultRules(t, n)
}

// TestPartitionPort cuts one port between a and the others: new
// connections to it fail both ways, a connection to it made before the
// cut stalls, another port still connects, and the host still reaches
// a on the cut port; the rules' counters are the evidence, and Heal
// brings it all back.
func TestPartitionPort(t *testing.T) {
	n := newNetwork(t, "a", "b", "c")
	for _, node := range n.Nodes() {
		start(t, n, node, "ready", "listen", "7000", node)
		start(t, n, node, "ready", "listen", "7001", node)
	}
	start(t, n, "a", "ready", "echo", "7002")
	ctx := context.Background()
	if _, err := n.PartitionPort(ctx, 0, []string{"a"}, []string{"b"}); err == nil {
		t.Error("port 0 accepted")
	}
	// b's session with a's listener, open before the cut.
	session := start(t, n, "b", "connected", "ping", "a:7002")
	if got := session.next(t, 5*time.Second); got != "ok" {
		t.Fatalf("session before the cut: %q", got)
	}
	f, err := n.PartitionPort(ctx, 7000, []string{"a"}, []string{"b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	session2, err := n.PartitionPort(ctx, 7002, []string{"a"}, []string{"b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.String(); got != "f1 tcp/7000 a→b a→c b→a c→a" {
		t.Errorf("String() = %q", got)
	}
	cases := []struct {
		from, to string
		cut      bool
	}{
		{"a", "b:7000", true}, {"b", "a:7000", true}, {"c", "a:7000", true}, {"b", "c:7000", false},
		{"a", "b:7001", false}, {"b", "a:7001", false}, {"c", "a:7001", false},
	}
	for _, tc := range cases {
		want := "ok " + strings.Split(tc.to, ":")[0]
		if tc.cut {
			want = "timeout"
		}
		if got := dial(t, n, tc.from, tc.to, short); got != want {
			t.Errorf("port cut: %s→%s: %q, want %q", tc.from, tc.to, got, want)
		}
	}
	if got := hostDial(hostPort(n.Addr("a"), 7000), 5*time.Second); got != "ok a" {
		t.Errorf("host→a:7000 while the port is cut: %q", got)
	}
	eventually(t, 5*time.Second, "the session stalls", func() bool { return session.next(t, 5*time.Second) == "timeout" })
	e, err := f.Evidence(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if e.Packets() == 0 || len(e.Pairs) != 4 {
		t.Errorf("evidence %v: want 4 pairs with packets dropped", e)
	}
	for _, g := range []*Fault{f, session2} {
		if _, err := g.Heal(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range cases {
		want := "ok " + strings.Split(tc.to, ":")[0]
		if got := dial(t, n, tc.from, tc.to, 5*time.Second); got != want {
			t.Errorf("healed: %s→%s: %q", tc.from, tc.to, got)
		}
	}
	// TCP retransmits the held byte once the path is back.
	eventually(t, 15*time.Second, "the session flows again", func() bool { return session.next(t, 5*time.Second) == "ok" })
	assertNoFaultRules(t, n)
}

// TestOneWay: Drop(a, b) loses exactly a's packets to b, which its
// evidence counts, while b's to a arrive.
func TestOneWay(t *testing.T) {
	n := newNetwork(t, "a", "b")
	ctx := context.Background()
	f, err := n.Drop(ctx, []string{"a"}, []string{"b"})
	if err != nil {
		t.Fatal(err)
	}
	atB := start(t, n, "b", "ready", "udprecv", "5000")
	atA := start(t, n, "a", "ready", "udprecv", "5000")
	start(t, n, "a", "sent", "udpsend", "b:5000", "12")
	start(t, n, "b", "sent", "udpsend", "a:5000", "5")
	eventually(t, 5*time.Second, "a's 12 datagrams counted", func() bool {
		e, err := f.Evidence(ctx)
		return err == nil && e.Packets() == 12
	})
	for range 5 {
		if got := atA.next(t, 5*time.Second); got != "got" {
			t.Fatalf("at a: %q", got)
		}
	}
	select {
	case l := <-atB.lines:
		t.Errorf("b received %q through the drop", l)
	default:
	}
	e, err := f.Heal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := e.String(), "12 packets dropped (a→b 12)"; got != want {
		t.Errorf("evidence %q, want %q", got, want)
	}
	start(t, n, "a", "sent", "udpsend", "b:5000", "1")
	if got := atB.next(t, 5*time.Second); got != "got" {
		t.Errorf("after heal, at b: %q", got)
	}
}

// TestLoss: with p = 0.5, every datagram is either received or counted
// as dropped, and both happen.
func TestLoss(t *testing.T) {
	n := newNetwork(t, "a", "b")
	ctx := context.Background()
	if _, err := n.Loss(ctx, []string{"a"}, []string{"b"}, 0); err == nil {
		t.Error("loss 0 accepted")
	}
	f, err := n.Loss(ctx, []string{"a"}, []string{"b"}, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	atB := start(t, n, "b", "ready", "udprecv", "5000")
	const sent = 200
	start(t, n, "a", "sent", "udpsend", "b:5000", "200")
	got := 0
	eventually(t, 10*time.Second, "every datagram received or dropped", func() bool {
		for len(atB.lines) > 0 {
			<-atB.lines
			got++
		}
		e, err := f.Evidence(ctx)
		return err == nil && got+int(e.Packets()) == sent
	})
	if got == 0 || got == sent {
		t.Errorf("%d of %d received at loss 0.5", got, sent)
	}
	if err := n.HealAll(ctx); err != nil {
		t.Fatal(err)
	}
	assertNoFaultRules(t, n)
}

// TestHealAll heals overlapping faults and leaves the chain empty; a
// fault healed alone leaves the other's rules.
func TestHealAll(t *testing.T) {
	n := newNetwork(t, "a", "b", "c")
	ctx := context.Background()
	f1, err := n.Drop(ctx, []string{"a"}, []string{"b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	f2, err := n.Partition(ctx, []string{"a", "b"}, []string{"c"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f1.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f2.Evidence(ctx); err != nil {
		t.Fatalf("healing one fault touched another's rules: %v", err)
	}
	if _, err := n.Drop(ctx, []string{"b"}, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	if err := n.HealAll(ctx); err != nil {
		t.Fatal(err)
	}
	assertNoFaultRules(t, n)
	if _, err := n.Drop(ctx, []string{"a"}, []string{"zz"}); !errors.Is(err, errNoSuchNode) {
		t.Errorf("drop to an unknown node: %v", err)
	}
	if _, err := n.Drop(ctx, []string{"a"}, []string{"a"}); err == nil {
		t.Error("a fault with no pair accepted")
	}
}

// assertNoFaultRules: every node's fault chain is empty, and the fence
// is still there.
func assertNoFaultRules(t *testing.T, n *Network) {
	t.Helper()
	for _, node := range n.Nodes() {
		argv, _ := n.Command(node, "iptables", "-w", "-S")
		out := runOut(t, argv...)
		if strings.Contains(out, "-A "+faultChain) {
			t.Errorf("rules left in %s:\n%s", node, out)
		}
		if !strings.Contains(out, "deliverycheck:fence") {
			t.Errorf("fence gone from %s:\n%s", node, out)
		}
	}
}

// hostState is what a network could leave behind on the host.
type hostState struct{ netns, links, routes, rules, etc string }

func snapshot(t *testing.T) hostState {
	var s hostState
	s.netns = runOut(t, "ip", "netns", "list")
	s.links = runOut(t, "ip", "-o", "link", "show")
	s.routes = runOut(t, "ip", "-4", "route", "show", "table", "all")
	for _, ipt := range []string{"iptables", "iptables-legacy", "iptables-nft"} {
		if p, err := exec.LookPath(ipt); err == nil {
			for _, table := range []string{"filter", "nat", "raw", "mangle"} {
				out, _ := exec.Command(p, "-w", "-t", table, "-S").CombinedOutput()
				s.rules += string(out)
			}
		}
	}
	ents, _ := os.ReadDir(etcNetns)
	for _, e := range ents {
		s.etc += e.Name() + "\n"
	}
	return s
}

// mentions reports the lines of s that mention any of words.
func mentions(s string, words ...string) []string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		for _, w := range words {
			if strings.Contains(line, w) {
				out = append(out, line)
				break
			}
		}
	}
	return out
}

// leftovers lists what the host still has of a network with namespaces
// nss, host link, and subnet.
func leftovers(t *testing.T, nss []string, link, subnet string) []string {
	t.Helper()
	s := snapshot(t)
	words := append([]string{link, strings.TrimSuffix(subnet, "0/24")}, nss...)
	var out []string
	for _, part := range []struct{ what, s string }{
		{"ip netns", s.netns}, {"ip link", s.links}, {"route", s.routes}, {"iptables", s.rules}, {etcNetns, s.etc},
	} {
		for _, l := range mentions(part.s, words...) {
			out = append(out, part.what+": "+l)
		}
	}
	if strings.Contains(s.rules, "deliverycheck") {
		out = append(out, "iptables: a deliverycheck rule in the host's tables")
	}
	return out
}

func TestCloseLeavesNothing(t *testing.T) {
	testenv.MustHaveServer(t, "network namespaces", Check())
	ctx := context.Background()
	before := snapshot(t)
	n, err := New(ctx, Options{Nodes: []string{"a", "b", "c"}})
	if err != nil {
		t.Fatal(err)
	}
	nss, link, sub := n.namespaces(), n.HostLink(), n.Subnet().String()
	if _, err := n.Partition(ctx, []string{"a"}, []string{"b", "c"}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Loss(ctx, []string{"b"}, []string{"c"}, 0.3); err != nil {
		t.Fatal(err)
	}
	// The faults' rules are in the namespaces, not in the host's tables
	// (of either iptables backend).
	during := snapshot(t)
	if during.rules != before.rules && len(mentions(during.rules, strings.TrimSuffix(sub, "0/24"), "deliverycheck")) > 0 {
		t.Errorf("the host's tables changed:\n%s", during.rules)
	}
	for _, ns := range nss {
		if _, err := os.Stat(filepath.Join("/run/netns", ns)); err != nil {
			t.Errorf("namespace %s missing while up: %v", ns, err)
		}
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(t, nss, link, sub); len(left) > 0 {
		t.Errorf("left behind:\n%s", strings.Join(left, "\n"))
	}
	if _, err := os.Stat(etcNetns); before.etc == "" && !os.IsNotExist(err) {
		t.Errorf("%s left behind: %v", etcNetns, err)
	}
	if err := n.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := n.Drop(ctx, []string{"a"}, []string{"b"}); err == nil {
		t.Error("a fault on a closed network succeeded")
	}
}

// TestCloseWithAProcessInside: Close says a process still holds a
// namespace, and removes everything else.
func TestCloseWithAProcessInside(t *testing.T) {
	testenv.MustHaveServer(t, "network namespaces", Check())
	n, err := New(context.Background(), Options{Nodes: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	p := start(t, n, "a", "ready", "listen", "7000", "a")
	err = n.Close()
	if err == nil || !strings.Contains(err.Error(), "processes still in the namespaces") {
		t.Errorf("close with a process inside: %v", err)
	}
	p.kill()
	if left := leftovers(t, n.namespaces(), n.HostLink(), n.Subnet().String()); len(left) > 0 {
		t.Errorf("left behind:\n%s", strings.Join(left, "\n"))
	}
}

func TestCommandAs(t *testing.T) {
	n := newNetwork(t, "a")
	if _, err := n.Command("zz", "true"); err == nil {
		t.Error("command in an unknown node accepted")
	}
	argv, err := n.CommandAs("a", 65534, 65534, "id", "-u")
	if err != nil {
		testenv.MustHaveServer(t, "setpriv", err)
	}
	if got := strings.TrimSpace(runOut(t, argv...)); got != "65534" {
		t.Errorf("uid inside: %q", got)
	}
}

// TestHarnessKilled: a harness SIGKILLed with a network up, a fault on
// and processes inside leaves nothing once its guard has run: not the
// processes (one tracked by the guard, one only by its parent-death
// signal, run as another user), nor the namespaces, link, rules or hosts
// files.
func TestHarnessKilled(t *testing.T) {
	testenv.MustHaveServer(t, "network namespaces", Check())
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "harness", "a", "b", "c")
	cmd.Env = append(os.Environ(), helperEnv+"=1", raceQuick)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	var rep harnessReport
	if err := json.Unmarshal([]byte(line), &rep); err != nil {
		t.Fatalf("harness said %q", line)
	}
	for _, ns := range rep.Namespaces {
		if _, err := os.Stat(filepath.Join("/run/netns", ns)); err != nil {
			t.Fatalf("namespace %s not up: %v", ns, err)
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	gone := func(pid int) bool {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return true
		}
		s := string(b)
		st := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		return len(st) > 0 && (st[0] == "Z" || st[0] == "X")
	}
	// The guard exits once it has cleaned up: that is the condition.
	eventually(t, 30*time.Second, "the guard cleaned up and exited", func() bool { return gone(rep.Guard) })
	for _, pid := range rep.Children {
		eventually(t, 10*time.Second, "process "+strconv.Itoa(pid)+" gone", func() bool { return gone(pid) })
	}
	if left := leftovers(t, rep.Namespaces, rep.Link, rep.Subnet); len(left) > 0 {
		t.Errorf("left behind:\n%s", strings.Join(left, "\n"))
	}
}

// TestParallelRuns: two runs with the same node names at once get their
// own names and subnets, and the same port on the same node name in each.
func TestParallelRuns(t *testing.T) {
	testenv.MustHaveServer(t, "network namespaces", Check())
	nets := make([]*Network, 2)
	err := parallel(len(nets), func(i int) error {
		n, err := New(context.Background(), Options{Nodes: []string{"a", "b"}})
		nets[i] = n
		return err
	})
	for _, n := range nets {
		if n != nil {
			t.Cleanup(func() { _ = n.Close() })
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if nets[0].Name() == nets[1].Name() || nets[0].Subnet().Overlaps(nets[1].Subnet()) {
		t.Fatalf("runs collide: %s %s and %s %s", nets[0].Name(), nets[0].Subnet(), nets[1].Name(), nets[1].Subnet())
	}
	for i, n := range nets {
		start(t, n, "a", "ready", "listen", "7000", "run"+strconv.Itoa(i))
	}
	for i, n := range nets {
		if got, want := dial(t, n, "b", "a:7000", 5*time.Second), "ok run"+strconv.Itoa(i); got != want {
			t.Errorf("run %d: b→a: %q, want %q", i, got, want)
		}
		// A node of one run cannot reach the other run's nodes.
		other := nets[1-i].Addr("a")
		if got := dial(t, n, "b", hostPort(other, 7000), short); !strings.Contains(got, "network is unreachable") {
			t.Errorf("run %d reached run %d's node: %q", i, 1-i, got)
		}
	}
}

// TestExitPaths: however a run ends with its network up (it returns, New
// fails halfway, its context is cancelled as Ctrl-C does, or it panics),
// Close in a defer leaves nothing behind. (A SIGKILL is TestHarnessKilled.)
func TestExitPaths(t *testing.T) {
	testenv.MustHaveServer(t, "network namespaces", Check())
	for _, tc := range []struct {
		name string
		// run makes a network and ends the way its name says; it
		// returns what the network was, if it got that far.
		run func(t *testing.T) (nss []string, link, subnet string)
	}{
		{"success", func(t *testing.T) ([]string, string, string) {
			n, err := New(context.Background(), Options{Nodes: []string{"a", "b"}})
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			if _, err := n.Drop(context.Background(), []string{"a"}, []string{"b"}); err != nil {
				t.Fatal(err)
			}
			return n.namespaces(), n.HostLink(), n.Subnet().String()
		}},
		{"New fails halfway", func(t *testing.T) ([]string, string, string) {
			// Everything but the last step works: the namespaces, links
			// and hosts files exist when iptables-restore fails.
			dir := t.TempDir()
			for _, tool := range []string{"ip", "iptables", "setpriv"} {
				if p, err := exec.LookPath(tool); err == nil {
					if err := os.Symlink(p, filepath.Join(dir, tool)); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := os.WriteFile(filepath.Join(dir, "iptables-restore"), []byte("#!/bin/sh\necho broken >&2\nexit 1\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			t.Setenv("PATH", dir)
			before := snapshot(t)
			n, err := New(context.Background(), Options{Nodes: []string{"a", "b"}})
			if err == nil {
				n.Close()
				t.Fatal("New with a broken iptables-restore succeeded")
			}
			if !strings.Contains(err.Error(), "broken") {
				t.Errorf("error %q does not say what failed", err)
			}
			if after := snapshot(t); after.netns != before.netns || after.etc != before.etc {
				t.Errorf("a failed New left namespaces or hosts files:\n%s%s", after.netns, after.etc)
			}
			return nil, "", ""
		}},
		{"context cancelled", func(t *testing.T) ([]string, string, string) {
			ctx, cancel := context.WithCancel(context.Background())
			n, err := New(ctx, Options{Nodes: []string{"a", "b"}})
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			cancel()
			if _, err := n.Drop(ctx, []string{"a"}, []string{"b"}); err == nil {
				t.Error("a fault with a cancelled context went in")
			}
			return n.namespaces(), n.HostLink(), n.Subnet().String()
		}},
		{"panic", func(t *testing.T) (nss []string, link, subnet string) {
			defer func() {
				if r := recover(); r != "boom" {
					t.Fatalf("recovered %v", r)
				}
			}()
			n, err := New(context.Background(), Options{Nodes: []string{"a", "b"}})
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			nss, link, subnet = n.namespaces(), n.HostLink(), n.Subnet().String()
			panic("boom")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nss, link, sub := tc.run(t)
			if link == "" {
				return
			}
			if left := leftovers(t, nss, link, sub); len(left) > 0 {
				t.Errorf("left behind:\n%s", strings.Join(left, "\n"))
			}
		})
	}
}
