package checker

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/deliverycheck/deliverycheck/history"
)

// posHistory builds positions records in history order.
type posHistory struct {
	recs []posRec
	log  []brokerRec
}

func (h *posHistory) add(rc posRec) {
	rc.pos = int64(len(h.recs))
	rc.time = rc.pos * 1000
	if rc.sub == "" {
		rc.sub = "inv"
	}
	h.recs = append(h.recs, rc)
}

func (h *posHistory) assign(proc string, p int32) {
	h.add(posRec{kind: posAssigned, process: proc, partition: p})
}

func (h *posHistory) revoke(proc string, p int32) {
	h.add(posRec{kind: posRevoked, process: proc, partition: p})
}

func (h *posHistory) deliver(proc string, p int32, off, attempt int64) {
	h.add(posRec{kind: posDeliver, process: proc, partition: p, offset: off, attempt: attempt, event: fmt.Sprintf("e%d-%d", p, off)})
}

func (h *posHistory) judge() ([]SubscriptionPositions, []posFinding) {
	stats, fs, _ := judgePositions(slices.Values(h.recs), newBrokerLog(h.log, true))
	return stats, fs
}

func logOf(partitions int32, n int64) []brokerRec {
	var out []brokerRec
	for p := range partitions {
		for o := range n {
			out = append(out, brokerRec{partition: p, offset: o})
		}
	}
	return out
}

func TestPositionsFindings(t *testing.T) {
	cases := []struct {
		name   string
		build  func(h *posHistory)
		want   Kind // "" for none
		detail string
	}{
		{"in order", func(h *posHistory) {
			h.assign("c0", 0)
			for o := int64(3); o < 8; o++ {
				h.deliver("c0", 0, o, 1)
			}
		}, "", ""},
		{"skip", func(h *posHistory) {
			h.assign("c0", 0)
			h.deliver("c0", 0, 3, 1)
			h.deliver("c0", 0, 6, 1)
		}, PollSkip, "offset 4, which the broker's log holds, was skipped"},
		{"skip over another subscription's redrive copy", func(h *posHistory) {
			h.log[4].consumer, h.log[5].consumer = "email", "email"
			h.assign("c0", 0)
			h.deliver("c0", 0, 3, 1)
			h.deliver("c0", 0, 6, 1)
		}, "", ""},
		{"back without a redelivery", func(h *posHistory) {
			h.assign("c0", 0)
			h.deliver("c0", 0, 3, 1)
			h.deliver("c0", 0, 4, 1)
			h.deliver("c0", 0, 3, 1)
		}, NonmonotonicPoll, "going back without a redelivery"},
		{"retry of a batch", func(h *posHistory) {
			h.assign("c0", 0)
			h.deliver("c0", 0, 3, 1)
			h.deliver("c0", 0, 4, 1)
			h.deliver("c0", 0, 5, 1)
			h.deliver("c0", 0, 3, 2) // Retry: 3 again, then the rest of its batch
			h.deliver("c0", 0, 4, 1)
			h.deliver("c0", 0, 5, 1)
		}, "", ""},
		{"a new session starts anywhere", func(h *posHistory) {
			h.assign("c0", 0)
			h.deliver("c0", 0, 3, 1)
			h.deliver("c0", 0, 4, 1)
			h.revoke("c0", 0)
			h.assign("c0", 0)
			h.deliver("c0", 0, 2, 1)
			h.assign("c1", 1)
			h.deliver("c1", 1, 9, 1)
		}, "", ""},
		{"a crash ends the sessions", func(h *posHistory) {
			h.assign("c0", 0)
			h.deliver("c0", 0, 5, 1)
			h.add(posRec{kind: posEnd, process: "c0"})
			h.assign("c0", 0)
			h.deliver("c0", 0, 2, 1)
		}, "", ""},
		{"gap the log does not hold", func(h *posHistory) {
			h.log = h.log[:4] // offsets 0-3 of partition 0
			h.assign("c0", 0)
			h.deliver("c0", 0, 3, 1)
			h.deliver("c0", 0, 7, 1)
		}, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := &posHistory{log: logOf(2, 20)}
			c.build(h)
			stats, fs := h.judge()
			if c.want == "" {
				if len(fs) > 0 {
					t.Fatalf("findings %+v, want none", fs)
				}
			} else {
				if len(fs) != 1 || fs[0].kind != c.want {
					t.Fatalf("findings %+v, want one %s", fs, c.want)
				}
				if d := fs[0].detail(); !strings.Contains(d, c.detail) {
					t.Errorf("detail %q, want it to contain %q", d, c.detail)
				}
			}
			if len(stats) != 1 || !stats[0].Judged || stats[0].Sessions == 0 {
				t.Errorf("stats %+v, want inv judged with sessions", stats)
			}
		})
	}
}

