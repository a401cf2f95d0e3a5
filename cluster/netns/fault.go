package netns

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Fault is one set of DROP rules a Drop, Partition, PartitionPort or Loss
// added. Heal removes exactly those rules; other faults stay.
type Fault struct {
	n     *Network
	id    string // "f1", unique in its network
	port  int    // the one TCP port its rules match, 0 for all traffic
	rules []rule

	mu     sync.Mutex
	healed bool
	final  Evidence // the evidence at Heal
}

// rule drops packets from node from at node to, in to's namespace:
// INPUT is where a packet is dropped once, whichever socket sent it, and
// where its counter means "arrived and was dropped".
type rule struct {
	from, to string
	spec     string // the rule after "-A DC-FAULTS "
	tag      string // its comment, how Evidence finds its counter
}

// Drop drops every packet from each node of from to each node of to
// (one way: to's packets to from still arrive; over TCP that is enough
// to stop new connections both ways, since the handshake's replies are
// lost). A node in both lists is not cut off from itself.
func (n *Network) Drop(ctx context.Context, from, to []string) (*Fault, error) {
	return n.add(ctx, "drop", pairs(from, to), match{})
}

// DropPairs drops every packet from p[0] to p[1] for each pair p, as one
// Fault: the shapes no from and to lists describe, such as Jepsen's
// majorities ring, where each node hears a different majority.
func (n *Network) DropPairs(ctx context.Context, ps [][2]string) (*Fault, error) {
	return n.add(ctx, "drop", dedupe(ps), match{})
}

// Partition cuts each group off from every other, both ways, as one
// Fault; nodes in no group keep talking to everyone (Jepsen's shapes:
// isolate one node is Partition([]string{a}, rest), halves two groups,
// a bridge two groups and a node in neither).
func (n *Network) Partition(ctx context.Context, groups ...[]string) (*Fault, error) {
	return n.add(ctx, "partition", between(groups), match{})
}

// PartitionPort is Partition for one TCP port alone: each group is cut
// off from every other's connections to that port, and from the replies
// of that port's listener to connections made before the cut, while
// every other port still connects. Every node can listen on the same
// port, each alone in its namespace, so the port names one listener
// cluster-wide: a Kafka cluster's inter-broker listener, say, whose cut
// stops replication between brokers that still reach their controller
// quorum (another port) and still serve their clients (who come from
// the host, through the links, which no rule between nodes touches).
func (n *Network) PartitionPort(ctx context.Context, port int, groups ...[]string) (*Fault, error) {
	if port <= 0 || port > 65535 {
		return nil, fmt.Errorf("netns: partition of port %d: want 1 to 65535", port)
	}
	return n.add(ctx, "partition", between(groups), match{port: port})
}

// between is every ordered pair of nodes in different groups.
func between(groups [][]string) [][2]string {
	var ps [][2]string
	for i, a := range groups {
		for j, b := range groups {
			if i != j {
				ps = append(ps, pairs(a, b)...)
			}
		}
	}
	return dedupe(ps)
}

// Loss drops each packet from from to to with probability p (iptables'
// statistic match: tc netem is not in every kernel). p must be in (0, 1].
func (n *Network) Loss(ctx context.Context, from, to []string, p float64) (*Fault, error) {
	if !(p > 0 && p <= 1) {
		return nil, fmt.Errorf("netns: loss probability %v: want 0 < p <= 1", p)
	}
	return n.add(ctx, "loss", pairs(from, to), match{p: p})
}

// match narrows a fault's rules: to a random share p of the packets
// (0: all), to TCP packets to or from port (0: every packet).
type match struct {
	p    float64
	port int
}

// spec is the rule's matches after its source, "" for every packet.
func (m match) spec() string {
	var s string
	if m.port > 0 {
		// --ports matches either end: packets to the node's listener
		// and its listener's replies to the other side's connections.
		s += " -p tcp -m multiport --ports " + strconv.Itoa(m.port)
	}
	if m.p > 0 && m.p < 1 {
		s += " -m statistic --mode random --probability " + strconv.FormatFloat(m.p, 'f', -1, 64)
	}
	return s
}

