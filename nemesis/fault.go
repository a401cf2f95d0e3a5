package nemesis

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/internal/choice"
)

// Kind is what a fault does.
type Kind string

// The fault kinds, grouped in families for random schedules.
const (
	// Process family: servers (postgres, kafka, rabbitmq, broker) and
	// workers (producer-0, relay-0, consumer-inventory-0, ...).
	Kill    Kind = "kill"    // SIGKILL, then start again after For
	Pause   Kind = "pause"   // SIGSTOP for For, then SIGCONT
	Restart Kind = "restart" // graceful stop and start

	// Failpoint family: arm a failpoint term in a worker.
	Failpoint Kind = "failpoint"

	// Network family, on a service's link (postgres, kafka, rabbitmq,
	// broker), optionally in one direction.
	Partition Kind = "partition"  // data stops flowing, connections hang
	Refuse    Kind = "refuse"     // connections closed and refused
	Latency   Kind = "latency"    // delay ± jitter
	Bandwidth Kind = "bandwidth"  // rate cap in KB/s
	ResetPeer Kind = "reset-peer" // new connections reset
	LimitData Kind = "limit-data" // connections closed after N bytes
	SlowClose Kind = "slow-close" // closing delayed

	// Nodes family, between the nodes of a replicated service (broker
	// nodes: true partitions in their network namespaces, cluster/netns).
	// Clients still reach every node through its link.
	Isolate Kind = "isolate" // one node cut off from the others
	Split   Kind = "split"   // a service's nodes split by a shape
	// CutReplication cuts one node off from the others' replication
	// alone (a Kafka node's inter-broker listener, both ways): it still
	// reaches the controller quorum, so it keeps its leaderships, and
	// clients still reach it, while its followers stop fetching and
	// leave the ISR. No family: random schedules do not draw it, as it
	// exists on Kafka alone.
	CutReplication Kind = "cut-replication"
	// Wipe replaces a node of a replicated service with one whose disk
	// is empty, as when a pod is rescheduled without its volume: kill -9
	// and its data dir emptied when the fault starts, a rejoin as a new
	// member of its cluster at the heal (cluster.Wiper). No family:
	// random schedules do not draw it, as what it destroys is a setting's
	// to lose (a topic of replication factor 1, a classic queue), not a
	// fault a correct pipeline must take at random.
	Wipe Kind = "wipe"
	// Failover kills the database's primary, promotes its standby and
	// points the database link at it (postgres.standby); its heal makes
	// the deposed primary a standby of the new one.
	Failover Kind = "failover"
	// Roll is a rolling restart of a replicated service: each node in
	// turn stopped cleanly and started again, the next one only once the
	// service is healthy again (cluster.HealthChecker), all within the
	// step's window ("at 1s: roll broker for 60s"), which is a deadline,
	// not a hold: the fault ends when the last node is back. Not drawn
	// by random schedules (it outlasts their intervals).
	Roll Kind = "roll"
	// Zombie makes a zombie of a transactional processor (issue 23): it
	// is paused (SIGSTOP) with a transaction open (its outputs written,
	// its commit not sent: failpoint
	// processor.after-produce-before-commit), a replacement with its
	// transactional.id is started in its place (processor-0.r1 for
	// processor-0), and at the end of the window it is resumed: its late
	// commit must be fenced. It then exits for good, never restarted (it
	// was replaced, like a deleted pod), and is killed if it still lives
	// after a while. The window is how long it stays paused. No family:
	// random schedules do not draw it (it needs a stage).
	Zombie Kind = "zombie"
	// Intrude runs the intruder (issue 24, docs/security.md): a process
	// with broker credentials of its own publishes well-formed forged
	// events straight to the events exchange or topic, bypassing the
	// outbox: per kind (pipeline/intruder) a few messages, each an
	// intrude op. It takes no target and no window ("at 2s: intrude"):
	// it is over once every message has its answer, even past the end of
	// the workload (up to a minute; an interruption cuts it short). No family: random
	// schedules do not draw it (it needs the scenario's security
	// section).
	Intrude Kind = "intrude"

	// The operations of issue 25: steps an operator takes, scheduled in
	// a timeline like faults and recorded like them (evidence on the
	// ok, why not on the fail), none drawn by random schedules. None
	// takes a window.

	// Redrive republishes a subscription's dead letters to it at a
	// limited rate ("at 5s: redrive email at 50/s"; Rate the limit per
	// second) through Env.Redrive, the redriver of the scenario's
	// variants.redrive.
	Redrive Kind = "redrive"
	// DeployFix redeploys a subscription's consumers accepting the new
	// schema version ("at 4s: deploy-fix email") through Env.DeployFix:
	// each stopped cleanly and started again with the fix.
	DeployFix Kind = "deploy-fix"
	// PurgeDLQ purges a subscription's dead-letter queue ("at 5s:
	// purge-dlq email") through Env.PurgeDLQ: what an operator must not
	// do with what failed.
	PurgeDLQ Kind = "purge-dlq"
	// Join starts one more consumer of a subscription ("at 1s: join
	// analytics"), or the first of a late subscription, through
	// Env.Join: its group rebalances.
	Join Kind = "join"
	// Leave stops a consumer worker for good ("at 2s: leave
	// consumer-analytics-1") through Env.Leave: it leaves its group
	// cleanly.
	Leave Kind = "leave"
)

