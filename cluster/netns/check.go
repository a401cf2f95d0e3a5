package netns

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// UnsupportedError says what this machine lacks to run nodes in network
// namespaces. It is one error naming everything missing at once, so a
// scenario asking for nodes can be refused before anything starts with a
// message that says what to fix.
type UnsupportedError struct {
	// Missing names each lacking capability or command, e.g.
	// "CAP_NET_ADMIN" or "the iptables command".
	Missing []string
}

func (e *UnsupportedError) Error() string {
	return "network namespaces unavailable on this machine: missing " + strings.Join(e.Missing, ", ")
}

// Unwrap makes errors.Is(err, errors.ErrUnsupported) true.
func (e *UnsupportedError) Unwrap() error { return errors.ErrUnsupported }

// Capability bits of /proc/self/status's CapEff (linux/capability.h).
const (
	capNetAdmin = 12 // veths, bridges, addresses, iptables
	capSysAdmin = 21 // ip netns add/exec: mounts and setns
)

// tools are the commands a Network runs, in the order they are reported
// missing.
var tools = []string{"ip", "iptables", "iptables-restore"}

// Check reports whether this machine can create a Network: root-level
// CAP_NET_ADMIN and CAP_SYS_ADMIN, and the ip, iptables and
// iptables-restore commands. It returns nil or an *UnsupportedError.
// It starts nothing, so it is cheap enough for scenario validation.
func Check() error {
	caps, err := effectiveCaps()
	if err != nil {
		return fmt.Errorf("netns: read capabilities: %w", err)
	}
	return check(caps, exec.LookPath)
}

// check is Check with the capability mask and the command lookup given,
// so every combination can be tested without being root.
func check(caps uint64, lookPath func(string) (string, error)) error {
	var missing []string
	for _, c := range []struct {
		bit  uint
		name string
	}{{capNetAdmin, "CAP_NET_ADMIN"}, {capSysAdmin, "CAP_SYS_ADMIN"}} {
		if caps&(1<<c.bit) == 0 {
			missing = append(missing, c.name)
		}
	}
	if len(missing) > 0 {
		missing[len(missing)-1] += " (run as root)"
	}
	for _, t := range tools {
		if _, err := lookPath(t); err != nil {
			missing = append(missing, "the "+t+" command")
		}
	}
	if len(missing) > 0 {
		return &UnsupportedError{Missing: missing}
	}
	return nil
}

// effectiveCaps reads the process's effective capability set. Being uid
// 0 is not enough (a container may drop CAP_NET_ADMIN), and not being
// root need not be a refusal (capabilities can be granted), so the set
// itself is what counts.
func effectiveCaps() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, errors.New("no CapEff line in /proc/self/status")
}
