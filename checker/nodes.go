package checker

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/deliverycheck/deliverycheck/history"
)

// Node is what the history shows of one server node over the run, or of
// a server as a whole (Name == Service): when it was down, which faults
// were aimed at it, when it led its service. The report draws one row per
// Node.
type Node struct {
	// Name is the node ("kafka-1") or the service ("kafka") whose row
	// this is. A service's own row holds what is aimed at the service
	// rather than one node: a split of its nodes, a failover, a kill of
	// a single server, and the times it had no leader.
	Name    string `json:"name"`
	Service string `json:"service"`
	// Spans are in start order.
	Spans []NodeSpan `json:"spans"`
	// LeaderChanges counts, on a service's row, how often its leader
	// moved to another node (leader ops naming a node other than the
	// last one named).
	LeaderChanges int `json:"leader_changes,omitempty"`
}

// NodeSpan is one stretch of a node's time line.
type NodeSpan struct {
	// State is "down" (from a crash op until the restart op of the same
	// target, or the end of the history), "leader" (named by leader ops
	// until the next one of its service names another node, or fails),
	// "no-leader" (a service's row: a leader op failed), or the kind of
	// a fault window aimed at it ("pause", "isolate", "split",
	// "failover", ...).
	State   string `json:"state"`
	StartNS int64  `json:"start_ns"`
	EndNS   int64  `json:"end_ns"`
	// Detail is the op's detail or error ("kill -9 by the nemesis",
	// "partition 0 of run.events"), or a fault's step.
	Detail string `json:"detail,omitempty"`
	// Fault is the index in Result.Faults of a fault span.
	Fault *int `json:"fault,omitempty"`
}

// The states of a [NodeSpan] that are not fault kinds.
const (
	NodeDown     = "down"
	NodeLeader   = "leader"
	NodeNoLeader = "no-leader"
)

// Servers are the servers a run can provision (cluster.Names): a
// target that names one, one of its nodes ("kafka-1") or its leader
// ("kafka:leader") is a node of the time line; any other target is a
// worker or a link.
var Servers = []string{"postgres", "kafka", "rabbitmq"}

// serverOf splits a target into its server and node: "kafka-1" is
// kafka's node kafka-1, "kafka" the server itself (node ""), and
// "kafka:leader" its leader (node ":leader"). ok is false for a target
// that is not a server's.
func serverOf(target string) (service, node string, ok bool) {
	if svc, found := strings.CutSuffix(target, ":leader"); found {
		return svc, ":leader", slices.Contains(Servers, svc)
	}
	if slices.Contains(Servers, target) {
		return target, "", true
	}
	i := strings.LastIndexByte(target, '-')
	if i <= 0 {
		return "", "", false
	}
	if n, err := strconv.Atoi(target[i+1:]); err != nil || n < 0 || strconv.Itoa(n) != target[i+1:] {
		return "", "", false
	}
	return target[:i], target, slices.Contains(Servers, target[:i])
}

// nodeOp keeps a crash, restart or leader op of a server for the time
// line (shard 0, which owns ops without an event).
func (s *shard) nodeOp(op *history.Op) {
	if _, _, ok := serverOf(op.Value.Target); ok {
		s.nodeOps = append(s.nodeOps, nodeOp{t: op.Time, typ: op.Type, f: op.F, target: op.Value.Target,
			detail: cmp.Or(op.Value.Error, op.Value.Detail), fault: op.Value.Fault})
	}
}

// nodeOp is the little of an op the time line needs.
type nodeOp struct {
	t              int64
	typ            history.Type
	f              history.F
	target, detail string
	fault          string // a crash's fault kind
}

// leaderSpan is one service's leader from start on ("" unknown).
type leaderSpan struct {
	node, detail string
	start        int64
}