// The shapes of a split, as Jepsen names them.
const (
	// ShapeHalves cuts the nodes into a minority and a majority: the
	// first half of them (rounded down) from the rest.
	ShapeHalves = "halves"
	// ShapeRing leaves every node seeing a majority, each a different
	// one: node i hears only from itself and the next n/2 nodes round
	// the ring (a one-way drop from the others).
	ShapeRing = "ring"
	// ShapeBridge splits the nodes in two halves but for one node in the
	// middle, which still talks to both.
	ShapeBridge = "bridge"
)

// Shapes lists the split shapes.
func Shapes() []string { return []string{ShapeHalves, ShapeRing, ShapeBridge} }

// Families groups kinds for random schedules.
func Families() map[string][]Kind {
	return map[string][]Kind{
		"process":   {Kill, Pause, Restart},
		"failpoint": {Failpoint},
		"network":   {Partition, Refuse, Latency, Bandwidth, ResetPeer, LimitData, SlowClose},
		"nodes":     {Isolate, Split, Failover},
	}
}

// Kinds lists every fault kind.
func Kinds() []Kind {
	return []Kind{Kill, Pause, Restart, Failpoint, Partition, Refuse, Latency, Bandwidth, ResetPeer, LimitData, SlowClose, Isolate, Split, Failover, CutReplication, Roll, Wipe, Zombie, Intrude,
		Redrive, DeployFix, PurgeDLQ, Join, Leave}
}

// operation reports whether k is an operation of issue 25 rather than a
// fault: it takes no window.
func (k Kind) operation() bool {
	switch k {
	case Redrive, DeployFix, PurgeDLQ, Join, Leave:
		return true
	}
	return false
}

// runsItsWindow reports whether a fault of kind k runs its whole course
// while it is injected, bounded by its step's window (a step's "for" is
// then its deadline, and the fault ends as soon as it is done).
func (k Kind) runsItsWindow() bool { return k == Roll }

// finishesOnceBegun reports whether a fault of kind k, once its invoke is
// recorded, is carried out to its end even when the run's window closes
// meanwhile (bounded by the heal timeout instead, as an operation is by
// operationContext; an interruption still cuts it short). A graceful
// restart, a failover or a wipe cut halfway leaves a server stopped and
// a result that only says the fault "did not take effect", although it
// did: a RabbitMQ restart at 2s of a 16s run took longer than the run on
// a loaded CI machine.
func (k Kind) finishesOnceBegun() bool { return k == Restart || k == Failover || k == Wipe }

