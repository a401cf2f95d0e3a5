package cluster_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/cluster/containers"
)

// The cleanup tests run a child copy of this test binary that starts real
// servers, reports their pids and temp dirs, then dies one way or another.
// The parent asserts that nothing the child started outlives it.
const childEnv = "DELIVERYCHECK_CLEANUP_CHILD"

type childReport struct {
	PIDs       []int    `json:"pids"`
	Dirs       []string `json:"dirs"`
	Containers []string `json:"containers"`
	// Netns are the network namespaces of replicated services' nodes.
	Netns []string `json:"netns"`
	// Networks are the engine networks of nodes on the containers
	// runtime.
	Networks []string `json:"networks"`
}

// TestCleanupChild is the child's body; it does nothing in a normal run.
func TestCleanupChild(t *testing.T) {
	mode := os.Getenv(childEnv)
	if mode == "" {
		t.Skip("only runs as the child of TestCleanup")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	services := strings.Split(os.Getenv(childEnv+"_SERVICES"), ",")
	// _NODES is as a scenario says it: kafka=3,rabbitmq=3.
	nodes := map[string]int{}
	for _, kv := range strings.Split(os.Getenv(childEnv+"_NODES"), ",") {
		if name, n, ok := strings.Cut(kv, "="); ok {
			nodes[name], _ = strconv.Atoi(n)
		}
	}
	c, err := cluster.Start(ctx, cluster.Config{Runtime: os.Getenv(childEnv + "_RUNTIME"), Services: services, Standby: os.Getenv(childEnv + "_STANDBY"), Nodes: nodes})
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	defer c.Close()
	var rep childReport
	rep.PIDs = c.PIDs()
	for _, s := range c.Services() {
		if d, ok := s.(interface{ Dir() string }); ok {
			rep.Dirs = append(rep.Dirs, d.Dir())
		}
		if d, ok := s.(interface{ ContainerID() string }); ok {
			rep.Containers = append(rep.Containers, d.ContainerID())
		}
		for _, n := range c.Nodes(s.Name()) {
			if d, ok := n.(interface{ Dir() string }); ok {
				rep.Dirs = append(rep.Dirs, d.Dir())
			}
			// A containers-runtime node: its server's container, then
			// its holder's and the holder's networks.
			if d, ok := n.(containerNode); ok {
				rep.Containers = append(rep.Containers, d.ContainerID(), d.HolderID())
				nets, err := containerNetworks(ctx, d.HolderID())
				if err != nil {
					fmt.Println("ERROR", err)
					os.Exit(1)
				}
				for _, nw := range nets {
					if !slices.Contains(rep.Networks, nw) {
						rep.Networks = append(rep.Networks, nw)
					}
				}
			}
		}
	}
	if n := c.Network(); n != nil {
		rep.Netns = append(rep.Netns, n.Name())
		for _, node := range n.Nodes() {
			rep.Netns = append(rep.Netns, n.Namespace(node))
		}
	}
	b, _ := json.Marshal(rep)
	fmt.Println("REPORT", string(b))
	switch mode {
	case "panic":
		panic("deliberate panic with servers running")
	default: // "signal" and "kill": wait to be interrupted or killed
		<-ctx.Done()
	}
}

func TestCleanup(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real servers")
	}
	services := "postgres,kafka,rabbitmq"
	for _, rt := range runtimesUnderTest(t) {
		t.Run(rt, func(t *testing.T) {
			// Each runtime's children start single servers of their own
			// (a containers PostgreSQL's shared memory is its
			// container's, not this host's /dev/shm): the two runtimes
			// go side by side, as TestConformance's do.
			t.Parallel()
			for _, mode := range []string{"signal", "panic", "kill"} {
				t.Run(mode, func(t *testing.T) { cleanupCase(t, rt, mode, services) })
			}
		})
	}
}

