package broker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKfakeLog: the log read finds every record of every partition, each
// with its event id, source, partition and offset; a partition whose log
// no longer
// starts at 0 fails the read rather than report its deleted records
// absent.
func TestKfakeLog(t *testing.T) {
	_, cfg := kfakeCluster(t, 3)
	p, err := NewKafkaPublisher(cfg, KafkaPublisherOptions{Mode: KafkaConfirmed})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var evs []Event
	for i := range 30 {
		evs = append(evs, Event{ID: fmt.Sprintf("e%d", i), Source: "/orders", Key: fmt.Sprintf("k%d", i%7), Version: 1})
	}
	for i, err := range p.Publish(ctx, evs) {
		if err != nil {
			t.Fatalf("publish %s: %v", evs[i].ID, err)
		}
	}
	l, err := KafkaLog(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	seen := map[[2]int64]bool{}
	for _, r := range l.Records {
		if r.Source != "/orders" || seen[[2]int64{r.Partition, r.Offset}] {
			t.Errorf("record %+v: wrong source, or its position twice", r)
		}
		seen[[2]int64{r.Partition, r.Offset}] = true
		ids = append(ids, r.Event)
	}
	slices.Sort(ids)
	var want []string
	for _, e := range evs {
		want = append(want, e.ID)
	}
	slices.Sort(want)
	if !slices.Equal(ids, want) || l.Where != cfg.Topic || !strings.Contains(l.Detail, "30 records") {
		t.Fatalf("log of %s (%s): %v, want %v", l.Where, l.Detail, ids, want)
	}

	// Records deleted from the start of a partition: the log is not whole.
	admin, err := kgo.NewClient(cfg.clientOpts("test")...)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: cfg.Topic, Partition: int32(l.Records[0].Partition), At: 1})
	res, err := kadm.NewClient(admin).DeleteRecords(ctx, del)
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatalf("delete records: %v", err)
	}
	if _, err := KafkaLog(ctx, cfg); err == nil || !strings.Contains(err.Error(), "were deleted") {
		t.Fatalf("log read after records were deleted: %v, want an error saying so", err)
	}
}

// TestRabbitLog: the witness queue is bound like the subscriptions, so it
// holds what an unbound subscription never gets (and a mandatory publish
// is confirmed, not returned); reading it takes nothing away, so a retried
// final read reads it all again, and the subscriptions' backlog does not
// count it.
func TestRabbitLog(t *testing.T) {
	rt := newRabbitTest(t, []string{"bound", "unbound"}, func(c *RabbitConfig) {
		c.Witness = true
		c.Unbound = []string{c.Subscriptions[1]}
	})
	evs := events("w", 5)
	rt.publishOK(rt.publisher(RabbitConfirmed), evs)
	var want []string
	for _, e := range evs {
		want = append(want, e.ID)
	}
	for read := range 2 {
		l, err := RabbitLog(rt.ctx, rt.cfg)
		if err != nil {
			t.Fatalf("read %d: %v", read, err)
		}
		var ids []string
		for _, r := range l.Records {
			ids = append(ids, r.Event)
		}
		slices.Sort(ids)
		if !slices.Equal(ids, want) || l.Where != RabbitWitnessQueue(rt.cfg.Exchange) {
			t.Fatalf("read %d of %s (%s): %v, want %v", read, l.Where, l.Detail, ids, want)
		}
	}
	if n := rt.depth(rt.sub(1)); n != 0 {
		t.Errorf("the unbound subscription holds %d messages", n)
	}
	b := NewRabbitBacklogReader(rt.cfg)
	defer b.Close()
	for i, want := range []int64{5, 0} {
		n, err := b.Backlog(rt.ctx, rt.sub(i))
		if err != nil || n != want {
			t.Errorf("backlog of %s = %d, %v; want %d (the witness is no subscription's)", rt.sub(i), n, err, want)
		}
	}
}