// ParseKind checks a kind name and lists the valid ones if wrong.
func ParseKind(s string) (Kind, error) {
	return choice.Parse(s, Kinds(), "nemesis: unknown fault")
}

// Fault is one fault, with its parameters. Its zero values mean defaults.
type Fault struct {
	Kind Kind `json:"kind" yaml:"kind"`
	// Target is a service (postgres, kafka, rabbitmq, or "broker" for the
	// run's broker), a node of a replicated one (kafka-1, broker-0, or
	// broker:leader for the node leading the run's first partition or
	// queue when the fault starts), or a worker (producer-0, relay-0,
	// consumer-email-0; a trailing * matches several, e.g. consumer-*).
	Target string `json:"target" yaml:"target"`
	// Shape of a split: halves (the default), ring or bridge.
	Shape string `json:"shape,omitempty" yaml:"shape,omitempty"`
	// Direction of a network fault: upstream (client → server),
	// downstream, or both (default).
	Direction string `json:"direction,omitempty" yaml:"direction,omitempty"`
	// Latency and Jitter for latency; Delay for slow-close and the time
	// before a reset for reset-peer.
	Latency time.Duration `json:"latency,omitempty" yaml:"latency,omitempty"`
	Jitter  time.Duration `json:"jitter,omitempty" yaml:"jitter,omitempty"`
	Delay   time.Duration `json:"delay,omitempty" yaml:"delay,omitempty"`
	// Rate is the bandwidth cap in KB/s, or a redrive's limit in
	// messages per second; Bytes the limit-data size.
	Rate  int64 `json:"rate,omitempty" yaml:"rate,omitempty"`
	Bytes int64 `json:"bytes,omitempty" yaml:"bytes,omitempty"`
	// Term is the failpoint term to arm, e.g.
	// "consumer.after-commit-before-ack=kill(once)".
	Term string `json:"term,omitempty" yaml:"term,omitempty"`
}

// String renders f the way ParseStep reads it, e.g. "partition kafka upstream".
func (f Fault) String() string {
	parts := []string{string(f.Kind)}
	if f.Kind == Intrude {
		return string(Intrude)
	}
	if f.Kind == Failpoint {
		parts = append(parts, f.Target, f.Term)
		return strings.Join(parts, " ")
	}
	if f.Kind == Redrive {
		return fmt.Sprintf("%s %s at %d/s", f.Kind, f.Target, f.Rate)
	}
	parts = append(parts, f.Target)
	if f.Kind == Split && f.Shape != "" && f.Shape != ShapeHalves {
		parts = append(parts, f.Shape)
	}
	if f.Direction != "" && f.Direction != "both" {
		parts = append(parts, f.Direction)
	}
	switch f.Kind {
	case Latency:
		parts = append(parts, f.Latency.String())
		if f.Jitter > 0 {
			parts = append(parts, "±"+f.Jitter.String())
		}
	case Bandwidth:
		parts = append(parts, strconv.FormatInt(f.Rate, 10)+"KB/s")
	case LimitData:
		parts = append(parts, strconv.FormatInt(f.Bytes, 10)+"B")
	case SlowClose, ResetPeer:
		if f.Delay > 0 {
			parts = append(parts, f.Delay.String())
		}
	}
	return strings.Join(parts, " ")
}

// Step is one fault in a schedule: it starts At (since the workload
// began) and is healed For later (0: instant faults such as restart or
// failpoint arming, or a kill whose target restarts at once).
type Step struct {
	At    time.Duration `json:"at" yaml:"at"`
	Fault Fault         `json:"fault" yaml:"fault"`
	For   time.Duration `json:"for,omitempty" yaml:"for,omitempty"`
	// Reason is recorded as value.reason on the step's fault ops:
	// [ReasonRandom] for a step [Random] drew, "" for a scenario's own
	// timeline. The checker judges the two differently: a scheduled
	// fault that did not bite leaves the run unknown, a random one is
	// only reported (docs/history.md). It is not part of the step's text.
	Reason string `json:"reason,omitempty" yaml:"-"`
}