// cleanupCase runs one child on runtime rt that dies the mode's way; env
// is added to the child's environment.
func cleanupCase(t *testing.T, rt, mode, services string, env ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	shmBefore := shmFiles(t)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCleanupChild$", "-test.v")
	cmd.Env = append(append(os.Environ(), childEnv+"="+mode, childEnv+"_SERVICES="+services, childEnv+"_RUNTIME="+rt), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	defer func() {
		if t.Failed() {
			t.Logf("child stderr:\n%s", stderr.String())
		}
	}()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rep := readReport(t, out)
	if (len(rep.PIDs) == 0 && len(rep.Containers) == 0) || len(rep.Dirs) == 0 {
		t.Fatalf("child reported nothing to clean: %+v", rep)
	}
	switch mode {
	case "signal":
		cmd.Process.Signal(os.Interrupt)
	case "kill":
		// The harness gets no chance to clean up: the guards must.
		cmd.Process.Kill()
	}
	// The child's own test output is not ours: keep it out of
	// this test's log unless something goes wrong.
	var rest strings.Builder
	copied := make(chan struct{})
	go func() { _, _ = bufio.NewReader(out).WriteTo(&rest); close(copied) }()
	_ = cmd.Wait()
	<-copied
	defer func() {
		if t.Failed() {
			t.Logf("child output:\n%s", rest.String())
		}
	}()
	waitGone(t, ctx, rep, shmBefore)
}

func readReport(t *testing.T, r interface{ Read([]byte) (int, error) }) childReport {
	t.Helper()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "REPORT "); ok {
			var rep childReport
			if err := json.Unmarshal([]byte(rest), &rep); err != nil {
				t.Fatal(err)
			}
			return rep
		}
		if strings.HasPrefix(line, "ERROR") {
			// The error's own lines (a server's log tail) follow it.
			t.Fatalf("%s\n%s", line, restOf(sc, 5*time.Second))
		}
	}
	t.Fatalf("child exited without a report: %v", sc.Err())
	return childReport{}
}

// restOf is what sc has left to give within d: the lines after a
// child's ERROR line, which explain it. A child that exits closes its
// stdout; d bounds a read a lingering process holds open.
func restOf(sc *bufio.Scanner, d time.Duration) string {
	var b strings.Builder
	done := make(chan struct{})
	go func() {
		defer close(done)
		for sc.Scan() && b.Len() < 64<<10 {
			b.WriteString(sc.Text())
			b.WriteByte('\n')
		}
	}()
	select {
	case <-done:
		return b.String()
	case <-time.After(d):
		return "(the child's output did not end)"
	}
}

// waitGone waits (bounded) until every pid, dir and container in rep is
// gone, and with them the shared memory the child's servers made: no
// PostgreSQL.* file in /dev/shm that was not there before (shmBefore),
// and no System V segment created by one of the child's processes (a
// PostgreSQL killed with SIGKILL leaves both behind; issue 19).
func waitGone(t *testing.T, ctx context.Context, rep childReport, shmBefore map[string]bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var eng containers.Engine
	if len(rep.Containers) > 0 || len(rep.Networks) > 0 {
		var err error
		if eng, err = containers.Detect(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for {
		var left []string
		for _, id := range rep.Containers {
			if ok, err := containers.Exists(ctx, eng, id); err != nil || ok {
				left = append(left, fmt.Sprintf("container %.12s (%v)", id, err))
			}
		}
		for _, nw := range rep.Networks {
			if ok, err := networkExists(ctx, nw); err != nil || ok {
				left = append(left, fmt.Sprintf("engine network %s (%v)", nw, err))
			}
		}
		for _, pid := range rep.PIDs {
			if alive(pid) {
				left = append(left, fmt.Sprintf("pid %d", pid))
			}
		}
		for _, d := range rep.Dirs {
			if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
				left = append(left, "dir "+d)
			}
		}
		for name := range shmFiles(t) {
			if !shmBefore[name] {
				left = append(left, "/dev/shm/"+name)
			}
		}
		for _, seg := range sysvSegments(t, rep.PIDs) {
			left = append(left, "System V shared memory segment "+seg)
		}
		for _, ns := range rep.Netns {
			if _, err := os.Stat("/run/netns/" + ns); !errors.Is(err, os.ErrNotExist) {
				left = append(left, "network namespace "+ns)
			}
		}
		if len(left) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("outlived the harness: %v", left)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// alive reports whether pid is a live, non-zombie process.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// shmFiles is the set of PostgreSQL's dynamic shared memory files in
// /dev/shm (dynamic_shared_memory_type=posix names them PostgreSQL.<n>).
func shmFiles(t *testing.T) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir("/dev/shm")
	if err != nil {
		t.Fatalf("list /dev/shm: %v", err)
	}
	out := map[string]bool{}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "PostgreSQL.") {
			out[e.Name()] = true
		}
	}
	return out
}

// sysvSegments lists the System V shared memory segments (as "shmid
// <id> (creator pid <pid>)") whose creator is one of pids, read from
// /proc/sysvipc/shm.
func sysvSegments(t *testing.T, pids []int) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/sysvipc/shm")
	if err != nil {
		t.Fatalf("read System V segments: %v", err)
	}
	ours := map[string]bool{}
	for _, p := range pids {
		ours[strconv.Itoa(p)] = true
	}
	var out []string
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for _, l := range lines[1:] { // the first line is the header
		f := strings.Fields(l) // key shmid perms size cpid lpid nattch ...
		if len(f) > 4 && ours[f[4]] {
			out = append(out, fmt.Sprintf("shmid %s (creator pid %s)", f[1], f[4]))
		}
	}
	return out
}
