package link

import (
	"sync"

	"github.com/Shopify/toxiproxy/v2/stream"
	"github.com/Shopify/toxiproxy/v2/toxics"
)

// gateType is the toxiproxy type of the toxic every link carries, from
// [Server.Add] to [Server.Close], first in the chain of each direction.
// toxiproxy builds toxics by type name from its own registry, so
// registering the type is the only way to add one; the gate's state lives
// in each toxic instance, not in this package.
const gateType = "deliverycheck_gate"

func init() { toxics.Register(gateType, new(gateToxic)) }

// gateToxic is where a link partitions and counts. It is never removed
// while the link runs, and that is the point: a partition and a [Watch]
// are flags on it, not toxics added to and removed from toxiproxy's
// chain. toxiproxy rewires a chain by interrupting the toxics next to the
// change, and two of its behaviours make that unsafe for these two jobs:
//
//   - Removing a toxic whose Cleanup closes its stub (the `timeout` toxic,
//     which a partition used to be) ends every connection through it with
//     EOF and returns without rewiring the toxic before it, whose output
//     then goes to a channel nobody reads. A counting toxic there blocked
//     on its next chunk forever, and removing it (the end of a watch) then
//     waited forever for it to take the interrupt, holding toxiproxy's
//     lock on the proxy and ours: a partition's heal hung the run.
//   - Removing any toxic forwards what is in flight with a 5 s timeout and
//     drops the chunk when it expires, which a receiver that is not
//     reading makes happen.
//
// Partitioning and healing touch no toxiproxy chain, so they cannot block
// on a busy connection or lose a byte. The gate sends every chunk with an
// eye on its stub's Interrupt, so the chain operations other faults still
// make (adding a latency toxic after it, removing one) never wait on it.
type gateToxic struct {
	mu      sync.Mutex
	held    bool
	changed chan struct{}          // closed and replaced when held changes
	live    map[*gateConn]struct{} // connections the gate is on
	watches []*watchCounts         // watches counting this direction
}

// gateConn is one connection's state in one direction. toxiproxy keeps it
// on the stub across re-runs of Pipe (a chain change interrupts and
// restarts the gate), so a chunk taken from the input is never lost: it
// is sent first on the next run.
type gateConn struct {
	// waiting is a chunk taken from the input and not yet sent on; with
	// closing, the sender's close (a nil chunk) is what waits.
	waiting *stream.StreamChunk
	closing bool
	// heldCounted says the waiting chunk was counted as held.
	heldCounted bool
	// counts is this connection's share of each watch, touched only by
	// the goroutine running Pipe (toxiproxy runs one at a time per stub).
	counts map[*watchCounts]*connCounts
}

// NewState implements toxics.StatefulToxic. toxiproxy calls it once per
// connection and direction when the connection opens (the gate is in
// place before the link accepts any).
func (g *gateToxic) NewState() any {
	c := &gateConn{}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.live == nil {
		g.live = map[*gateConn]struct{}{}
	}
	g.live[c] = struct{}{}
	for _, w := range g.watches {
		w.conns.Add(1)
	}
	return c
}

// hold partitions (true) or heals (false) this direction of the link.
func (g *gateToxic) hold(held bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held == held {
		return
	}
	g.held = held
	if g.changed != nil {
		close(g.changed)
		g.changed = nil
	}
}

// state is whether the gate holds, and a channel closed when that changes.
func (g *gateToxic) state() (bool, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.changed == nil {
		g.changed = make(chan struct{})
	}
	return g.held, g.changed
}