func TestPositionsNotJudged(t *testing.T) {
	h := &posHistory{}
	h.deliver("team-0", 0, 3, 1)
	h.deliver("team-0", 0, 9, 1)
	stats, fs, _ := judgePositions(slices.Values(h.recs), nil)
	if len(fs) != 0 || len(stats) != 1 || stats[0].Judged || len(stats[0].ProcessesWithoutAssign) != 1 {
		t.Fatalf("stats %+v findings %+v: want inv listed, not judged, team-0 without assign", stats, fs)
	}
	// A RabbitMQ run: no assign op, no offsets: nothing listed.
	h = &posHistory{}
	h.deliver("consumer-inv-0", 0, 0, 1)
	if stats, _, _ := judgePositions(slices.Values(h.recs), nil); stats != nil {
		t.Fatalf("stats %+v, want none", stats)
	}
}

// TestPositionsProperty: consumers that take over partitions (assign,
// revoke, crash) and poll each in order from wherever their session
// starts, handing records back now and then (a Retry: the record again
// with attempt+1, then the rest of its batch), never show a finding; one
// planted skip or step back is found, and only it.
func TestPositionsProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		const parts, size = 3, 200
		h := &posHistory{log: logOf(parts, size)}
		procs := []string{"c0", "c1"}
		type own struct {
			proc string
			next int64
		}
		owner := map[int32]*own{}
		steps := rapid.IntRange(1, 80).Draw(t, "steps")
		for range steps {
			p := int32(rapid.IntRange(0, parts-1).Draw(t, "partition"))
			o := owner[p]
			switch rapid.IntRange(0, 9).Draw(t, "action") {
			case 0: // moves to a process, starting anywhere committed
				if o != nil {
					h.revoke(o.proc, p)
				}
				proc := rapid.SampledFrom(procs).Draw(t, "proc")
				h.assign(proc, p)
				owner[p] = &own{proc: proc, next: int64(rapid.IntRange(0, size/2).Draw(t, "start"))}
			case 1: // a crash of one process
				proc := rapid.SampledFrom(procs).Draw(t, "crashed")
				h.add(posRec{kind: posEnd, process: proc})
				for q, o := range owner {
					if o.proc == proc {
						delete(owner, q)
					}
				}
			default: // a batch, maybe handed back once
				if o == nil || o.next >= size-10 {
					continue
				}
				n := int64(rapid.IntRange(1, 5).Draw(t, "batch"))
				for i := range n {
					h.deliver(o.proc, p, o.next+i, 1)
				}
				if rapid.Bool().Draw(t, "retry") {
					h.deliver(o.proc, p, o.next, 2)
					for i := int64(1); i < n; i++ {
						h.deliver(o.proc, p, o.next+i, 1)
					}
				}
				o.next += n
			}
		}
		if _, fs := h.judge(); len(fs) != 0 {
			t.Fatalf("correct history: findings %+v", fs)
		}
		// Plant one finding after the history: a fresh session of c0 on
		// partition 0, then a skip or a step back.
		h.assign("c0", 0)
		h.deliver("c0", 0, 10, 1)
		h.deliver("c0", 0, 11, 1)
		want := PollSkip
		if rapid.Bool().Draw(t, "back") {
			want = NonmonotonicPoll
			h.deliver("c0", 0, int64(rapid.IntRange(0, 11).Draw(t, "to")), 1)
		} else {
			h.deliver("c0", 0, int64(rapid.IntRange(13, size-1).Draw(t, "to")), 1)
		}
		if _, fs := h.judge(); len(fs) != 1 || fs[0].kind != want {
			t.Fatalf("planted %s: findings %+v", want, fs)
		}
	})
}

// TestPosRecs: the shards' ops and compact deliveries come out as one
// run in history order, each delivery with its process, subscription and
// event.
func TestPosRecs(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		shards := []*shard{{}, {}, {}}
		pos := rapid.SliceOfDistinct(rapid.Int64Range(0, 1000), func(p int64) int64 { return p }).Draw(t, "pos")
		slices.Sort(pos)
		for i, p := range pos {
			s := shards[rapid.IntRange(0, 2).Draw(t, fmt.Sprintf("shard%d", i))]
			if rapid.Bool().Draw(t, fmt.Sprintf("delivery%d", i)) {
				ei := int32(len(s.events))
				s.events = append(s.events, event{id: fmt.Sprintf("e%d", p)})
				proc := fmt.Sprintf("c%d", p%3)
				s.assigns.deliver(&history.Op{Process: proc, Type: history.OK, F: history.Deliver, Time: p,
					Value: history.Value{Event: "ignored", Consumer: "inv", Offset: p}}, p, ei)
			} else {
				s.assigns.recs = append(s.assigns.recs, posRec{pos: p, kind: posAssigned, process: "a"})
			}
		}
		var got []int64
		for rc := range posRecs(shards) {
			got = append(got, rc.pos)
			if rc.kind == posDeliver && (rc.event != fmt.Sprintf("e%d", rc.pos) || rc.process != fmt.Sprintf("c%d", rc.pos%3) || rc.sub != "inv" || rc.offset != rc.pos || rc.time != rc.pos) {
				t.Fatalf("delivery at %d read back as %+v", rc.pos, rc)
			}
		}
		if !slices.Equal(got, pos) && !(len(got) == 0 && len(pos) == 0) {
			t.Fatalf("merged %v, want %v", got, pos)
		}
	})
}
