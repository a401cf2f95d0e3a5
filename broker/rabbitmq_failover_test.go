package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/cluster/local"
	"github.com/deliverycheck/deliverycheck/cluster/netns"
	"github.com/deliverycheck/deliverycheck/internal/logtail"
	"github.com/deliverycheck/deliverycheck/internal/testenv"
)

// currentHost is the node s's current connection went to, "" if none.
func (r *rabbitSession) currentHost() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sess == nil {
		return ""
	}
	return r.sess.host
}

// A URL that answers nothing is skipped, the first time and after every
// lost connection: the session goes round the list to the next one that
// answers, and a dial that finds none names every node it tried.
func TestRabbitURLList(t *testing.T) {
	const dead = "amqp://deliverycheck:deliverycheck@127.0.0.1:1/"
	rt := newRabbitTest(t, []string{"inventory"}, func(c *RabbitConfig) {
		c.URLs = []string{dead, c.URLs[0]}
	})
	live := rabbitHost(rt.cfg.URLs[1])
	p, s := rt.publisher(RabbitConfirmed), rt.subscriber(rt.sub(0))
	for round := range 3 {
		evs := events(fmt.Sprintf("list%d", round), 3)
		rt.publishOK(p, evs)
		for _, want := range evs {
			d := rt.next(s, 10*time.Second)
			sameIdentity(t, d, want)
			if err := s.Ack(rt.ctx, d); err != nil {
				t.Fatal(err)
			}
		}
		for _, sess := range []*rabbitSession{p.rabbitSession, s.rabbitSession} {
			if got := sess.currentHost(); got != live {
				t.Fatalf("round %d: connected to %q, want %s", round, got, live)
			}
		}
		// The next dial starts at the dead URL (the one after the lost
		// node, round the list) and must pass it by.
		breakConn(s)
		p.mu.Lock()
		p.sess.kill()
		p.mu.Unlock()
	}

	cfg := rt.cfg.withDefaults()
	cfg.URLs = []string{dead, "amqp://deliverycheck:deliverycheck@127.0.0.1:2/"}
	_, err := dialRabbit(rt.ctx, cfg, "test", 1)
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") || !strings.Contains(err.Error(), "127.0.0.1:2") ||
		strings.Index(err.Error(), "127.0.0.1:2") > strings.Index(err.Error(), "127.0.0.1:1") {
		t.Errorf("dial of two dead nodes from the second: %v", err)
	}
	if strings.Contains(fmt.Sprint(err), "deliverycheck:deliverycheck") {
		t.Errorf("the error shows credentials: %v", err)
	}
}

