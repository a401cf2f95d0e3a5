package guard

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/internal/testenv"
)

// sleeper starts a process in its own group that lives until killed.
func sleeper(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// exited waits (bounded) for cmd to end and reports whether it did.
func exited(cmd *exec.Cmd, d time.Duration) bool {
	done := make(chan struct{})
	go func() { _, _ = cmd.Process.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

func TestHarnessDeathCleansUp(t *testing.T) {
	g, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "server")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tracked, untracked := sleeper(t), sleeper(t)
	for _, err := range []error{
		g.TrackDir(dir),
		g.TrackGroup(tracked.Process.Pid),
		g.TrackGroup(untracked.Process.Pid),
		g.UntrackGroup(untracked.Process.Pid),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	// The harness dies: its end of the pipe closes without "exit".
	g.mu.Lock()
	g.w.Close()
	g.w = nil
	g.mu.Unlock()
	if err := g.cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if !exited(tracked, 10*time.Second) {
		t.Error("tracked process group outlived the harness")
	}
	if exited(untracked, 200*time.Millisecond) {
		t.Error("the guard killed a group it was told was gone")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("tracked dir left behind: %v", err)
	}
}

func TestCleanCloseTouchesNothing(t *testing.T) {
	g, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := sleeper(t)
	if err := g.TrackDir(dir); err != nil {
		t.Fatal(err)
	}
	if err := g.TrackGroup(p.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if exited(p, 200*time.Millisecond) {
		t.Error("a clean close killed a tracked group")
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("a clean close removed a tracked dir: %v", err)
	}
	if err := g.TrackDir(dir); err == nil {
		t.Error("tracking after Close succeeded")
	}
}

func TestNilGuardAndBadArguments(t *testing.T) {
	var g *Guard
	if g.TrackDir("/x") != nil || g.TrackContainer("abc") != nil || g.Close() != nil || g.PID() != 0 || g.Open() {
		t.Error("a nil guard must accept every call and do nothing")
	}
	live, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	for _, bad := range []string{"", "a\nexit"} {
		if err := live.TrackDir(bad); err == nil {
			t.Errorf("TrackDir(%q) accepted", bad)
		}
	}
}

// TestHarnessDeathStopsBeforeKilling: a group given a stop signal gets it,
// and the time to act on it, before the guard kills every group; one
// without is killed outright (PostgreSQL releases its shared memory only
// when it gets to shut down).
func TestHarnessDeathStopsBeforeKilling(t *testing.T) {
	for _, tc := range []struct {
		name      string
		stop      syscall.Signal // 0: no stop signal
		wantClean bool           // the trap ran, so the process shut down itself
	}{
		{"stop signal", syscall.SIGQUIT, true},
		{"paused, stop signal", syscall.SIGQUIT, true},
		{"no stop signal", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := Start(Options{})
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			marker, ready := filepath.Join(dir, "stopped"), filepath.Join(dir, "ready")
			// A server that cleans up on SIGQUIT, with a child in its
			// group; it says when its trap is set.
			cmd := exec.Command("/bin/sh", "-c", `trap 'echo clean > "$1"; exit 0' QUIT; : > "$2"; while :; do sleep 0.05; done`, "sh", marker, ready)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
			for deadline := time.Now().Add(10 * time.Second); ; {
				if _, err := os.Stat(ready); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the server never set its trap")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err := g.TrackGroup(cmd.Process.Pid); err != nil {
				t.Fatal(err)
			}
			if tc.stop != 0 {
				if err := g.StopGroupWith(cmd.Process.Pid, tc.stop); err != nil {
					t.Fatal(err)
				}
			}
			if strings.HasPrefix(tc.name, "paused") {
				if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
			}
			g.mu.Lock()
			g.w.Close()
			g.w = nil
			g.mu.Unlock()
			if err := g.cmd.Wait(); err != nil {
				t.Fatal(err)
			}
			if !exited(cmd, 10*time.Second) {
				t.Fatal("tracked process group outlived the harness")
			}
			_, err = os.Stat(marker)
			if clean := err == nil; clean != tc.wantClean {
				t.Errorf("shut down by itself: %v, want %v", clean, tc.wantClean)
			}
			if left := groupMembers(cmd.Process.Pid); len(left) > 0 {
				t.Errorf("group members left: %v", left)
			}
		})
	}
}

// groupMembers lists the live processes of group pgid.
func groupMembers(pgid int) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[i+1:])
		if len(f) > 2 && f[0] != "Z" && f[2] == strconv.Itoa(pgid) {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestHarnessDeathRemovesNetworks: a namespace (with its /etc/netns dir)
// and a host link the harness made are gone once the guard has run; an
// untracked one stays. It needs root and ip, like cluster/netns.
func TestHarnessDeathRemovesNetworks(t *testing.T) {
	ip, err := exec.LookPath("ip")
	if err == nil && os.Geteuid() != 0 {
		err = errors.New("not root")
	}
	testenv.MustHaveServer(t, "network namespaces", err)
	id := "dcguard" + strconv.Itoa(os.Getpid()%100000)
	tracked, kept, link := id+"-a", id+"-b", id+"h"
	mustRun := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(ip, args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() {
		_ = exec.Command(ip, "netns", "delete", tracked).Run()
		_ = exec.Command(ip, "netns", "delete", kept).Run()
		_ = exec.Command(ip, "link", "delete", "dev", link).Run()
		_ = os.RemoveAll("/etc/netns/" + tracked)
		_ = os.Remove("/etc/netns")
	})
	g, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{g.TrackNetns(tracked), g.TrackNetns(kept), g.UntrackNetns(kept), g.TrackLink(link)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	mustRun("netns", "add", tracked)
	mustRun("netns", "add", kept)
	mustRun("link", "add", "name", link, "type", "veth", "peer", "name", "eth0", "netns", tracked)
	if err := os.MkdirAll("/etc/netns/"+tracked, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("/etc/netns/"+tracked+"/hosts", []byte("10.0.0.2 a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	g.w.Close()
	g.w = nil
	g.mu.Unlock()
	if err := g.cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/run/netns/" + tracked); !os.IsNotExist(err) {
		t.Errorf("tracked namespace left behind: %v", err)
	}
	if _, err := os.Stat("/etc/netns/" + tracked); !os.IsNotExist(err) {
		t.Errorf("tracked namespace's /etc/netns dir left behind: %v", err)
	}
	if err := exec.Command(ip, "link", "show", "dev", link).Run(); err == nil {
		t.Error("tracked link left behind")
	}
	if _, err := os.Stat("/run/netns/" + kept); err != nil {
		t.Errorf("the guard removed a namespace it was told was gone: %v", err)
	}
}

func TestBadNetworkNames(t *testing.T) {
	g, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for _, bad := range []string{"", "..", ".x", "a/b", "a b", "a\nexit", "-n"} {
		if g.TrackNetns(bad) == nil || g.TrackLink(bad) == nil {
			t.Errorf("name %q accepted", bad)
		}
	}
	if err := g.TrackNetns("dcn0123abcd-kafka-0"); err != nil {
		t.Errorf("good name refused: %v", err)
	}
}
