package netns

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// pool is where New picks a run's /24 from: 8192 of them, away from the
// ranges container engines and clusters default to (Docker's 172.17/16
// and up, Podman's 10.88/16, Kubernetes' 10.96/12 and 10.244/16).
var pool = netip.MustParsePrefix("10.160.0.0/11")

// claimSubnet picks (or, when want is valid, checks) a prefix with room
// for the host and nodes that no address or route of the host overlaps,
// and holds it against parallel runs with an abstract unix socket named
// after it: the kernel releases that when the harness dies, however it
// dies, so no lock file is left behind. The claim is taken before the
// check, so two runs can never both pass it; a dead run's leftovers still
// hold their addresses and routes, so the check refuses them.
func claimSubnet(ctx context.Context, ip string, want netip.Prefix, nodes int) (netip.Prefix, net.Listener, error) {
	if want.IsValid() {
		want = want.Masked()
		if !want.Addr().Is4() || 1<<(32-want.Bits()) < nodes+3 {
			return netip.Prefix{}, nil, fmt.Errorf("subnet %s: want an IPv4 prefix with room for the host and %d nodes", want, nodes)
		}
		if nodes+3 > 256 {
			return netip.Prefix{}, nil, fmt.Errorf("%d nodes: at most 253", nodes)
		}
		l, err := claim(ctx, ip, want)
		if err != nil {
			return netip.Prefix{}, nil, fmt.Errorf("subnet %s: %w", want, err)
		}
		return want, l, nil
	}
	if nodes+3 > 256 {
		return netip.Prefix{}, nil, fmt.Errorf("%d nodes: at most 253 in a /24", nodes)
	}
	var last error
	for range 32 {
		b := pool.Addr().As4()
		k := rand.IntN(1 << (24 - pool.Bits()))
		b[1] += byte(k >> 8)
		b[2] = byte(k)
		p := netip.PrefixFrom(netip.AddrFrom4(b), 24)
		l, err := claim(ctx, ip, p)
		if err == nil {
			return p, l, nil
		}
		last = err
	}
	return netip.Prefix{}, nil, fmt.Errorf("no free /24 in %s: last tried: %w", pool, last)
}

// claim takes p's socket, then checks the host does not use p.
func claim(ctx context.Context, ip string, p netip.Prefix) (net.Listener, error) {
	l, err := net.Listen("unix", "@deliverycheck/netns/"+p.String())
	if err != nil {
		return nil, fmt.Errorf("claimed by another run: %w", err)
	}
	used, err := hostPrefixes(ctx, ip)
	if err != nil {
		l.Close()
		return nil, err
	}
	for _, u := range used {
		if u.Overlaps(p) {
			l.Close()
			return nil, fmt.Errorf("in use on this host (%s)", u)
		}
	}
	return l, nil
}

// hostPrefixes are the host's interface prefixes and the destinations of
// its routes in every table, except the default route.
func hostPrefixes(ctx context.Context, ip string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("host addresses: %w", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if p, err := netip.ParsePrefix(n.String()); err == nil {
				out = append(out, p.Masked())
			}
		}
	}
	b, err := exec.CommandContext(ctx, ip, "-j", "-4", "route", "show", "table", "all").Output()
	if err != nil {
		return nil, fmt.Errorf("host routes: ip route: %w", err)
	}
	var routes []struct {
		Dst string `json:"dst"`
	}
	if err := json.Unmarshal(b, &routes); err != nil {
		return nil, fmt.Errorf("host routes: %w", err)
	}
	for _, r := range routes {
		if p, err := netip.ParsePrefix(r.Dst); err == nil {
			out = append(out, p.Masked())
		} else if a, err := netip.ParseAddr(r.Dst); err == nil {
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
		}
		// "default" and anything unparsable: not a claim on a subnet.
	}
	return out, nil
}

// nsInode is the inode of the namespace mounted at /run/netns/<ns>, and
// whether one is.
func nsInode(ns string) (uint64, bool) {
	fi, err := os.Stat(filepath.Join("/run/netns", ns))
	if err != nil {
		return 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Ino == 0 {
		return 0, false
	}
	return st.Ino, true
}

// processesIn lists "pid (ns)" for every process whose network namespace
// is one of inodes.
func processesIn(inodes map[uint64]string) []string {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		link, err := os.Readlink("/proc/" + e.Name() + "/ns/net")
		if err != nil {
			continue
		}
		s, ok := strings.CutPrefix(link, "net:[")
		if !ok {
			continue
		}
		ino, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64)
		if err != nil {
			continue
		}
		if ns, ok := inodes[ino]; ok {
			out = append(out, e.Name()+" ("+ns+")")
		}
	}
	return out
}

var errNoSuchNode = errors.New("no such node")