// On a real 3-node cluster, the node the clients are on (node 0, the
// first of their URLs) is killed: the publisher's next publish and the
// subscriber's next delivery go through another node while node 0 is
// still down, and nothing confirmed is missing.
func TestRabbitFailoverKillNode0(t *testing.T) {
	testenv.SkipIfShort(t, "starts a 3-node RabbitMQ cluster")
	testenv.MustHaveServer(t, "network namespaces", netns.Check())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Config{Services: []string{cluster.RabbitMQ}, Nodes: map[string]int{cluster.RabbitMQ: 3}})
	testenv.MustHaveServer(t, "rabbitmq", err)
	defer func() {
		if t.Failed() {
			for _, n := range c.Nodes(cluster.RabbitMQ) {
				f := n.(*local.RabbitMQNode).LogFile()
				t.Logf("tail of %s's log %s:\n%s", n.Name(), f, logtail.File(f, 60))
			}
		}
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}()
	rc := c.Service(cluster.RabbitMQ).(*local.RabbitMQCluster)
	urls := c.NodeURLs(cluster.RabbitMQ)
	if got := c.ClientURL(cluster.RabbitMQ); got != strings.Join(urls, ",") {
		t.Fatalf("ClientURL %q, want every node's %v", got, urls)
	}
	cfg := RabbitConfig{URLs: urls, Exchange: "failover.events", Subscriptions: []string{"failover.inventory"},
		ReconnectMin: 20 * time.Millisecond, ReconnectMax: 500 * time.Millisecond}
	if err := SetupRabbitMQ(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// A member killed before its queue's registration is on disk does
	// not come back with the queue (see SetupRabbitMQ).
	if err := rc.WaitQuorumQueueDurable(ctx, "/", cfg.Subscriptions[0]); err != nil {
		t.Fatal(err)
	}
	rt := &rabbitTest{t: t, ctx: ctx, cfg: cfg}
	p, s := rt.publisher(RabbitConfirmed), rt.subscriber(cfg.Subscriptions[0])
	before := events("before", 5)
	rt.publishOK(p, before)
	for _, want := range before {
		d := rt.next(s, 10*time.Second)
		sameIdentity(t, d, want)
		if err := s.Ack(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	node0 := rabbitHost(urls[0])
	for _, sess := range []*rabbitSession{p.rabbitSession, s.rabbitSession} {
		if got := sess.currentHost(); got != node0 {
			t.Fatalf("connected to %s before the kill, want node 0's link %s", got, node0)
		}
	}

	k, err := c.Killer(cluster.NodeName(cluster.RabbitMQ, 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()

	// The subscriber waits in Next through the failover, for an event
	// published after it.
	type got struct {
		d   *Delivery
		err error
	}
	next := make(chan got, 1)
	go func() {
		nctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		for {
			d, err := s.Next(nctx)
			if err != nil || strings.HasPrefix(d.ID, "after-") {
				next <- got{d, err}
				return
			}
			// Redelivered from before the kill: settle, or let it go
			// stale with its generation.
			if err := s.Ack(nctx, d); err != nil && !errors.Is(err, ErrStaleDelivery) {
				next <- got{nil, err}
				return
			}
		}
	}()

	var after []Event
	var published time.Duration
	for i := 0; ; i++ {
		ev := events(fmt.Sprintf("after-%d", i), 1)[0]
		pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
		err := p.Publish(pctx, []Event{ev})[0]
		pcancel()
		if err == nil {
			after = append(after, ev)
			published = time.Since(killed)
			break
		}
		leader, members, lerr := rc.QueueLeader(ctx, "/", cfg.Subscriptions[0])
		t.Logf("publish %s %v after the kill: %v (queue leader %s %v %v)", ev.ID, time.Since(killed).Round(time.Millisecond), err, leader, members, lerr)
		if time.Since(killed) > 60*time.Second {
			t.Fatal("no publish confirmed within 60s of node 0's kill")
		}
		time.Sleep(100 * time.Millisecond)
	}
	var r got
	select {
	case r = <-next:
	case <-time.After(70 * time.Second):
		t.Fatal("no delivery within 70s of node 0's kill")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	delivered := time.Since(killed)
	sameIdentity(t, r.d, after[0])
	if err := s.Ack(ctx, r.d); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Service(cluster.NodeName(cluster.RabbitMQ, 0)).(*local.RabbitMQNode).ClusterView(ctx); err == nil {
		t.Fatal("node 0 answers: the clients may not have failed over at all")
	}
	for name, sess := range map[string]*rabbitSession{"publisher": p.rabbitSession, "subscriber": s.rabbitSession} {
		if got := sess.currentHost(); got == node0 || got == "" {
			t.Errorf("%s connected to %q after node 0's kill", name, got)
		} else {
			t.Logf("%s failed over to %s", name, got)
		}
	}
	t.Logf("after node 0's kill: first publish confirmed in %v, its delivery in %v", published.Round(time.Millisecond), delivered.Round(time.Millisecond))
	// Node 0 rejoins, and the clients stay where they are.
	if err := c.Service(cluster.NodeName(cluster.RabbitMQ, 0)).Start(ctx); err != nil {
		t.Fatalf("start node 0 again: %v", err)
	}
	if err := rc.WaitWhole(ctx); err != nil {
		t.Fatal(err)
	}
	rt.publishOK(p, events("rejoined", 1))
}
