package broker

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// channelModel is the broker's side of one channel, as far as settling
// goes: it takes the frames rabbitAcks sends and records the first one a
// real broker would refuse or one that settles a delivery the consumer
// still handles (a loss if the consumer then crashed).
type channelModel struct {
	mu          sync.Mutex
	outstanding map[uint64]bool // delivered, not settled by a frame
	handled     map[uint64]bool // the consumer asked to settle it
	frames      []string
	err         error
	fail        error // returned by every send when set
}

func newChannelModel(n int) *channelModel {
	m := &channelModel{outstanding: map[uint64]bool{}, handled: map[uint64]bool{}}
	for t := 1; t <= n; t++ {
		m.outstanding[uint64(t)] = true
	}
	return m
}

func (m *channelModel) violation(format string, args ...any) {
	if m.err == nil {
		m.err = fmt.Errorf(format, args...)
	}
}

func (m *channelModel) settle(what string, tag uint64) {
	if !m.outstanding[tag] {
		// RabbitMQ closes the channel: PRECONDITION_FAILED, unknown tag.
		m.violation("%s of tag %d, which is not outstanding", what, tag)
	}
	if !m.handled[tag] {
		m.violation("%s settles tag %d, which the consumer still handles", what, tag)
	}
	delete(m.outstanding, tag)
}

func (m *channelModel) Ack(tag uint64, multiple bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	m.frames = append(m.frames, fmt.Sprintf("ack %d multiple=%t", tag, multiple))
	if !multiple {
		m.settle("ack", tag)
		return nil
	}
	if !m.outstanding[tag] {
		m.violation("multiple ack up to tag %d, which is not outstanding", tag)
	}
	for t := range m.outstanding {
		if t <= tag {
			m.settle(fmt.Sprintf("multiple ack up to %d", tag), t)
		}
	}
	return nil
}

func (m *channelModel) Nack(tag uint64, multiple, requeue bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	m.frames = append(m.frames, fmt.Sprintf("nack %d", tag))
	if multiple {
		m.violation("nack with multiple")
	}
	m.settle("nack", tag)
	return nil
}

// wantFrames checks the frames sent so far, in order.
func (m *channelModel) wantFrames(t *testing.T, want ...string) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if !slices.Equal(m.frames, want) {
		t.Errorf("frames %v, want %v", m.frames, want)
	}
}

func (m *channelModel) handle(tag uint64) {
	m.mu.Lock()
	m.handled[tag] = true
	m.mu.Unlock()
}

// TestRabbitAcksProperty settles deliveries in any order, in batches of
// held acks, with immediate acks or with nacks, with held acks sent alone at any
// point (as the hold timer would): no frame ever settles a delivery still
// being handled or one already settled, an immediate ack is settled when
// it returns, and once every delivery is settled nothing is held and
// nothing is outstanding.
func TestRabbitAcksProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 40).Draw(t, "deliveries")
		m := newChannelModel(n)
		a := newRabbitAcks(m, 1, func() { t.Fatal("killed without a failed frame") })
		a.hold = time.Hour // expiry is an explicit step below
		tags := make([]uint64, n)
		for i := range tags {
			tags[i] = uint64(i + 1)
		}
		var waits []<-chan error
		order := rapid.Permutation(tags).Draw(t, "order")
		for len(order) > 0 {
			kind := rapid.SampledFrom([]string{"later", "later", "later", "now", "retry", "dead-letter"}).Draw(t, "settle")
			k := 1
			if kind == "later" { // a consumer's batch
				k = rapid.IntRange(1, len(order)).Draw(t, "batch")
			}
			batch := order[:k]
			order = order[k:]
			for _, tag := range batch {
				m.handle(tag)
			}
			tag := batch[0]
			switch kind {
			case "later":
				waits = append(waits, a.later(batch...)...)
			case "now":
				if err := a.now(tag); err != nil {
					t.Fatal(err)
				}
				m.mu.Lock()
				if m.outstanding[tag] {
					t.Fatalf("ack of tag %d returned before a frame settled it", tag)
				}
				m.mu.Unlock()
			case "retry":
				if err := a.nack(tag, true); err != nil {
					t.Fatal(err)
				}
			case "dead-letter":
				if err := a.nack(tag, false); err != nil {
					t.Fatal(err)
				}
			}
			if rapid.IntRange(0, 9).Draw(t, "expire") == 0 {
				a.expire()
			}
		}
		for i, w := range waits {
			select {
			case err := <-w:
				if err != nil {
					t.Fatalf("held ack %d: %v", i, err)
				}
			default:
				t.Fatalf("an ack is still held after every delivery was settled (frames %v)", m.frames)
			}
		}
		if m.err != nil {
			t.Fatalf("%v (frames %v)", m.err, m.frames)
		}
		if len(m.outstanding) != 0 {
			t.Fatalf("outstanding after every delivery was settled: %v (frames %v)", m.outstanding, m.frames)
		}
	})
}

