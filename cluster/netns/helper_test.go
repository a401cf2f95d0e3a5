package netns

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/internal/testenv"
	"github.com/deliverycheck/deliverycheck/process/guard"
)

// helperEnv makes the test binary a small network tool instead of a test
// run, so tests can listen and dial inside a namespace (through
// Network.Command, as the cluster will start its servers) without
// depending on netcat or socat being installed.
const helperEnv = "NETNS_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(helper(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// helper runs one tool:
//
//	listen PORT REPLY    accept on every address, write REPLY, close
//	dial ADDR TIMEOUT    print "ok REPLY", "timeout" or "error ..."
//	udprecv PORT         print "got" per datagram
//	udpsend ADDR N       send N datagrams
//	check                print Check's error, or "ok"
//	harness NODE...      make a guarded network, start processes in it, print it, block
func helper(args []string) int {
	say := func(format string, a ...any) { fmt.Printf(format+"\n", a...) }
	switch args[0] {
	case "listen":
		l, err := net.Listen("tcp", ":"+args[1])
		if err != nil {
			say("error %v", err)
			return 1
		}
		say("ready")
		for {
			c, err := l.Accept()
			if err != nil {
				return 1
			}
			_, _ = io.WriteString(c, args[2])
			c.Close()
		}
	case "dial":
		d, _ := time.ParseDuration(args[2])
		c, err := net.DialTimeout("tcp", args[1], d)
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			say("timeout")
		case err != nil:
			say("error %v", err)
		default:
			b, _ := io.ReadAll(c)
			say("ok %s", b)
		}
		return 0
	case "echo":
		// Echo every byte back, on each connection, for ever.
		l, err := net.Listen("tcp", ":"+args[1])
		if err != nil {
			say("error %v", err)
			return 1
		}
		say("ready")
		for {
			c, err := l.Accept()
			if err != nil {
				return 1
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	case "ping":
		// One connection, made now: every 50ms a byte out and its echo
		// back within 200ms says "ok", none says "timeout". What a
		// long-lived connection (a follower's fetch session) sees.
		c, err := net.DialTimeout("tcp", args[1], 5*time.Second)
		if err != nil {
			say("error %v", err)
			return 1
		}
		say("connected")
		buf := make([]byte, 1)
		for pending := 0; ; time.Sleep(50 * time.Millisecond) {
			if _, err := c.Write([]byte("x")); err != nil {
				say("error %v", err)
				return 1
			}
			pending++
			_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			for pending > 0 {
				if _, err := c.Read(buf); err != nil {
					break
				}
				pending--
			}
			if pending == 0 {
				say("ok")
			} else {
				say("timeout")
			}
		}
	case "udprecv":
		c, err := net.ListenPacket("udp", ":"+args[1])
		if err != nil {
			say("error %v", err)
			return 1
		}
		say("ready")
		buf := make([]byte, 64)
		for {
			if _, _, err := c.ReadFrom(buf); err != nil {
				return 1
			}
			say("got")
		}
	case "udpsend":
		c, err := net.Dial("udp", args[1])
		if err != nil {
			say("error %v", err)
			return 1
		}
		k, _ := strconv.Atoi(args[2])
		for range k {
			if _, err := c.Write([]byte("x")); err != nil {
				say("error %v", err)
				return 1
			}
		}
		say("sent")
		return 0
	case "check":
		if err := Check(); err != nil {
			say("%v", err)
		} else {
			say("ok")
		}
		return 0
	case "harness":
		return harness(args[1:])
	}
	say("unknown helper %q", args[0])
	return 2
}

// harnessReport is what the harness helper prints once everything is up.
type harnessReport struct {
	Namespaces []string
	Link       string
	Subnet     string
	Guard      int
	Children   []int
}

// harness is a harness that dies without cleaning up: a guarded network
// with a fault, a listener in the first node tracked by the guard as a
// process group, and one in the second not tracked but with a parent
// death signal, started as another user. The test SIGKILLs it.
func harness(nodes []string) int {
	g, err := guard.Start(guard.Options{})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	n, err := New(context.Background(), Options{Nodes: nodes, Guard: g})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	if _, err := n.Partition(context.Background(), nodes[:1], nodes[1:]); err != nil {
		fmt.Println("error", err)
		return 1
	}
	self, _ := os.Executable()
	rep := harnessReport{Link: n.HostLink(), Subnet: n.Subnet().String(), Guard: g.PID(),
		Namespaces: n.namespaces()}
	for i, argv := range [][]string{
		must(n.Command(nodes[0], self, "listen", "7000", "a")),
		// It says when it runs as that user: past ip and setpriv, which
		// is when the parent-death signal must have been kept.
		must(n.CommandAs(nodes[1], 65534, 65534, "/bin/sh", "-c", `echo ready; exec sleep 300`)),
	} {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), helperEnv+"=1", raceQuick)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if i == 1 {
			cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
		}
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			fmt.Println("error", err)
			return 1
		}
		if i == 0 {
			if err := g.TrackGroup(cmd.Process.Pid); err != nil {
				fmt.Println("error", err)
				return 1
			}
		}
		if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
			fmt.Printf("error child %d: %q\n", i, line)
			return 1
		}
		rep.Children = append(rep.Children, cmd.Process.Pid)
	}
	b, _ := json.Marshal(rep)
	fmt.Println(string(b))
	select {} // until SIGKILLed
}