// ReasonRandom is the [Step.Reason] of every step of a random schedule.
const ReasonRandom = history.ReasonRandom

// String renders s as ParseStep reads it.
func (s Step) String() string {
	out := "at " + s.At.String() + ": " + s.Fault.String()
	if s.For > 0 {
		out += " for " + s.For.String()
	}
	return out
}

var stepRe = regexp.MustCompile(`^at\s+(\S+)\s*:\s*(.+?)(?:\s+for\s+(\S+))?$`)

// ParseStep reads a step such as
//
//	at 10s: partition kafka for 5s
//	at 2s: partition rabbitmq upstream for 3s
//	at 5s: latency postgres 100ms ±20ms for 10s
//	at 1s: kill relay-0
//	at 3s: kill broker for 2s
//	at 4s: pause consumer-* for 1s
//	at 1s: failpoint consumer-inventory-0 consumer.after-commit-before-ack=kill(once)
//	at 6s: bandwidth kafka downstream 64KB/s for 5s
//	at 2s: kill broker:leader for 3s
//	at 3s: isolate kafka-1 for 5s
//	at 1s: cut-replication broker:leader for 5s
//	at 3s: wipe broker:leader for 2s
//	at 3s: split broker ring for 5s
//	at 1s: roll broker for 60s
//	at 2s: zombie processor-0 for 6s
//	at 2s: intrude
//	at 4s: deploy-fix email
//	at 5s: redrive email at 50/s
//	at 5s: purge-dlq email
//	at 1s: join analytics
//	at 2s: leave consumer-analytics-1
//
// "→" in a target (relay→kafka) names the link to the service after it:
// links are per service, shared by every client of it.
func ParseStep(s string) (Step, error) {
	m := stepRe.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return Step{}, fmt.Errorf("nemesis: cannot read step %q (want \"at <time>: <fault> <target> [args] [for <duration>]\")", s)
	}
	at, err := time.ParseDuration(m[1])
	if err != nil {
		return Step{}, fmt.Errorf("nemesis: step %q: bad time %q: %w", s, m[1], err)
	}
	var dur time.Duration
	if m[3] != "" {
		if dur, err = time.ParseDuration(m[3]); err != nil {
			return Step{}, fmt.Errorf("nemesis: step %q: bad duration %q: %w", s, m[3], err)
		}
	}
	f, err := parseFault(strings.Fields(m[2]))
	if err != nil {
		return Step{}, fmt.Errorf("nemesis: step %q: %w", s, err)
	}
	if f.Kind.runsItsWindow() && dur <= 0 {
		return Step{}, fmt.Errorf("nemesis: step %q: %s needs a window to finish in, e.g. \"at %s: %s %s for 60s\"", s, f.Kind, m[1], f.Kind, f.Target)
	}
	if f.Kind == Intrude && dur > 0 {
		return Step{}, fmt.Errorf("nemesis: step %q: intrude takes no window: it is over once the broker answered every message (\"at %s: intrude\")", s, m[1])
	}
	if f.Kind.operation() && dur > 0 {
		return Step{}, fmt.Errorf("nemesis: step %q: %s takes no window: it is over once it is done (\"at %s: %s\")", s, f.Kind, m[1], f)
	}
	if f.Kind == Zombie && dur <= 0 {
		return Step{}, fmt.Errorf("nemesis: step %q: zombie needs a window, how long the zombie stays paused, e.g. \"at %s: zombie %s for 6s\"", s, m[1], f.Target)
	}
	return Step{At: at, Fault: f, For: dur}, nil
}

