// Package link puts an in-process toxiproxy in front of every connection a
// run makes, so a nemesis can partition, delay, throttle or reset one link
// in one direction.
//
// Read [Server] and [Link] first. A partition ([Link.Partition]) is not a
// toxiproxy toxic: every link carries a toxic of this package's own, the
// gate, first in each direction's chain for as long as the link exists,
// and a partition makes it stop reading. Data is held, not dropped, and
// the senders' writes block once the kernel's buffers fill, which is how
// a real partition looks to a client (connections hang, they are neither
// refused, closed nor reset); when it heals, the held data goes on, in
// order, on the same connections. A [Watch] counts in the same gate. See
// gateToxic for why neither adds or removes toxiproxy toxics.
//
// Known toxiproxy behaviours this package relies on: disabling a proxy
// (see [Link.Refuse]) closes its connections and refuses new ones;
// toxicity is always 1.0 here so a fault always fires; `reset_peer`
// affects only connections opened after it is added; and toxiproxy's own
// randomness (latency jitter) cannot be seeded.
package link

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"syscall"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Direction says which way a toxic acts on a link.
type Direction int

const (
	// Upstream is client → server.
	Upstream Direction = iota
	// Downstream is server → client.
	Downstream
	// Both applies a toxic in each direction.
	Both
)

// String returns "upstream", "downstream" or "both".
func (d Direction) String() string {
	switch d {
	case Upstream:
		return "upstream"
	case Downstream:
		return "downstream"
	case Both:
		return "both"
	}
	return fmt.Sprintf("Direction(%d)", int(d))
}

// ParseDirection is the inverse of [Direction.String].
func ParseDirection(s string) (Direction, error) {
	switch s {
	case "upstream", "up":
		return Upstream, nil
	case "downstream", "down":
		return Downstream, nil
	case "both", "":
		return Both, nil
	}
	return 0, fmt.Errorf("link: invalid direction %q (want upstream, downstream or both)", s)
}

func (d Direction) streams() []string {
	switch d {
	case Upstream:
		return []string{"upstream"}
	case Downstream:
		return []string{"downstream"}
	}
	return []string{"upstream", "downstream"}
}

// Server is an in-process toxiproxy server. The caller should call Close
// when finished; it closes every link and its connections.
type Server struct {
	srv *toxiproxy.ApiServer

	mu    sync.Mutex
	links map[string]*Link
}

// NewServer returns a toxiproxy server with no links. It opens no port of
// its own: links are driven through this package, not toxiproxy's HTTP API.
func NewServer() *Server {
	// Some toxics (bandwidth) log through zerolog's global logger, not
	// the server's, at trace level: one line per interrupted write on
	// stderr, thousands in a run. Only toxiproxy logs through zerolog in
	// this program, so its global level is turned off.
	zerolog.SetGlobalLevel(zerolog.Disabled)
	m := toxiproxy.NewMetricsContainer(prometheus.NewRegistry())
	return &Server{
		srv:   toxiproxy.NewServer(m, zerolog.Nop()),
		links: map[string]*Link{},
	}
}

// Add starts a proxy called name that listens on listen ("127.0.0.1:0"
// picks a free port, kept across Refuse/Heal) and forwards to upstream.
func (s *Server) Add(name, listen, upstream string) (*Link, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.links[name]; ok {
		return nil, fmt.Errorf("link: %s already exists", name)
	}
	p := toxiproxy.NewProxy(s.srv, name, listen, upstream)
	l := &Link{name: name, p: p, upstream: upstream, toxics: map[string]string{}, gates: map[string]*gateToxic{}}
	// The gates go in before the proxy accepts a connection, so every
	// connection has one from its start.
	for _, stream := range Both.streams() {
		body, err := json.Marshal(map[string]any{"name": gateType + "_" + stream, "type": gateType, "stream": stream, "toxicity": 1.0})
		if err != nil {
			return nil, fmt.Errorf("link %s: %w", name, err)
		}
		tw, err := p.Toxics.AddToxicJson(bytes.NewReader(body))
		if err != nil {
			return nil, fmt.Errorf("link %s: add gate: %w", name, err)
		}
		g, ok := tw.Toxic.(*gateToxic)
		if !ok {
			return nil, fmt.Errorf("link %s: add gate: toxiproxy made a %T", name, tw.Toxic)
		}
		l.gates[stream] = g
	}
	if err := s.srv.Collection.Add(p, true); err != nil {
		return nil, fmt.Errorf("link: start proxy %s: %w", name, err)
	}
	s.links[name] = l
	return l, nil
}

