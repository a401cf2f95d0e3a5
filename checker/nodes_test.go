package checker

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/deliverycheck/deliverycheck/history"
)

// spans renders a result's node time line as "row: state start-end" lines
// (seconds), one per span, rows in the result's order.
func spans(r *Result) []string {
	var out []string
	for _, n := range r.Nodes {
		if n.LeaderChanges > 0 {
			out = append(out, fmt.Sprintf("%s: %d leader changes", n.Name, n.LeaderChanges))
		}
		for _, s := range n.Spans {
			out = append(out, fmt.Sprintf("%s: %s %g-%g", n.Name, s.State, float64(s.StartNS)/1e9, float64(s.EndNS)/1e9))
		}
	}
	return out
}

func leaderOp(b *builder, t int64, node string) *builder {
	return b.at(t, "harness", history.OK, history.Leader, history.Value{Target: node, Detail: "partition 0 of run.events"})
}

func faultOps(b *builder, t0, t1 int64, kind, target string) *builder {
	v := history.Value{Fault: kind, Target: target, Detail: "at 1s: " + kind + " " + target}
	b.at(t0, "harness", history.Invoke, history.Fault, v)
	return b.at(t1, "harness", history.OK, history.Fault, v)
}

// TestNodes pins the time line on small histories: which row each op
// lands on, and when each span ends.
func TestNodes(t *testing.T) {
	const s = int64(1e9)
	crash := func(b *builder, at int64, target, kind string) *builder {
		return b.at(at, "harness", history.Info, history.Crash, history.Value{Target: target, Fault: kind, Detail: "kill -9 by the nemesis"})
	}
	restart := func(b *builder, at int64, target string) *builder {
		return b.at(at, "harness", history.OK, history.Restart, history.Value{Target: target})
	}
	tests := []struct {
		name string
		h    func(b *builder) *builder
		want []string
	}{
		{
			// The leader is killed; the sampler sees kafka-2 take over
			// before the heal; the kill's window is on the node that led
			// when it started.
			name: "the leader killed, and a new one",
			h: func(b *builder) *builder {
				leaderOp(b, 0, "kafka-1")
				b.at(s, "harness", history.Invoke, history.Fault, history.Value{Fault: "kill", Target: "kafka:leader"})
				crash(b, s+s/20, "kafka-1", "kill")
				leaderOp(b, 3*s/2, "kafka-2")
				restart(b, 4*s, "kafka-1")
				return b.at(4*s, "harness", history.OK, history.Fault, history.Value{Fault: "kill", Target: "kafka:leader"}).at(6*s, "harness", history.OK, history.Drain, history.Value{})
			},
			want: []string{"kafka: 1 leader changes", "kafka-1: leader 0-1.5", "kafka-1: kill 1-4", "kafka-1: down 1.05-4", "kafka-2: leader 1.5-6"},
		},
		{
			// The crash op of the failover names the service, and is
			// recorded after the sampler saw postgres-1 promoted: the
			// primary it killed led when the window started.
			name: "a failover kills the primary of its window's start",
			h: func(b *builder) *builder {
				b.at(0, "harness", history.OK, history.Leader, history.Value{Target: "postgres-0", Detail: "primary"})
				b.at(3*s, "harness", history.Invoke, history.Fault, history.Value{Fault: FaultFailover, Target: "postgres"})
				b.at(3*s+s/10, "harness", history.OK, history.Leader, history.Value{Target: "postgres-1", Detail: "primary"})
				crash(b, 3*s+s/5, "postgres", FaultFailover)
				restart(b, 5*s, "postgres")
				return b.at(5*s, "harness", history.OK, history.Fault, history.Value{Fault: FaultFailover, Target: "postgres"})
			},
			want: []string{"postgres: 1 leader changes", "postgres: failover 3-5", "postgres-0: leader 0-3.1", "postgres-0: down 3.2-5", "postgres-1: leader 3.1-5"},
		},
		{
			// A rolling restart records each node's stop (restart
			// invoke) and return (ok): the node is down in between,
			// inside the roll's window on the service's row.
			name: "a rolling restart takes each node down in turn",
			h: func(b *builder) *builder {
				v := history.Value{Fault: "roll", Target: "kafka", Detail: "at 1s: roll broker for 25s"}
				b.at(s, "harness", history.Invoke, history.Fault, v)
				for i, n := range []string{"kafka-0", "kafka-1"} {
					at := int64(1+3*i) * s
					b.at(at, "harness", history.Invoke, history.Restart, history.Value{Target: n, Fault: "roll", Detail: "clean stop"})
					restart(b, at+2*s, n)
				}
				return b.at(7*s, "harness", history.OK, history.Fault, v)
			},
			want: []string{"kafka: roll 1-7", "kafka-0: down 1-3", "kafka-1: down 4-6"},
		},
		{
			name: "no leader while the lookup fails, then the same one again: no change",
			h: func(b *builder) *builder {
				leaderOp(b, 0, "rabbitmq-0")
				b.at(2*s, "harness", history.Fail, history.Leader, history.Value{Target: "rabbitmq", Error: "no leader a majority of nodes agrees on"})
				leaderOp(b, 3*s, "rabbitmq-0")
				return b.at(4*s, "harness", history.OK, history.Drain, history.Value{})
			},
			want: []string{"rabbitmq: no-leader 2-3", "rabbitmq-0: leader 0-2", "rabbitmq-0: leader 3-4"},
		},
		{
			// An older history: no leader ops. The kill of the leader
			// crashed kafka-1, so that is the node it hit.
			name: "no leader ops: the crash names the leader hit",
			h: func(b *builder) *builder {
				b.at(s, "harness", history.Invoke, history.Fault, history.Value{Fault: "kill", Target: "kafka:leader"})
				crash(b, s+s/20, "kafka-1", "kill")
				restart(b, 4*s, "kafka-1")
				return b.at(4*s, "harness", history.OK, history.Fault, history.Value{Fault: "kill", Target: "kafka:leader"})
			},
			want: []string{"kafka-1: kill 1-4", "kafka-1: down 1.05-4"},
		},
		{
			name: "a pause of the leader nobody can name stays on its target's row",
			h: func(b *builder) *builder {
				return faultOps(b, s, 2*s, "pause", "kafka:leader")
			},
			want: []string{"kafka:leader: pause 1-2"},
		},
		{
			name: "workers are not nodes; a split is its service's; a node never restarted is down to the end",
			h: func(b *builder) *builder {
				crash(b, s/2, "relay-0", "kill")
				restart(b, s, "relay-0")
				faultOps(b, s, 3*s, "split", "kafka")
				faultOps(b, s, 2*s, "isolate", "kafka-2")
				crash(b, 2*s, "kafka-0", "kill")
				return b.at(7*s, "harness", history.OK, history.Drain, history.Value{})
			},
			want: []string{"kafka: split 1-3", "kafka-0: down 2-7", "kafka-2: isolate 1-2"},
		},
		{
			name: "a single server killed and restarted",
			h: func(b *builder) *builder {
				b.at(s, "harness", history.Invoke, history.Fault, history.Value{Fault: "kill", Target: "postgres"})
				crash(b, s, "postgres", "kill")
				restart(b, 2*s, "postgres")
				return b.at(2*s, "harness", history.OK, history.Fault, history.Value{Fault: "kill", Target: "postgres"})
			},
			want: []string{"postgres: down 1-2", "postgres: kill 1-2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.h(new(builder)).h
			for _, shards := range []int{1, 3} {
				r := Check(h, Options{Shards: shards})
				if got := spans(r); !slices.Equal(got, tt.want) {
					t.Fatalf("%d shards:\n%s\nwant\n%s", shards, strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
				}
			}
		})
	}
}

// TestPropertyNodes: on random crash, restart, leader and fault ops over
// three nodes and a worker, every span lies within the history and
// starts no later than it ends; a service's leader and no-leader spans
// tile the time from its first leader op to the end without overlap;
// each row's spans are in start order; workers never get a row; and the
// time line does not depend on the number of shards.
func TestPropertyNodes(t *testing.T) {
	targets := []string{"kafka-0", "kafka-1", "kafka-2", "kafka", "kafka:leader", "relay-0"}
	rapid.Check(t, func(t *rapid.T) {
		b := new(builder)
		var now int64
		for range rapid.IntRange(0, 30).Draw(t, "ops") {
			now += rapid.Int64Range(0, 1e9).Draw(t, "dt")
			target := rapid.SampledFrom(targets).Draw(t, "target")
			switch rapid.IntRange(0, 4).Draw(t, "f") {
			case 0:
				b.at(now, "harness", history.Info, history.Crash, history.Value{Target: target, Fault: "kill"})
			case 1:
				b.at(now, "harness", history.OK, history.Restart, history.Value{Target: target})
			case 2:
				if rapid.Bool().Draw(t, "leader-fail") {
					b.at(now, "harness", history.Fail, history.Leader, history.Value{Target: "kafka", Error: "timeout"})
				} else {
					b.at(now, "harness", history.OK, history.Leader, history.Value{Target: rapid.SampledFrom(targets[:3]).Draw(t, "leader")})
				}
			default:
				kind := rapid.SampledFrom([]string{"kill", "pause", "isolate", "split"}).Draw(t, "kind")
				faultOps(b, now, now+rapid.Int64Range(0, 3e9).Draw(t, "len"), kind, target)
			}
		}
		h := b.h
		slices.SortStableFunc(h, func(a, b history.Op) int { return int(a.Time - b.Time) })
		for i := range h {
			h[i].Index = int64(i)
		}
		r := Check(h, Options{Shards: 1})
		if r3 := Check(h, Options{Shards: 3}); !slices.Equal(spans(r), spans(r3)) {
			t.Fatalf("shards change the time line:\n%v\n%v", spans(r), spans(r3))
		}
		var end int64
		if len(h) > 0 {
			end = h[len(h)-1].Time
		}
		var firstLeader int64 = -1
		for _, op := range h {
			if op.F == history.Leader {
				firstLeader = op.Time
				break
			}
		}
		var tiles [][2]int64
		for _, n := range r.Nodes {
			if _, _, ok := serverOf(n.Name); !ok {
				t.Fatalf("row %q is no server's", n.Name)
			}
			for i, s := range n.Spans {
				if s.StartNS < 0 || s.StartNS > s.EndNS || s.EndNS > end {
					t.Fatalf("%s: span %+v outside [0, %d]", n.Name, s, end)
				}
				if i > 0 && n.Spans[i-1].StartNS > s.StartNS {
					t.Fatalf("%s: spans out of order: %+v", n.Name, n.Spans)
				}
				if s.State == NodeLeader || s.State == NodeNoLeader {
					tiles = append(tiles, [2]int64{s.StartNS, s.EndNS})
				}
			}
		}
		if firstLeader < 0 {
			if len(tiles) > 0 {
				t.Fatalf("leader spans without leader ops: %v", tiles)
			}
			return
		}
		// Equal starts: the empty span (two leader ops at one time)
		// first.
		slices.SortFunc(tiles, func(a, b [2]int64) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
		at := firstLeader
		for _, tl := range tiles {
			if tl[0] != at {
				t.Fatalf("leader spans %v do not tile [%d, %d]", tiles, firstLeader, end)
			}
			at = tl[1]
		}
		if at != end {
			t.Fatalf("leader spans %v end at %d, not %d", tiles, at, end)
		}
	})
}
