package checker

// In flight: what each consumer process has taken and not finished. A
// delivery is in flight in a process from its deliver ok until an op of
// the same process ends it: a settle (settles: apply ok, apply fail as a
// duplicate, skip-stale, dlq) or an apply fail with a reason (a refusal
// handed back to the broker). An apply fail with an error is a transient
// retry: the delivery is still held. A crash of the process ends all it
// held; a delivery taken away without an op (a Kafka partition revoked
// mid-delivery) stays counted until the process settles that event or
// crashes. It counts what the workers took: messages a RabbitMQ client holds
// under its prefetch before a worker takes them have no op.
//
// The shards see the ops of their own events only, so each keeps its
// records ([flightAcc]) and the view sweeps them per process
// ([inFlight]). A record names its event by a hash of its source and id:
// the shard's event index is not known yet where the series see an op.

import (
	"cmp"
	"math"
	"slices"

	"github.com/deliverycheck/deliverycheck/history"
)

// flightKind is what a flight record does.
type flightKind uint8

const (
	flightClose flightKind = iota // ends the event's delivery (sorted first at one time)
	flightOpen                    // a deliver ok
	flightCrash                   // the process crashed: it holds nothing
)

// flightRec is one op that opens or ends a delivery in a process.
type flightRec struct {
	t    int64
	ev   uint32 // hash of the event's source and id; 0 for a crash
	proc int16  // index in flightAcc.procs
	kind flightKind
}

// flightAcc keeps one shard's flight records.
type flightAcc struct {
	procs []flightProc
	index map[string]int16
	last  int16 // the process of the previous record: ops of one come in runs
	recs  []flightRec
}

// flightProc is a process that recorded a delivery, with its
// subscription; a crash's process may have none.
type flightProc struct {
	name, sub string
}

// ends reports whether op ends a delivery in its process.
func ends(op *history.Op) bool {
	return settles(op) || op.F == history.Apply && op.Type == history.Fail && op.Value.Reason != ""
}

// op records op if it opens or ends a delivery, or is a crash.
func (f *flightAcc) op(op *history.Op) {
	v := &op.Value
	switch {
	case op.F == history.Deliver && op.Type == history.OK:
		f.add(op.Time, op.Process, v.Consumer, f.hash(v), flightOpen)
	case op.F == history.Crash && op.Type != history.Invoke:
		f.add(op.Time, cmp.Or(v.Target, op.Process), "", 0, flightCrash)
	case v.Event != "" && ends(op):
		f.add(op.Time, op.Process, v.Consumer, f.hash(v), flightClose)
	}
}

// hash names an event the same in every shard: FNV-1a of its source and
// id. 32 bits keep a record at 16 bytes; a collision would only merge two
// deliveries one process holds at once.
func (f *flightAcc) hash(v *history.Value) uint32 {
	const prime = 16777619
	h := uint32(2166136261)
	for i := range len(v.Source) {
		h = (h ^ uint32(v.Source[i])) * prime
	}
	h = (h ^ 0xff) * prime // a byte no text has, between the two
	for i := range len(v.Event) {
		h = (h ^ uint32(v.Event[i])) * prime
	}
	return h
}

func (f *flightAcc) add(t int64, proc, sub string, ev uint32, kind flightKind) {
	if f.index == nil {
		f.index = map[string]int16{}
	}
	i, ok := f.last, len(f.procs) > 0 && f.procs[f.last].name == proc
	if !ok {
		i, ok = f.index[proc]
	}
	if !ok {
		if len(f.procs) == math.MaxInt16 {
			return // more processes than any run has: the rest are not counted
		}
		i = int16(len(f.procs))
		f.index[proc] = i
		f.procs = append(f.procs, flightProc{name: proc})
	}
	f.last = i
	if f.procs[i].sub == "" && sub != "" {
		f.procs[i].sub = sub
	}
	f.recs = append(f.recs, flightRec{t: t, ev: ev, proc: i, kind: kind})
}

// processFlight is one consumer process's deliveries in flight: the most
// at once, and per bucket the most during it.
type processFlight struct {
	process, subscription string
	most                  int64
	curve                 []int64
	opened                bool // it recorded a deliver ok
}

// inFlight sweeps every shard's flight records per process: the
// processes that recorded a delivery, sorted by subscription then name, each
// with the most it held at once and, per bucket of width ns (n of them),
// the most during the bucket. It empties the accumulators.
func inFlight(accs []*flightAcc, width int64, n int) []processFlight {
	// Each shard's process indexes map to one slot per process name,
	// looked up once per shard, not once per record; the records are
	// counted first so that each process's are copied once.
	slot := map[string]int{}
	var pfs []*processFlight
	local := make([][]int, len(accs))
	for i, a := range accs {
		local[i] = make([]int, len(a.procs))
		for j, p := range a.procs {
			k, ok := slot[p.name]
			if !ok {
				k = len(pfs)
				slot[p.name] = k
				pfs = append(pfs, &processFlight{process: p.name})
			}
			if pfs[k].subscription == "" {
				pfs[k].subscription = p.sub
			}
			local[i][j] = k
		}
	}
	sizes := make([]int, len(pfs))
	for i, a := range accs {
		for _, r := range a.recs {
			k := local[i][r.proc]
			sizes[k]++
			pfs[k].opened = pfs[k].opened || r.kind == flightOpen
		}
	}
	recs := make([][]flightRec, len(pfs))
	for k, pf := range pfs {
		if pf.opened {
			recs[k] = make([]flightRec, 0, sizes[k])
		}
	}
	for i, a := range accs {
		for _, r := range a.recs {
			if k := local[i][r.proc]; pfs[k].opened {
				recs[k] = append(recs[k], r)
			}
		}
		a.recs = nil // copied: let them go before the sweep
	}
	var out []processFlight
	for k, pf := range pfs {
		if !pf.opened {
			continue // only crashes, or a consumer that records no deliveries
		}
		rs := recs[k]
		slices.SortStableFunc(rs, func(x, y flightRec) int {
			if c := cmp.Compare(x.t, y.t); c != 0 {
				return c
			}
			return cmp.Compare(x.kind, y.kind)
		})
		pf.curve = make([]int64, n)
		open := map[uint32]struct{}{}
		bucket := func(t int64) int { return int(min(max(t/width, 0), int64(n-1))) }
		last := 0 // the bucket the count was last carried to
		for _, r := range rs {
			b := bucket(r.t)
			for ; last < b; last++ {
				pf.curve[last+1] = max(pf.curve[last+1], int64(len(open)))
			}
			switch r.kind {
			case flightOpen:
				open[r.ev] = struct{}{}
			case flightClose:
				delete(open, r.ev)
			case flightCrash:
				clear(open)
			}
			c := int64(len(open))
			pf.curve[b] = max(pf.curve[b], c)
			pf.most = max(pf.most, c)
		}
		for ; last+1 < n; last++ {
			pf.curve[last+1] = max(pf.curve[last+1], int64(len(open)))
		}
		out = append(out, *pf)
	}
	slices.SortFunc(out, func(x, y processFlight) int {
		if c := cmp.Compare(x.subscription, y.subscription); c != 0 {
			return c
		}
		return cmp.Compare(x.process, y.process)
	})
	return out
}