// Link returns the link called name, or nil.
func (s *Server) Link(name string) *Link {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.links[name]
}

// Links returns every link, sorted by name.
func (s *Server) Links() []*Link {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Link, 0, len(s.links))
	for _, l := range s.links {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// HealAll removes every toxic and re-enables every link.
func (s *Server) HealAll() error {
	var errs []error
	for _, l := range s.Links() {
		errs = append(errs, l.Heal())
	}
	return errors.Join(errs...)
}

// Close stops every proxy and closes its connections. It heals the
// partitions first, or the goroutines moving a held connection's data
// would wait for a heal that never comes.
func (s *Server) Close() error {
	for _, l := range s.Links() {
		for _, g := range l.gates {
			g.hold(false)
		}
	}
	return s.srv.Collection.Clear()
}

// Link is one proxied connection path: clients dial [Link.Addr] instead of
// the server's own address.
type Link struct {
	name     string
	upstream string
	p        *toxiproxy.Proxy

	// gates is the link's gate toxic per stream ("upstream",
	// "downstream"), set by Add and never changed.
	gates map[string]*gateToxic

	mu      sync.Mutex
	toxics  map[string]string // toxic name → type, for Active
	refused bool
}

// partitionType is what [Link.Active] and [Link.RemoveToxic] call a
// partition, which is the gate holding, not a toxiproxy toxic.
const partitionType = "partition"

func (l *Link) gatesFor(d Direction) []*gateToxic {
	var out []*gateToxic
	for _, stream := range d.streams() {
		out = append(out, l.gates[stream])
	}
	return out
}

// Name is the link's name, e.g. "kafka".
func (l *Link) Name() string { return l.name }

// Addr is the host:port clients dial.
func (l *Link) Addr() string {
	l.p.Lock()
	defer l.p.Unlock()
	return l.p.Listen
}

// Upstream is the host:port the link forwards to.
func (l *Link) Upstream() string { return l.upstream }

// Toxic adds a toxic of type typ (a toxiproxy toxic: latency, timeout,
// bandwidth, reset_peer, limit_data, slow_close, slicer; or "partition",
// see [Link.Partition]) in direction d with the given attributes,
// replacing a toxic of the same type and direction. toxiproxy's timeout
// toxic is not a partition: it drops what it gets, and its removal ends
// every connection through it with EOF.
func (l *Link) Toxic(typ string, d Direction, attrs map[string]any) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, stream := range d.streams() {
		name := typ + "_" + stream
		if typ == partitionType {
			l.gates[stream].hold(true)
			l.toxics[name] = typ
			continue
		}
		if _, ok := l.toxics[name]; ok {
			if err := l.p.Toxics.RemoveToxic(context.Background(), name); err != nil {
				return fmt.Errorf("link %s: replace %s: %w", l.name, name, err)
			}
			delete(l.toxics, name)
		}
		body, err := json.Marshal(map[string]any{
			"name": name, "type": typ, "stream": stream, "toxicity": 1.0, "attributes": attrs,
		})
		if err != nil {
			return fmt.Errorf("link %s: %w", l.name, err)
		}
		if _, err := l.p.Toxics.AddToxicJson(bytes.NewReader(body)); err != nil {
			return fmt.Errorf("link %s: add %s: %w", l.name, name, err)
		}
		l.toxics[name] = typ
	}
	return nil
}

// RemoveToxic removes the toxic of type typ in direction d, leaving every
// other toxic on the link in place, so overlapping faults on one link heal
// one at a time. Removing a toxic that is not there is not an error: a
// fault's heal may run after [Link.Heal] already cleared it.
func (l *Link) RemoveToxic(typ string, d Direction) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, stream := range d.streams() {
		name := typ + "_" + stream
		if _, ok := l.toxics[name]; !ok {
			continue
		}
		if typ == partitionType {
			l.gates[stream].hold(false)
			delete(l.toxics, name)
			continue
		}
		if err := l.p.Toxics.RemoveToxic(context.Background(), name); err != nil {
			return fmt.Errorf("link %s: remove %s: %w", l.name, name, err)
		}
		delete(l.toxics, name)
	}
	return nil
}

// Partition makes the link hang in direction d, as a real network
// partition does: bytes stop flowing, connections neither close nor
// error, and writes block once the buffers between sender and link are
// full. Nothing is dropped: when the partition heals
// ([Link.RemoveToxic]("partition", d) or [Link.Heal]), what was held goes
// on, in order, on the same connections. A connection opened during the
// partition is accepted and carries nothing until the heal, and a close
// during it is held behind the data. Active lists it as
// "partition_upstream" and "partition_downstream".
func (l *Link) Partition(d Direction) error {
	return l.Toxic(partitionType, d, nil)
}

