package broker

import (
	"net"
	"sync"
)

// corkConn is a net.Conn whose writes can be held back and sent together.
//
// amqp091-go flushes every publish to the socket as it is made: its three
// frames go out in one write system call, one TCP segment, and one wakeup
// of whoever reads the other end (the proxy, then the broker). A relay
// publishing a batch of 200 events made 200 of each. Corked for the
// batch, they leave in one write: in interleaved pipeline windows the
// relay's CPU per event went from 41 to 27µs (the proxy and the broker
// spent less too, by amounts within the noise).
//
// Corking only delays bytes, never reorders or drops them: what is held
// goes out, in order, at Uncork, or directly once more than corkLimit is
// held. A write failure at Uncork is the socket's, and the caller treats
// everything it published since Cork as unconfirmed.
type corkConn struct {
	net.Conn

	mu     sync.Mutex
	corked bool
	buf    []byte
}

// corkLimit bounds what a corked connection holds: past it, the bytes are
// written right away (and the connection stays corked).
const corkLimit = 256 << 10

// Write implements net.Conn. Corked, it keeps p and reports it written.
func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.corked {
		return c.Conn.Write(p)
	}
	c.buf = append(c.buf, p...)
	if len(c.buf) > corkLimit {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Cork holds writes back until Uncork.
func (c *corkConn) Cork() {
	c.mu.Lock()
	c.corked = true
	c.mu.Unlock()
}

// Uncork writes what was held, in one write, and lets later writes through.
// Close does not wait for it, so closing the connection frees an Uncork
// blocked on a peer that stopped reading.
func (c *corkConn) Uncork() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked = false
	return c.flushLocked()
}

func (c *corkConn) flushLocked() error {
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.buf)
	c.buf = c.buf[:0]
	return err
}
