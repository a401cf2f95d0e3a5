package link

import (
	"sync"
	"sync/atomic"
)

// watchCounts is what one [Watch] counted in one direction. The link's
// gate adds to it from the goroutines that move the data.
type watchCounts struct {
	// limit, when above 0, counts the connections that carried at least
	// limit bytes (a limit-data fault cuts those).
	limit int64

	conns     atomic.Int64 // connections (in this direction) open during the watch
	active    atomic.Int64 // connections at least one chunk arrived on
	bytes     atomic.Int64
	closed    atomic.Int64 // connections whose sender closed while watched
	reached   atomic.Int64 // connections that carried limit bytes or more
	held      atomic.Int64 // connections with data waiting at a partition
	heldBytes atomic.Int64
}

// connCounts is one connection's share of one watch.
type connCounts struct {
	active, held bool
	bytes        int64
}

// Traffic is what crossed a link in one direction (or both, summed) while
// a [Watch] was on it.
type Traffic struct {
	// Conns is the connections open at any time during the watch.
	Conns int64
	// Active is the connections at least one byte arrived on.
	Active int64
	// Bytes is the bytes that arrived at the link after the watch began
	// (what a latency toxic then delayed, ...). Under a partition the link
	// reads almost nothing: see Held.
	Bytes int64
	// Closed is the connections whose sending side closed during the watch.
	Closed int64
	// Reached is the connections that carried the watch's limit or more.
	Reached int64
	// Held is the connections that had data (or their close) waiting at
	// a partition of the link during the watch.
	Held int64
	// HeldBytes is the data that waited at the link itself: at most the
	// first chunk of each held connection, which the link reads before it
	// stops reading. The rest waits in the kernel's buffers and the
	// senders, and is not counted.
	HeldBytes int64
}

func (t Traffic) add(o Traffic) Traffic {
	return Traffic{Conns: max(t.Conns, o.Conns), Active: max(t.Active, o.Active), Bytes: t.Bytes + o.Bytes,
		Closed: max(t.Closed, o.Closed), Reached: max(t.Reached, o.Reached),
		Held: max(t.Held, o.Held), HeldBytes: t.HeldBytes + o.HeldBytes}
}

// Watch counts the traffic on a link, in one direction or both, from
// [Link.Watch] until [Watch.Stop]. The counting happens in the link's
// gate, which is first in the chain of toxics, so a watch sees what every
// fault on the link then acts on.
type Watch struct {
	gates  []*gateToxic
	counts []*watchCounts

	once    sync.Once
	stopped Traffic
}

// Watch starts counting the traffic in direction d. limit, when above 0,
// also counts the connections that carry limit bytes or more (see
// [Traffic.Reached]). The caller must call Stop. A watch adds nothing to
// toxiproxy's chain, so starting and stopping one never waits on a
// connection.
func (l *Link) Watch(d Direction, limit int64) (*Watch, error) {
	w := &Watch{}
	for _, g := range l.gatesFor(d) {
		c := &watchCounts{limit: limit}
		g.watch(c)
		w.gates = append(w.gates, g)
		w.counts = append(w.counts, c)
	}
	return w, nil
}

// Traffic is what the watch has counted so far.
func (w *Watch) Traffic() Traffic {
	var out Traffic
	for _, c := range w.counts {
		out = out.add(Traffic{Conns: c.conns.Load(), Active: c.active.Load(), Bytes: c.bytes.Load(),
			Closed: c.closed.Load(), Reached: c.reached.Load(), Held: c.held.Load(), HeldBytes: c.heldBytes.Load()})
	}
	return out
}

// Stop ends the watch and returns what it counted. A second Stop returns
// the same counts. The error is always nil; it is there for callers that
// treat a watch like the faults it accompanies.
func (w *Watch) Stop() (Traffic, error) {
	w.once.Do(func() {
		for i, g := range w.gates {
			g.unwatch(w.counts[i])
		}
		// A chunk being counted as the watch stops may still add to
		// the counts; the first Stop's snapshot is the answer.
		w.stopped = w.Traffic()
	})
	return w.stopped, nil
}
