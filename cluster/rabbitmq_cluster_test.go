package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/cluster/local"
	"github.com/deliverycheck/deliverycheck/cluster/netns"
	"github.com/deliverycheck/deliverycheck/cluster/probe"
	"github.com/deliverycheck/deliverycheck/internal/logtail"
	"github.com/deliverycheck/deliverycheck/internal/testenv"
)

// rabbitNodes is the size of the clusters these tests run.
const rabbitNodes = 3

// startRabbitMQCluster starts a 3-node RabbitMQ cluster through
// cluster.Start, or ends t when this machine cannot run one: a skip, or
// a failure under testenv.RequireServers. On failure the nodes' log
// tails are in t's log.
func startRabbitMQCluster(tb testing.TB, ctx context.Context) (*cluster.Cluster, *local.RabbitMQCluster) {
	tb.Helper()
	testenv.SkipIfShort(tb, "starts a 3-node RabbitMQ cluster")
	testenv.MustHaveServer(tb, "network namespaces", netns.Check())
	for _, ch := range local.Doctor(ctx, "") {
		if ch.Name == "rabbitmq" && !ch.OK {
			testenv.MustHaveServer(tb, "rabbitmq", errors.New(ch.Detail))
		}
	}
	c, err := cluster.Start(ctx, cluster.Config{
		Services: []string{cluster.RabbitMQ},
		Nodes:    map[string]int{cluster.RabbitMQ: rabbitNodes},
	})
	if err != nil {
		tb.Fatal(err)
	}
	rc := c.Service(cluster.RabbitMQ).(*local.RabbitMQCluster)
	tb.Cleanup(func() {
		if tb.Failed() {
			for _, n := range rc.Nodes() {
				tb.Logf("tail of %s's log %s:\n%s", n.Name(), n.LogFile(), logtail.File(n.LogFile(), 60))
			}
		}
	})
	return c, rc
}

// TestRabbitMQCluster runs one 3-node cluster through every fault in
// turn: each subtest leaves it whole for the next. Every message a
// subtest had confirmed by the broker must come back from a quorum
// queue, whatever happened to a minority of the nodes in between.
func TestRabbitMQCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, rc := startRabbitMQCluster(t, ctx)
	closed := false
	defer func() {
		if !closed {
			if err := c.Close(); err != nil {
				t.Error(err)
			}
		}
	}()
	urls := c.NodeURLs(cluster.RabbitMQ)
	if len(urls) != rabbitNodes || c.ClientURL(cluster.RabbitMQ) != urls[0] {
		t.Fatalf("node URLs %v, client URL %s", urls, c.ClientURL(cluster.RabbitMQ))
	}
	rec := pidSet{}
	rec.add(c.PIDs())
	var dirs []string
	for _, n := range rc.Nodes() {
		dirs = append(dirs, n.Dir())
	}

	t.Run("formed", func(t *testing.T) {
		if err := rc.CheckWhole(ctx); err != nil {
			t.Fatal(err)
		}
		if v := rc.Version(); !strings.HasPrefix(v, "RabbitMQ ") {
			t.Errorf("version %q", v)
		}
		for i, s := range c.Nodes(cluster.RabbitMQ) {
			if want := cluster.NodeName(cluster.RabbitMQ, i); s.Name() != want {
				t.Errorf("node %d named %s, want %s", i, s.Name(), want)
			}
			if _, err := c.Killer(s.Name()); err != nil {
				t.Errorf("%s: %v", s.Name(), err)
			}
		}
		// A quorum queue declared through any node has a member on
		// every node.
		q := "dc.formed"
		conn := dialT(t, ctx, urls[1])
		declareQuorum(t, conn, q)
		leader, members := waitLeader(t, ctx, rc, q, "")
		if len(members) != rabbitNodes {
			t.Fatalf("members %v, want one on every node", members)
		}
		t.Logf("queue %s: leader %s, members %v", q, leader, members)
	})
}

// pidSet remembers every pid a cluster showed.
type pidSet map[int]bool

func (s pidSet) add(pids []int) {
	for _, p := range pids {
		s[p] = true
	}
}

func (s pidSet) alive() []int {
	var out []int
	for p := range s {
		if alive(p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// dialT opens an AMQP connection for the rest of the test.
func dialT(t *testing.T, ctx context.Context, url string) *amqp.Connection {
	t.Helper()
	conn, err := probe.DialAMQP(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.CloseDeadline(time.Now().Add(time.Second)) })
	return conn
}

// declareQuorum declares q as a durable quorum queue.
func declareQuorum(t *testing.T, conn *amqp.Connection, q string) {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}); err != nil {
		t.Fatal(err)
	}
}

// waitLeader waits until a majority of the nodes agrees on a leader of q
// other than not, and returns it with q's members.
func waitLeader(t *testing.T, ctx context.Context, rc *local.RabbitMQCluster, q, not string) (string, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		leader, members, err := rc.QueueLeader(ctx, "/", q)
		if err == nil && leader != not {
			return leader, members
		}
		if err == nil {
			err = fmt.Errorf("leader still %s", leader)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("queue %s: no new leader: %v", q, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

var (
	_ = os.Stat
	_ = filepath.Join
	_ = strconv.Itoa
	_ sync.Mutex
)