func pairs(from, to []string) [][2]string {
	var out [][2]string
	for _, a := range from {
		for _, b := range to {
			if a != b {
				out = append(out, [2]string{a, b})
			}
		}
	}
	return dedupe(out)
}

func dedupe(ps [][2]string) [][2]string {
	var out [][2]string
	for _, p := range ps {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

func (n *Network) add(ctx context.Context, kind string, ps [][2]string, m match) (*Fault, error) {
	if len(ps) == 0 {
		return nil, fmt.Errorf("netns: %s: no pair of distinct nodes", kind)
	}
	for _, pr := range ps {
		for _, node := range pr {
			if _, ok := n.index[node]; !ok {
				return nil, fmt.Errorf("netns: %s: %w %q", kind, errNoSuchNode, node)
			}
		}
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, fmt.Errorf("netns: %s: network %s closed", kind, n.id)
	}
	n.nextFault++
	f := &Fault{n: n, id: "f" + strconv.Itoa(n.nextFault), port: m.port}
	n.mu.Unlock()

	for _, pr := range ps {
		tag := "deliverycheck:" + f.id + ":" + pr[0] + ">" + pr[1]
		spec := "-s " + n.Addr(pr[0]).String() + "/32 -m comment --comment " + tag + m.spec() + " -j DROP"
		f.rules = append(f.rules, rule{from: pr[0], to: pr[1], spec: spec, tag: tag})
	}
	// One iptables-restore per namespace: its rules go in together.
	byNS := f.byNamespace()
	done := make([]bool, len(byNS))
	err := parallel(len(byNS), func(i int) error {
		if err := n.restoreIn(ctx, byNS[i].to, "-A", byNS[i].rules); err != nil {
			return err
		}
		done[i] = true
		return nil
	})
	if err != nil {
		// Take back what went in: no half-applied fault stays.
		for i, ok := range done {
			if ok {
				_ = n.restoreIn(context.WithoutCancel(ctx), byNS[i].to, "-D", byNS[i].rules)
			}
		}
		return nil, fmt.Errorf("netns: %s %s: %w", kind, f, err)
	}
	n.mu.Lock()
	n.open[f] = struct{}{}
	n.mu.Unlock()
	n.log.Debug("fault on", "network", n.id, "fault", f.id, "kind", kind, "pairs", f.String())
	return f, nil
}

type nsRules struct {
	to    string
	rules []rule
}

// byNamespace groups the rules by the node whose namespace holds them,
// in a fixed order.
func (f *Fault) byNamespace() []nsRules {
	var out []nsRules
	for _, r := range f.rules {
		i := slices.IndexFunc(out, func(g nsRules) bool { return g.to == r.to })
		if i < 0 {
			out = append(out, nsRules{to: r.to})
			i = len(out) - 1
		}
		out[i].rules = append(out[i].rules, r)
	}
	return out
}

// restoreIn appends (op "-A") or deletes ("-D") rules in node's
// namespace, all or none.
func (n *Network) restoreIn(ctx context.Context, node, op string, rules []rule) error {
	var b strings.Builder
	b.WriteString("*filter\n")
	for _, r := range rules {
		b.WriteString(op + " " + faultChain + " " + r.spec + "\n")
	}
	b.WriteString("COMMIT\n")
	_, err := n.run(ctx, b.String(), n.inNS(n.Namespace(node), n.restore, "--noflush")...)
	return err
}

// String lists the fault's pairs, and its port if it has one:
// "f2 a→b b→a", "f3 tcp/9093 a→b".
func (f *Fault) String() string {
	var b strings.Builder
	b.WriteString(f.id)
	if f.port > 0 {
		b.WriteString(" tcp/" + strconv.Itoa(f.port))
	}
	for _, r := range f.rules {
		b.WriteString(" " + r.from + "→" + r.to)
	}
	return b.String()
}

// Evidence reads the packet counters of the fault's rules: how many
// packets each pair's rule has dropped so far. After Heal it is the
// evidence read at Heal.
func (f *Fault) Evidence(ctx context.Context) (Evidence, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.healed {
		return f.final, nil
	}
	return f.read(ctx)
}

func (f *Fault) read(ctx context.Context) (Evidence, error) {
	byNS := f.byNamespace()
	counts := make([]map[string]Count, len(byNS))
	err := parallel(len(byNS), func(i int) error {
		out, err := f.n.run(ctx, "", f.n.inNS(f.n.Namespace(byNS[i].to), f.n.ipt, "-w", "-S", faultChain, "-v")...)
		if err != nil {
			return err
		}
		counts[i] = parseCounters(string(out))
		return nil
	})
	if err != nil {
		return Evidence{}, fmt.Errorf("netns: evidence of %s: %w", f.id, err)
	}
	var e Evidence
	for i, g := range byNS {
		for _, r := range g.rules {
			c, ok := counts[i][r.tag]
			if !ok {
				return Evidence{}, fmt.Errorf("netns: evidence of %s: rule %s→%s is gone from %s", f.id, r.from, r.to, f.n.Namespace(g.to))
			}
			c.From, c.To = r.from, r.to
			e.Pairs = append(e.Pairs, c)
		}
	}
	return e, nil
}

// parseCounters reads `iptables -S <chain> -v` lines
// ("-A DC-FAULTS -s 10.160.3.2/32 -m comment --comment TAG -c 12 720 -j DROP")
// into counters by comment.
func parseCounters(out string) map[string]Count {
	m := map[string]Count{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		var tag string
		var c Count
		ok := false
		for i := 0; i < len(f)-1; i++ {
			switch f[i] {
			case "--comment":
				tag = strings.Trim(f[i+1], `"`)
			case "-c":
				if i+2 < len(f) {
					p, err1 := strconv.ParseUint(f[i+1], 10, 64)
					b, err2 := strconv.ParseUint(f[i+2], 10, 64)
					c.Packets, c.Bytes, ok = p, b, err1 == nil && err2 == nil
				}
			}
		}
		if tag != "" && ok {
			m[tag] = c
		}
	}
	return m
}

// Heal removes the fault's rules and returns their counters as read just
// before. Healing a healed fault returns its evidence again.
func (f *Fault) Heal(ctx context.Context) (Evidence, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.healed {
		return f.final, nil
	}
	e, readErr := f.read(ctx)
	byNS := f.byNamespace()
	if err := parallel(len(byNS), func(i int) error {
		return f.n.restoreIn(ctx, byNS[i].to, "-D", byNS[i].rules)
	}); err != nil {
		return e, fmt.Errorf("netns: heal %s: %w", f.id, err)
	}
	f.healed, f.final = true, e
	f.n.mu.Lock()
	delete(f.n.open, f)
	f.n.mu.Unlock()
	f.n.log.Debug("fault healed", "network", f.n.id, "fault", f.id, "evidence", e.String())
	return e, readErr
}

// HealAll heals every open fault, then empties the fault chain in every
// node's namespace, so no rule survives it even if a Heal failed. On a
// closed network there is nothing left to heal.
func (n *Network) HealAll(ctx context.Context) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	open := make([]*Fault, 0, len(n.open))
	for f := range n.open {
		open = append(open, f)
	}
	n.mu.Unlock()
	var errs []error
	for _, f := range open {
		if _, err := f.Heal(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := parallel(len(n.nodes), func(i int) error {
		_, err := n.run(ctx, "", n.inNS(n.Namespace(n.nodes[i]), n.ipt, "-w", "-F", faultChain)...)
		return err
	}); err != nil {
		errs = append(errs, fmt.Errorf("netns: flush %s: %w", faultChain, err))
	}
	return errors.Join(errs...)
}

// Evidence is what a fault's rules dropped: one count per pair of nodes.
type Evidence struct {
	Pairs []Count
}

// Count is the packets and bytes one rule dropped, from From to To.
type Count struct {
	From, To       string
	Packets, Bytes uint64
}

// Packets is the total of packets dropped.
func (e Evidence) Packets() uint64 {
	var t uint64
	for _, c := range e.Pairs {
		t += c.Packets
	}
	return t
}

// String says it the way a fault record does:
// "12 packets dropped (a→b 7, b→a 5)".
func (e Evidence) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d packets dropped", e.Packets())
	for i, c := range e.Pairs {
		if i == 0 {
			b.WriteString(" (")
		} else {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s→%s %d", c.From, c.To, c.Packets)
		if i == len(e.Pairs)-1 {
			b.WriteString(")")
		}
	}
	return b.String()
}
