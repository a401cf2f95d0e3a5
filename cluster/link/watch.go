package link

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/toxics"
)

// countType is the toxiproxy type of the counting toxic a [Watch] puts on
// a link. toxiproxy builds toxics by type name from its own registry, so
// registering the type is the only way to add one; the counts live in
// each toxic instance, not in this package.
const countType = "deliverycheck_count"

func init() { toxics.Register(countType, new(countToxic)) }

// countToxic passes every chunk on unchanged and counts what it saw. It
// is on a link only while a [Watch] is, so the traffic of a run pays for
// it only during a fault window: one more channel hop per chunk.
type countToxic struct {
	// Limit, when above 0, counts the connections that carried at least
	// Limit bytes past the toxic (a limit-data fault cuts those).
	Limit int64 `json:"limit"`

	conns   atomic.Int64 // connections (in this direction) the toxic was on
	active  atomic.Int64 // connections at least one chunk crossed
	bytes   atomic.Int64
	closed  atomic.Int64 // connections whose sender closed while watched
	reached atomic.Int64 // connections that carried Limit bytes or more
}

// countState is one connection's share, kept by toxiproxy on the stub
// across re-runs of Pipe (a toxic added later interrupts and restarts it).
type countState struct {
	seen  bool
	bytes int64
}

// NewState implements toxics.StatefulToxic. toxiproxy calls it once per
// connection and direction: for each open one when the toxic is added,
// and for each new one while it is in place.
func (t *countToxic) NewState() any {
	t.conns.Add(1)
	return &countState{}
}

// Pipe implements toxics.Toxic.
func (t *countToxic) Pipe(stub *toxics.ToxicStub) {
	st, _ := stub.State.(*countState)
	if st == nil {
		st = &countState{}
	}
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				t.closed.Add(1)
				stub.Close()
				return
			}
			n := int64(len(c.Data))
			if !st.seen {
				st.seen = true
				t.active.Add(1)
			}
			if t.Limit > 0 && st.bytes < t.Limit && st.bytes+n >= t.Limit {
				t.reached.Add(1)
			}
			st.bytes += n
			t.bytes.Add(n)
			stub.Output <- c
		}
	}
}

// Traffic is what crossed a link in one direction (or both, summed) while
// a [Watch] was on it.
type Traffic struct {
	// Conns is the connections open at any time during the watch.
	Conns int64
	// Active is the connections at least one byte crossed.
	Active int64
	// Bytes is the bytes that arrived at the toxics after the watch
	// (what a partition dropped, a latency toxic delayed, ...).
	Bytes int64
	// Closed is the connections whose sending side closed during the watch.
	Closed int64
	// Reached is the connections that carried the watch's limit or more.
	Reached int64
}

func (t Traffic) add(o Traffic) Traffic {
	return Traffic{Conns: max(t.Conns, o.Conns), Active: max(t.Active, o.Active), Bytes: t.Bytes + o.Bytes,
		Closed: max(t.Closed, o.Closed), Reached: max(t.Reached, o.Reached)}
}

// Watch counts the traffic on a link, in one direction or both, from
// [Link.Watch] until [Watch.Stop]. A nemesis starts one just before it
// adds a fault's toxic, so the counting toxic sits ahead of the fault in
// the chain and sees what the fault then acts on.
type Watch struct {
	l      *Link
	names  []string
	toxics []*countToxic
}

// Watch starts counting the traffic in direction d. limit, when above 0,
// also counts the connections that carry limit bytes or more (see
// [Traffic.Reached]). The caller must call Stop.
func (l *Link) Watch(d Direction, limit int64) (*Watch, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.watches++
	w := &Watch{l: l}
	for _, stream := range d.streams() {
		name := fmt.Sprintf("%s_%d_%s", countType, l.watches, stream)
		body, err := json.Marshal(map[string]any{
			"name": name, "type": countType, "stream": stream, "toxicity": 1.0, "attributes": map[string]any{"limit": limit},
		})
		if err != nil {
			return nil, fmt.Errorf("link %s: watch: %w", l.name, err)
		}
		tw, err := l.p.Toxics.AddToxicJson(bytes.NewReader(body))
		if err != nil {
			w.stopLocked()
			return nil, fmt.Errorf("link %s: watch: %w", l.name, err)
		}
		ct, ok := tw.Toxic.(*countToxic)
		if !ok {
			w.stopLocked()
			return nil, fmt.Errorf("link %s: watch: toxiproxy made a %T", l.name, tw.Toxic)
		}
		w.names = append(w.names, name)
		w.toxics = append(w.toxics, ct)
	}
	return w, nil
}

// Traffic is what the watch has counted so far.
func (w *Watch) Traffic() Traffic {
	var out Traffic
	for _, t := range w.toxics {
		out = out.add(Traffic{Conns: t.conns.Load(), Active: t.active.Load(), Bytes: t.bytes.Load(),
			Closed: t.closed.Load(), Reached: t.reached.Load()})
	}
	return out
}

// Stop removes the counting toxics and returns what they counted. A
// second Stop returns the same counts. A toxic already gone (a
// [Link.Heal] clears every toxic) is not an error.
func (w *Watch) Stop() (Traffic, error) {
	w.l.mu.Lock()
	defer w.l.mu.Unlock()
	return w.Traffic(), w.stopLocked()
}

func (w *Watch) stopLocked() error {
	var err error
	for _, name := range w.names {
		if e := w.l.p.Toxics.RemoveToxic(context.Background(), name); e != nil && !errors.Is(e, toxiproxy.ErrToxicNotFound) && err == nil {
			err = fmt.Errorf("link %s: stop watch: %w", w.l.name, e)
		}
	}
	w.names = nil
	return err
}