func parseFault(w []string) (Fault, error) {
	if len(w) > 0 && w[0] == string(Intrude) {
		if len(w) > 1 {
			return Fault{}, fmt.Errorf("intrude takes no target or arguments (%q): the intruder publishes to the run's broker", strings.Join(w[1:], " "))
		}
		return Fault{Kind: Intrude}, nil
	}
	if len(w) < 2 {
		return Fault{}, fmt.Errorf("want a fault and a target")
	}
	k, err := ParseKind(w[0])
	if err != nil {
		return Fault{}, err
	}
	target := w[1]
	if i := strings.LastIndex(target, "→"); i >= 0 {
		target = target[i+len("→"):]
	} else if i := strings.LastIndex(target, "->"); i >= 0 {
		target = target[i+2:]
	}
	f := Fault{Kind: k, Target: target}
	args := w[2:]
	if k == Zombie && strings.Contains(target, "*") {
		return Fault{}, fmt.Errorf("zombie takes one processor, not a pattern (%q)", target)
	}
	if k == Redrive {
		// redrive <subscription> at <n>/s
		if len(args) != 2 || args[0] != "at" || !strings.HasSuffix(args[1], "/s") {
			return Fault{}, fmt.Errorf("redrive wants a subscription and a rate: \"redrive %s at 50/s\"", target)
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(args[1], "/s"), 10, 64)
		if err != nil || n < 1 {
			return Fault{}, fmt.Errorf("bad redrive rate %q: want a whole number of messages per second, at least 1, e.g. 50/s", args[1])
		}
		f.Rate = n
		return f, nil
	}
	if k.operation() && len(args) > 0 {
		return Fault{}, fmt.Errorf("%s takes a target and nothing else (%q)", k, strings.Join(args, " "))
	}
	if k == Failpoint {
		if len(args) != 1 {
			return Fault{}, fmt.Errorf("failpoint wants a worker and one term")
		}
		f.Term = args[0]
		return f, nil
	}
	network := slices.Contains(Families()["network"], k)
	for _, a := range args {
		if k == Split && slices.Contains(Shapes(), a) {
			if a != ShapeHalves { // the default, written as nothing
				f.Shape = a
			}
			continue
		}
		// An argument the kind has no use for is an error: kept, it
		// would be dropped from the step's text and change the fault
		// after a round trip through a scenario file.
		switch {
		case a == "upstream" || a == "downstream" || a == "both":
			if !network {
				return Fault{}, fmt.Errorf("%s takes no direction (%q): only network faults do", k, a)
			}
			f.Direction = a
		case strings.HasPrefix(a, "±") || strings.HasPrefix(a, "+-"):
			d, err := time.ParseDuration(strings.TrimPrefix(strings.TrimPrefix(a, "±"), "+-"))
			if err != nil {
				return Fault{}, fmt.Errorf("bad jitter %q", a)
			}
			if k != Latency {
				return Fault{}, fmt.Errorf("%s takes no jitter (%q): only latency does", k, a)
			}
			f.Jitter = d
		case strings.HasSuffix(a, "KB/s"):
			n, err := strconv.ParseInt(strings.TrimSuffix(a, "KB/s"), 10, 64)
			if err != nil {
				return Fault{}, fmt.Errorf("bad rate %q", a)
			}
			if k != Bandwidth {
				return Fault{}, fmt.Errorf("%s takes no rate (%q): only bandwidth does", k, a)
			}
			f.Rate = n
		case strings.HasSuffix(a, "B") && k == LimitData:
			n, err := strconv.ParseInt(strings.TrimSuffix(a, "B"), 10, 64)
			if err != nil {
				return Fault{}, fmt.Errorf("bad size %q", a)
			}
			f.Bytes = n
		default:
			d, err := time.ParseDuration(a)
			if err != nil {
				return Fault{}, fmt.Errorf("unexpected %q", a)
			}
			switch k {
			case Latency:
				f.Latency = d
			case SlowClose, ResetPeer:
				f.Delay = d
			default:
				return Fault{}, fmt.Errorf("%s takes no duration (%q; for how long is \"for <duration>\")", k, a)
			}
		}
	}
	return f, nil
}