// Pipe implements toxics.Toxic.
//
// While the link is partitioned, the gate takes at most one chunk from its
// input and then stops reading. Backpressure does the rest, as on a real
// network: toxiproxy's reader blocks, the kernel's buffers fill and the
// sender's writes block, so connections neither close nor error and no
// byte is dropped. A connection opened during the partition is accepted
// and carries nothing until the heal. When the partition heals, the chunk
// the gate holds goes first and everything queued behind it follows, in
// order, on the same connections. A sender that closes during the
// partition has its close held too, behind its data.
func (g *gateToxic) Pipe(stub *toxics.ToxicStub) {
	c, _ := stub.State.(*gateConn)
	if c == nil {
		c = g.NewState().(*gateConn)
		stub.State = c
	}
	for {
		held, changed := g.state()
		if c.waiting == nil && !c.closing {
			select {
			case <-stub.Interrupt:
				return
			case chunk := <-stub.Input:
				g.took(c, chunk)
			}
			continue
		}
		if held {
			if !c.heldCounted {
				c.heldCounted = true
				g.count(c, func(w *watchCounts, cc *connCounts) {
					// Bytes before the connection, so a reader that
					// sees the connection held sees its bytes too.
					if c.waiting != nil {
						w.heldBytes.Add(int64(len(c.waiting.Data)))
					}
					if !cc.held {
						cc.held = true
						w.held.Add(1)
					}
				})
			}
			select {
			case <-stub.Interrupt:
				return
			case <-changed:
			}
			continue
		}
		if c.closing {
			g.mu.Lock()
			delete(g.live, c)
			g.mu.Unlock()
			stub.Close()
			return
		}
		select {
		case <-stub.Interrupt:
			return
		case <-changed:
			// A partition that begins while the chunk waits for the
			// next toxic (or a receiver that does not read) holds it.
		case stub.Output <- c.waiting:
			c.waiting, c.heldCounted = nil, false
		}
	}
}

// took makes chunk, just read from the input, the one waiting, and counts it.
func (g *gateToxic) took(c *gateConn, chunk *stream.StreamChunk) {
	if chunk == nil {
		c.closing = true
		g.count(c, func(w *watchCounts, _ *connCounts) { w.closed.Add(1) })
		return
	}
	c.waiting = chunk
	n := int64(len(chunk.Data))
	g.count(c, func(w *watchCounts, cc *connCounts) {
		if !cc.active {
			cc.active = true
			w.active.Add(1)
		}
		if w.limit > 0 && cc.bytes < w.limit && cc.bytes+n >= w.limit {
			w.reached.Add(1)
		}
		cc.bytes += n
		w.bytes.Add(n)
	})
}

// count calls f for each watch on the gate, with this connection's share
// of it, and forgets the shares of watches that have stopped.
func (g *gateToxic) count(c *gateConn, f func(*watchCounts, *connCounts)) {
	g.mu.Lock()
	watches := g.watches
	g.mu.Unlock()
	if len(watches) == 0 {
		clear(c.counts)
		return
	}
	if c.counts == nil {
		c.counts = map[*watchCounts]*connCounts{}
	}
	if len(c.counts) > len(watches) {
		for w := range c.counts {
			if !containsWatch(watches, w) {
				delete(c.counts, w)
			}
		}
	}
	for _, w := range watches {
		cc := c.counts[w]
		if cc == nil {
			cc = &connCounts{}
			c.counts[w] = cc
		}
		f(w, cc)
	}
}

func containsWatch(ws []*watchCounts, w *watchCounts) bool {
	for _, x := range ws {
		if x == w {
			return true
		}
	}
	return false
}

// watch starts counting into w, with the connections open now as its first.
func (g *gateToxic) watch(w *watchCounts) {
	g.mu.Lock()
	defer g.mu.Unlock()
	w.conns.Add(int64(len(g.live)))
	// A new slice, so a Pipe counting over the old one is not disturbed.
	g.watches = append(g.watches[:len(g.watches):len(g.watches)], w)
}

// unwatch stops counting into w.
func (g *gateToxic) unwatch(w *watchCounts) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var keep []*watchCounts
	for _, x := range g.watches {
		if x != w {
			keep = append(keep, x)
		}
	}
	g.watches = keep
}