func must(argv []string, err error) []string {
	if err != nil {
		panic(err)
	}
	return argv
}

// newNetwork makes a network for a test, skipping (or failing under
// DELIVERYCHECK_REQUIRE_SERVERS) where the machine cannot.
func newNetwork(tb testing.TB, nodes ...string) *Network {
	tb.Helper()
	testenv.MustHaveServer(tb, "network namespaces", Check())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := New(ctx, Options{Nodes: nodes})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := n.Close(); err != nil {
			tb.Errorf("close: %v", err)
		}
	})
	return n
}

// proc is a helper running inside a namespace; its output lines arrive
// on lines.
type proc struct {
	cmd   *exec.Cmd
	lines chan string
}

// start starts a helper in node's namespace and, when wait is not "",
// waits for that line (e.g. "ready"). It is killed when the test ends.
func start(t *testing.T, n *Network, node, wait string, args ...string) *proc {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	argv, err := n.Command(node, append([]string{self}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), helperEnv+"=1", raceQuick)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, lines: make(chan string, 1024)}
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			p.lines <- s.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(p.kill)
	if wait != "" {
		if got := p.next(t, 10*time.Second); got != wait {
			t.Fatalf("%s in %s: got %q, want %q", args[0], node, got, wait)
		}
	}
	return p
}

func (p *proc) kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	_ = p.cmd.Wait()
}

// next is the helper's next line, within d.
func (p *proc) next(t *testing.T, d time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			t.Fatalf("helper %v exited", p.cmd.Args)
		}
		return l
	case <-time.After(d):
		t.Fatalf("helper %v said nothing in %v", p.cmd.Args, d)
		return ""
	}
}

// dial dials addr from node's namespace and says "ok REPLY", "timeout" or
// "error ...".
func dial(t *testing.T, n *Network, node, addr string, timeout time.Duration) string {
	t.Helper()
	p := start(t, n, node, "", "dial", addr, timeout.String())
	defer p.kill()
	return p.next(t, timeout+10*time.Second)
}

// hostDial dials addr from the host (the harness's side of the bridge).
func hostDial(addr string, timeout time.Duration) string {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "error " + err.Error()
	}
	defer c.Close()
	b, _ := io.ReadAll(c)
	return "ok " + string(b)
}

// eventually waits up to d for cond, polling.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func hostPort(a fmt.Stringer, port int) string {
	return net.JoinHostPort(a.String(), strconv.Itoa(port))
}

func runOut(t *testing.T, argv ...string) string {
	t.Helper()
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}

// raceQuick keeps a helper built with -race from sleeping a second at
// exit (the race runtime's default atexit_sleep_ms).
const raceQuick = "GORACE=atexit_sleep_ms=0"

func testenvCheck(tb testing.TB) {
	tb.Helper()
	testenv.MustHaveServer(tb, "network namespaces", Check())
}
