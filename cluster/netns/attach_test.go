package netns

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"
)

func TestAttachBadOptions(t *testing.T) {
	a := netip.MustParseAddr("10.1.2.3")
	for _, tc := range []struct {
		name  string
		nodes []AttachedNode
		want  string
	}{
		{"none", nil, "no nodes"},
		{"bad name", []AttachedNode{{"a_b", 1, a}}, "DNS label"},
		{"twice", []AttachedNode{{"a", 1, a}, {"a", 2, a}}, "named twice"},
		{"no pid", []AttachedNode{{"a", 0, a}}, "no pid"},
		{"no address", []AttachedNode{{"a", 1, netip.Addr{}}}, "no address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Attach(context.Background(), AttachOptions{Nodes: tc.nodes})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Attach: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// TestAttach adopts namespaces someone else made (here a Network of
// New's, standing in for containers' namespaces) by the pids of processes
// in them: its faults cut real traffic, with evidence, Heal restores it,
// and Close removes its names only, leaving the namespaces and their
// processes to their owner.
func TestAttach(t *testing.T) {
	own := newNetwork(t, "a", "b")
	ctx := context.Background()
	var nodes []AttachedNode
	for _, node := range own.Nodes() {
		p := start(t, own, node, "ready", "listen", "7000", node)
		nodes = append(nodes, AttachedNode{Name: node, PID: p.cmd.Process.Pid, Addr: own.Addr(node)})
	}
	att, err := Attach(ctx, AttachOptions{Nodes: nodes, Subnet: own.Subnet(), Host: own.HostAddr()})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = att.Close()
		}
	}()
	if !att.Attached() || own.Attached() {
		t.Errorf("Attached: %v for the adopted network, %v for the owner's", att.Attached(), own.Attached())
	}
	if att.Addr("b") != own.Addr("b") {
		t.Errorf("Addr(b) = %v, want %v", att.Addr("b"), own.Addr("b"))
	}
	for _, node := range att.Nodes() {
		if _, err := os.Stat("/run/netns/" + att.Namespace(node)); err != nil {
			t.Errorf("%s: no name for the adopted namespace: %v", node, err)
		}
	}
	f, err := att.Partition(ctx, []string{"a"}, []string{"b"})
	if err != nil {
		t.Fatal(err)
	}
	if got := dial(t, own, "a", "b:7000", short); got != "timeout" {
		t.Errorf("partitioned: a→b %q, want timeout", got)
	}
	ev, err := f.Heal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Packets() == 0 {
		t.Errorf("evidence %v: nothing dropped", ev)
	}
	if got := dial(t, own, "a", "b:7000", 5*time.Second); got != "ok b" {
		t.Errorf("healed: a→b %q", got)
	}
	closed = true
	if err := att.Close(); err != nil {
		t.Fatal(err)
	}
	for _, node := range att.Nodes() {
		if _, err := os.Stat("/run/netns/" + att.Namespace(node)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: name %s outlived Close (%v)", node, att.Namespace(node), err)
		}
	}
	// The owner's namespaces and processes are as they were.
	if got := dial(t, own, "b", "a:7000", 5*time.Second); got != "ok a" {
		t.Errorf("after Close: b→a %q", got)
	}
	if _, err := att.Partition(ctx, []string{"a"}, []string{"b"}); err == nil {
		t.Error("a closed network made a fault")
	}
}