// Latency delays every chunk of data in direction d by latency ± jitter.
func (l *Link) Latency(d Direction, latency, jitter time.Duration) error {
	return l.Toxic("latency", d, map[string]any{"latency": latency.Milliseconds(), "jitter": jitter.Milliseconds()})
}

// Bandwidth caps the rate in direction d, in KB/s.
func (l *Link) Bandwidth(d Direction, kbps int64) error {
	return l.Toxic("bandwidth", d, map[string]any{"rate": kbps})
}

// ResetPeer makes connections opened from now on reset (TCP RST) after
// the given time.
func (l *Link) ResetPeer(d Direction, after time.Duration) error {
	return l.Toxic("reset_peer", d, map[string]any{"timeout": after.Milliseconds()})
}

// LimitData closes connections after n bytes in direction d.
func (l *Link) LimitData(d Direction, n int64) error {
	return l.Toxic("limit_data", d, map[string]any{"bytes": n})
}

// SlowClose delays closing connections in direction d.
func (l *Link) SlowClose(d Direction, delay time.Duration) error {
	return l.Toxic("slow_close", d, map[string]any{"delay": delay.Milliseconds()})
}

// Refuse disables the link: open connections are closed and new ones are
// refused, like a server host that went away (unlike [Link.Partition]).
// A connection held by a partition learns of the close when the partition
// heals, as it would on a real network.
func (l *Link) Refuse() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.p.Stop()
	l.refused = true
	return nil
}

// Accept undoes [Link.Refuse] on the same port and leaves the toxics in
// place, so a refusal heals without healing other faults on the link.
func (l *Link) Accept() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.refused {
		return nil
	}
	if err := relisten(l.p.Start); err != nil && !errors.Is(err, toxiproxy.ErrProxyAlreadyStarted) {
		return fmt.Errorf("link %s: re-enable: %w", l.name, err)
	}
	l.refused = false
	return nil
}

// Heal removes every toxic, heals a partition and re-enables a refused
// link on the same port.
func (l *Link) Heal() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for name, typ := range l.toxics {
		if typ == partitionType {
			continue
		}
		if err := l.p.Toxics.RemoveToxic(context.Background(), name); err != nil && !errors.Is(err, toxiproxy.ErrToxicNotFound) {
			errs = append(errs, fmt.Errorf("link %s: remove %s: %w", l.name, name, err))
		}
	}
	// The toxiproxy toxics go first, the gates' hold last, so what was
	// held meets the link as it is after the heal.
	for _, g := range l.gates {
		g.hold(false)
	}
	clear(l.toxics)
	if l.refused {
		if err := relisten(l.p.Start); err != nil && !errors.Is(err, toxiproxy.ErrProxyAlreadyStarted) {
			errs = append(errs, fmt.Errorf("link %s: re-enable: %w", l.name, err))
		} else {
			l.refused = false
		}
	}
	return errors.Join(errs...)
}

// Active lists the link's active faults ("latency_upstream", "refused", ...)
// sorted, for reports and the live status line.
func (l *Link) Active() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for name := range l.toxics {
		out = append(out, name)
	}
	if l.refused {
		out = append(out, "refused")
	}
	slices.Sort(out)
	return out
}

// relisten runs listen, which binds the link's port again after it was
// closed, retrying for a while when the port is still in use: the
// kernel refuses the bind while a connection accepted on the port is
// not yet closed, and toxiproxy closes its connections after its
// listener and their sockets asynchronously. Seen when two clusters
// started at once in one process: "bind: address already in use" on a
// link's own port.
func relisten(listen func() error) error {
	deadline := time.Now().Add(3 * time.Second)
	for {
		err := listen()
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// SetUpstream points the link at a new upstream address, keeping its listen
// port. It lets a caller create the link before the server it fronts
// exists, which Kafka needs: the broker must advertise the link's address,
// so that address has to be known before the broker is configured.
func (l *Link) SetUpstream(addr string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	listen := l.Addr()
	if err := relisten(func() error {
		return l.p.Update(&toxiproxy.Proxy{Listen: listen, Upstream: addr, Enabled: !l.refused})
	}); err != nil {
		return fmt.Errorf("link %s: set upstream: %w", l.name, err)
	}
	l.upstream = addr
	return nil
}
