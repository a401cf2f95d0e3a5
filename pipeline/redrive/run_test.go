package redrive

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/broker"
	"github.com/deliverycheck/deliverycheck/failpoint"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/pipeline/producer"
)

// fakeDLQ is a dead-letter queue: ready messages in order, those taken
// and not acked go back to its head when the redriver "crashes" (reset).
type fakeDLQ struct {
	ready, taken []*broker.RedriveMessage
	sent         []string // ids republished, in order
	attempts     []int64
}

func (q *fakeDLQ) Next(context.Context) (*broker.RedriveMessage, bool, error) {
	if len(q.ready) == 0 {
		return nil, false, nil
	}
	m := q.ready[0]
	q.ready = q.ready[1:]
	q.taken = append(q.taken, m)
	return m, true, nil
}

func (q *fakeDLQ) Republish(_ context.Context, _ *broker.RedriveMessage, id string, attempt int64) error {
	q.sent = append(q.sent, id)
	q.attempts = append(q.attempts, attempt)
	return nil
}

func (q *fakeDLQ) Ack(m *broker.RedriveMessage) error {
	q.taken = slices.DeleteFunc(q.taken, func(x *broker.RedriveMessage) bool { return x == m })
	return nil
}

// reset puts what was taken and not acked back, as a closed connection
// does.
func (q *fakeDLQ) reset() {
	q.ready = append(q.taken, q.ready...)
	q.taken = nil
}

// deadLetter is a dead letter of event id in schema version schema (0:
// none), or poison.
func deadLetter(id string, schema int64, poison bool) *broker.RedriveMessage {
	key := "order-s2-" + id
	return &broker.RedriveMessage{
		Event:   broker.Event{ID: id, Source: producer.DefaultSource, Key: key, Version: 1, Payload: producer.SchemaPayload(key, 1, poison, schema)},
		Headers: map[string]string{},
	}
}

// crashed is what the test's failpoint crash panics with.
type crashed struct{}

// run runs one incarnation of a redriver over q, its history appended
// to hist; a failpoint crash ends it as a kill would.
func run(t *testing.T, cfg Config, q *fakeDLQ, hist *bytes.Buffer, fp *failpoint.Set) (o Outcome, crash bool) {
	t.Helper()
	prior, _, err := history.Read(bytes.NewReader(hist.Bytes()), "redrive-email.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	rec := history.NewWriterRecorder(hist, "redrive-email", time.Now())
	r, err := New(cfg, q, nil, rec, fp, prior)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if p := recover(); p != nil {
			if _, ok := p.(crashed); !ok {
				panic(p)
			}
			q.reset()
			crash = true
		}
	}()
	o, err = r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	q.reset()
	return o, false
}

// A blind redrive sends every dead letter, poison and all, at its rate
// and no faster; killed after a republish and before its ack, its next
// incarnation sends that one again as attempt 2 and counts both in its
// account; it stops at twice the dead letters it was told of.
func TestBlindRedrive(t *testing.T) {
	q := &fakeDLQ{}
	for i := range 4 {
		q.ready = append(q.ready, deadLetter(fmt.Sprintf("e%d", i), 2, i == 3))
	}
	cfg := Config{Variant: Blind, Subscription: "email", Rate: 20, DeadLetters: 4}
	var hist bytes.Buffer
	fp := failpoint.NewSet(1, func(failpoint.Name, any) { panic(crashed{}) })
	fp.Arm(failpoint.Term{Name: failpoint.RedriveAfterPublishBeforeAck, Count: 1, Prob: 1})
	start := time.Now()
	if _, crash := run(t, cfg, q, &hist, fp); !crash {
		t.Fatal("the failpoint did not fire")
	}
	o, crash := run(t, cfg, q, &hist, fp)
	if crash || !o.Done {
		t.Fatalf("second incarnation: %+v, crash %v", o, crash)
	}
	if want := []string{"e0", "e0", "e1", "e2", "e3"}; !slices.Equal(q.sent, want) {
		t.Errorf("sent %v, want %v", q.sent, want)
	}
	if want := []int64{1, 2, 1, 1, 1}; !slices.Equal(q.attempts, want) {
		t.Errorf("attempts %v, want %v", q.attempts, want)
	}
	// Four intervals of 50ms after the first send, in the second
	// incarnation (the first sent one).
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Errorf("4 republishes at 20/s took %s", took)
	}
	if want := "redrove 4 of email's dead letters (4 at the start) at ≤ 20/s in 5 republishes, blind"; !strings.HasPrefix(o.Text, want) {
		t.Errorf("evidence %q, want it to start %q", o.Text, want)
	}
	h, _, err := history.Read(bytes.NewReader(hist.Bytes()), "h")
	if err != nil {
		t.Fatal(err)
	}
	var oks int
	for _, op := range h {
		if op.F != history.Redrive || op.Value.Consumer != "email" || op.Value.Rate != 20 {
			t.Errorf("op %+v", op)
		}
		if op.Type == history.OK {
			oks++
		}
	}
	if oks != 5 {
		t.Errorf("%d redrive ok ops, want 5", oks)
	}

	// The same dead letters, back again and again (refused before the
	// fix): it stops at twice the 4 it was told of.
	q2 := &fakeDLQ{}
	var hist2 bytes.Buffer
	for i := range 20 {
		q2.ready = append(q2.ready, deadLetter(fmt.Sprintf("e%d", i%4), 2, false))
	}
	cfg.Rate = 1000
	if o, _ := run(t, cfg, q2, &hist2, failpoint.NewSet(1, nil)); len(q2.sent) != 8 || !o.Done {
		t.Errorf("sent %d (%+v), want 8", len(q2.sent), o)
	}
}

// The canary redriver classifies before anything: poison and versions
// its consumers do not accept stay in the queue; with nothing
// compatible it redrives nothing and says why.
func TestCanaryNothingCompatible(t *testing.T) {
	q := &fakeDLQ{ready: []*broker.RedriveMessage{deadLetter("e0", 2, false), deadLetter("e1", 0, true), deadLetter("e2", 3, false)}}
	for _, v := range []Variant{Canary, NewIDs} {
		cfg := Config{Variant: v, Subscription: "email", Rate: 50, DeadLetters: 3, SchemaVersions: []int64{1}}
		var hist bytes.Buffer
		o, _ := run(t, cfg, q, &hist, failpoint.NewSet(1, nil))
		if o.Done || o.Text != "no dead letter of email is compatible with its consumers (schema versions 1): 3 kept" {
			t.Errorf("%s: %+v", v, o)
		}
		if len(q.sent) != 0 || hist.Len() != 0 || len(q.ready) != 3 {
			t.Errorf("%s: sent %v, history %q, %d left in the queue", v, q.sent, hist.String(), len(q.ready))
		}
	}
}

// compatible follows the consumers' schema versions: after the fix, a
// schema-2 event is, poison and a version no fix covers are not.
func TestCompatible(t *testing.T) {
	r := &Redriver{cfg: Config{SchemaVersions: []int64{1, 2}}}
	for _, c := range []struct {
		m    *broker.RedriveMessage
		want bool
	}{
		{deadLetter("a", 0, false), true},
		{deadLetter("b", 2, false), true},
		{deadLetter("c", 3, false), false},
		{deadLetter("d", 0, true), false},
		{&broker.RedriveMessage{Event: broker.Event{Payload: []byte("not json")}}, false},
	} {
		if got := r.compatible(c.m); got != c.want {
			t.Errorf("compatible(%s) = %v, want %v", c.m.Event.Payload, got, c.want)
		}
	}
}