// nodes builds the time line of every server the history names, from
// the fault windows and the crash, restart and leader ops; end is the
// history's last time, where what is still open ends.
func nodes(ops []nodeOp, faults []Fault, end int64) []Node {
	rows := map[string]*Node{}
	row := func(service, name string) *Node {
		if name == "" {
			name = service
		}
		r, ok := rows[name]
		if !ok {
			r = &Node{Name: name, Service: service, Spans: []NodeSpan{}}
			rows[name] = r
		}
		return r
	}
	// Leaders first: a fault aimed at a leader is put on the node that
	// led when it started.
	leaders := map[string][]leaderSpan{}
	for _, op := range ops {
		if op.f != history.Leader || (op.typ != history.OK && op.typ != history.Fail) {
			continue
		}
		svc, node, _ := serverOf(op.target)
		if op.typ == history.Fail || node == ":leader" {
			node = "" // no node named: no leader known
		}
		ls := leaders[svc]
		if n := len(ls); n > 0 && ls[n-1].node == node {
			continue
		}
		leaders[svc] = append(ls, leaderSpan{node: node, start: op.t, detail: op.detail})
	}
	for _, svc := range slices.Sorted(maps.Keys(leaders)) {
		ls := leaders[svc]
		last := ""
		for i, l := range ls {
			stop := end
			if i+1 < len(ls) {
				stop = ls[i+1].start
			}
			sp := NodeSpan{State: NodeLeader, StartNS: l.start, EndNS: stop, Detail: l.detail}
			if l.node == "" {
				sp.State = NodeNoLeader
			} else {
				if last != "" && last != l.node {
					row(svc, "").LeaderChanges++
				}
				last = l.node
			}
			r := row(svc, l.node)
			r.Spans = append(r.Spans, sp)
		}
	}
	leaderAt := func(svc string, t int64) string {
		node := ""
		for _, l := range leaders[svc] {
			if l.start > t {
				break
			}
			node = l.node
		}
		return node
	}
	// resolve is the row a target names at time t: a node, a service's
	// leader then (the service's own row when none is known), or the
	// service. A service target of a replicated service stays the
	// service's, except where only one node can be meant (byLeader: a
	// crash of the service is its leader's, the primary a failover
	// kills).
	resolve := func(target string, t int64, byLeader bool) *Node {
		svc, node, _ := serverOf(target)
		if node == ":leader" || (node == "" && byLeader) {
			if l := leaderAt(svc, t); l != "" {
				return row(svc, l)
			}
			if node == ":leader" {
				return row(svc, target)
			}
		}
		return row(svc, node)
	}
	for i, f := range faults {
		svc, node, ok := serverOf(f.Target)
		if !ok {
			continue
		}
		r := resolve(f.Target, f.StartNS, false)
		if node == ":leader" {
			// A crash of one of the service's nodes by this fault names
			// the leader it hit, better than the last sample before it
			// (up to an interval old), and without leader ops at all.
			for _, op := range ops {
				if s, n, _ := serverOf(op.target); op.f == history.Crash && op.fault == f.Kind && s == svc && n != "" && n != ":leader" &&
					op.t >= f.StartNS && op.t <= f.EndNS {
					r = row(svc, n)
					break
				}
			}
		}
		r.Spans = append(r.Spans, NodeSpan{State: f.Kind, StartNS: f.StartNS, EndNS: f.EndNS, Detail: f.Detail, Fault: ptr(i)})
	}
	// Down: from a crash (or the invoke of a restart) until the restart
	// of the same target. A crash
	// inside a fault window on its target (a failover's kill of the
	// primary, a kill of the leader) is the node that fault hit, looked
	// up as of the window's start: by the time the crash is recorded
	// the leader may have moved.
	type open struct {
		r     *Node
		start int64
		why   string
	}
	down := map[string]*open{}
	for _, op := range ops {
		switch op.f {
		case history.Crash:
			if op.typ == history.Invoke {
				continue
			}
			at := op.t
			for _, f := range faults {
				if f.Target == op.target && f.Kind == op.fault && f.StartNS <= op.t && op.t <= f.EndNS {
					at = f.StartNS
				}
			}
			if _, ok := down[op.target]; !ok {
				down[op.target] = &open{r: resolve(op.target, at, true), start: op.t, why: op.detail}
			}
		case history.Restart:
			if op.typ == history.Invoke {
				// A clean restart that records its stop (a rolling
				// restart's node) is down until it is back.
				if _, ok := down[op.target]; !ok {
					down[op.target] = &open{r: resolve(op.target, op.t, true), start: op.t, why: op.detail}
				}
				continue
			}
			if d, ok := down[op.target]; ok {
				d.r.Spans = append(d.r.Spans, NodeSpan{State: NodeDown, StartNS: d.start, EndNS: op.t, Detail: d.why})
				delete(down, op.target)
			}
		}
	}
	for _, target := range slices.Sorted(maps.Keys(down)) {
		d := down[target]
		d.r.Spans = append(d.r.Spans, NodeSpan{State: NodeDown, StartNS: d.start, EndNS: end, Detail: strings.TrimSpace(d.why + " (never restarted)")})
	}
	out := make([]Node, 0, len(rows))
	for _, r := range rows {
		slices.SortStableFunc(r.Spans, func(a, b NodeSpan) int {
			if c := cmp.Compare(a.StartNS, b.StartNS); c != 0 {
				return c
			}
			return cmp.Compare(a.State, b.State)
		})
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b Node) int {
		if c := cmp.Compare(a.Service, b.Service); c != 0 {
			return c
		}
		// The service's own row first, then its nodes by number.
		if (a.Name == a.Service) != (b.Name == b.Service) {
			if a.Name == a.Service {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(len(a.Name), len(b.Name)); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	return out
}