// TestRabbitAcks walks the cases that matter by name: acks arriving in
// any order go out as one frame once the lowest is settled, a nack
// releases the acks above it, an ack held past its time goes out alone,
// and a frame that cannot be written fails every held ack as stale.
func TestRabbitAcks(t *testing.T) {
	t.Run("one frame for a batch acked out of order", func(t *testing.T) {
		m := newChannelModel(5)
		a := newRabbitAcks(m, 1, func() {})
		a.hold = time.Hour
		var waits []<-chan error
		for _, batch := range [][]uint64{{3}, {5, 4}, {2, 1}} {
			for _, tag := range batch {
				m.handle(tag)
			}
			waits = append(waits, a.later(batch...)...)
		}
		for _, w := range waits {
			if err := <-w; err != nil {
				t.Fatal(err)
			}
		}
		m.wantFrames(t, "ack 5 multiple=true")
	})
	t.Run("a nack releases the acks above it", func(t *testing.T) {
		m := newChannelModel(3)
		a := newRabbitAcks(m, 1, func() {})
		a.hold = time.Hour
		m.handle(2)
		m.handle(3)
		w2, w3 := a.later(2)[0], a.later(3)[0]
		m.handle(1)
		if err := a.nack(1, true); err != nil {
			t.Fatal(err)
		}
		if err := errors.Join(<-w2, <-w3); err != nil {
			t.Fatal(err)
		}
		m.wantFrames(t, "nack 1", "ack 3 multiple=true")
	})
	t.Run("an ack held past its time goes out alone", func(t *testing.T) {
		m := newChannelModel(2)
		a := newRabbitAcks(m, 1, func() {})
		a.hold = time.Millisecond
		m.handle(2)
		recvOK(t, a.later(2)[0], 10*time.Second, "the held ack never went out while tag 1 stayed outstanding")
		m.handle(1)
		if err := a.now(1); err != nil {
			t.Fatal(err)
		}
		m.wantFrames(t, "ack 2 multiple=false", "ack 1 multiple=true")
		if m.err != nil {
			t.Fatal(m.err)
		}
	})
	t.Run("a failed frame fails every held ack", func(t *testing.T) {
		m := newChannelModel(3)
		killed := false
		a := newRabbitAcks(m, 7, func() { killed = true })
		a.hold = time.Hour
		m.handle(3)
		w3 := a.later(3)[0]
		m.fail = errors.New("socket gone")
		m.handle(1)
		if err := a.now(1); !errors.Is(err, ErrStaleDelivery) {
			t.Fatalf("ack on a dead socket: %v, want ErrStaleDelivery", err)
		}
		if err := <-w3; !errors.Is(err, ErrStaleDelivery) {
			t.Fatalf("held ack after the socket died: %v, want ErrStaleDelivery", err)
		}
		if !killed {
			t.Error("the session was not killed after a frame failed")
		}
		m.fail = nil
		m.handle(2)
		if err := <-a.later(2)[0]; !errors.Is(err, ErrStaleDelivery) {
			t.Fatalf("ack after the session failed: %v, want ErrStaleDelivery", err)
		}
	})
}
