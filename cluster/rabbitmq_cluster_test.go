package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/cluster/containers"
	"github.com/deliverycheck/deliverycheck/cluster/local"
	"github.com/deliverycheck/deliverycheck/cluster/netns"
	"github.com/deliverycheck/deliverycheck/cluster/probe"
	"github.com/deliverycheck/deliverycheck/internal/logtail"
	"github.com/deliverycheck/deliverycheck/internal/testenv"
)

// rabbitNodes is the size of the clusters these tests run.
const rabbitNodes = 3

// rabbitCluster is what both runtimes' RabbitMQ clusters are
// (local.RabbitMQCluster, containers.RabbitMQCluster).
type rabbitCluster interface {
	cluster.Service
	cluster.Versioner
	CheckWhole(ctx context.Context) error
	WaitWhole(ctx context.Context) error
	QueueLeader(ctx context.Context, vhost, name string) (string, []string, error)
	WaitQuorumQueueDurable(ctx context.Context, vhost, name string) error
}

var (
	_ rabbitCluster = (*local.RabbitMQCluster)(nil)
	_ rabbitCluster = (*containers.RabbitMQCluster)(nil)
)

// startRabbitMQCluster starts a 3-node RabbitMQ cluster through
// cluster.Start on runtime rt, or ends t when this machine cannot run
// one: a skip, or a failure under testenv.RequireServers. On failure the
// nodes' log tails are in t's log.
func startRabbitMQCluster(tb testing.TB, ctx context.Context, rt string) (*cluster.Cluster, rabbitCluster) {
	tb.Helper()
	testenv.SkipIfShort(tb, "starts a 3-node RabbitMQ cluster")
	testenv.MustHaveServer(tb, "network namespaces", netns.Check())
	if rt == cluster.Local {
		for _, ch := range local.Doctor(ctx, "") {
			if ch.Name == "rabbitmq" && !ch.OK {
				testenv.MustHaveServer(tb, "rabbitmq", errors.New(ch.Detail))
			}
		}
	}
	c, err := cluster.Start(ctx, cluster.Config{
		Runtime:  rt,
		Services: []string{cluster.RabbitMQ},
		Nodes:    map[string]int{cluster.RabbitMQ: rabbitNodes},
	})
	if err != nil {
		tb.Fatal(err)
	}
	rc := c.Service(cluster.RabbitMQ).(rabbitCluster)
	return c, rc
}

// logTails puts the end of every node's log in tb's log: call it before
// Close, which removes the logs.
func logTails(tb testing.TB, c *cluster.Cluster) {
	for _, n := range c.Nodes(cluster.RabbitMQ) {
		if l, ok := n.(cluster.LogFiler); ok {
			tb.Logf("tail of %s's log %s:\n%s", n.Name(), l.LogFile(), logtail.File(l.LogFile(), 100))
		}
	}
}

// TestRabbitMQCluster runs one 3-node cluster per runtime through every
// fault in turn, each subtest leaving it whole for the next: kill -9 of a
// queue's leader, a pause, a partition, a stop of the whole cluster, and
// finally Close. Every message the broker confirmed into a quorum queue
// must come back, whatever happened to a minority of the nodes in
// between.
func TestRabbitMQCluster(t *testing.T) {
	testenv.SkipIfShort(t, "starts a 3-node RabbitMQ cluster")
	testenv.MustHaveServer(t, "network namespaces", netns.Check())
	for _, rt := range runtimesUnderTest(t) {
		t.Run(rt, func(t *testing.T) {
			// Each runtime's cluster is its own (its own namespaces or
			// network, ports, dirs): the two go side by side, as
			// TestConformance's do. Their faults mostly wait out
			// RabbitMQ's own timeouts (a paused or cut-off node is found
			// gone by the net tick), not on the CPU.
			t.Parallel()
			testRabbitMQCluster(t, rt)
		})
	}
}

func testRabbitMQCluster(t *testing.T, rt string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, rc := startRabbitMQCluster(t, ctx, rt)
	closed := false
	defer func() {
		if !closed {
			if t.Failed() {
				logTails(t, c)
			}
			if err := c.Close(); err != nil {
				t.Error(err)
			}
		}
	}()
	urls := c.NodeURLs(cluster.RabbitMQ)
	if len(urls) != rabbitNodes || c.ClientURL(cluster.RabbitMQ) != strings.Join(urls, ",") {
		t.Fatalf("node URLs %v, client URL %s", urls, c.ClientURL(cluster.RabbitMQ))
	}
	nodes := c.Nodes(cluster.RabbitMQ)
	index := func(name string) int {
		for i, n := range nodes {
			if n.Name() == name {
				return i
			}
		}
		t.Fatalf("no node %s", name)
		return -1
	}
	rec := pidSet{}
	rec.add(c.PIDs())
	t.Cleanup(func() { rec.add(c.PIDs()) })

	t.Run("formed", func(t *testing.T) {
		if err := rc.CheckWhole(ctx); err != nil {
			t.Fatal(err)
		}
		if v := rc.Version(); !strings.HasPrefix(v, "RabbitMQ ") {
			t.Errorf("version %q", v)
		}
		for i, s := range nodes {
			if want := cluster.NodeName(cluster.RabbitMQ, i); s.Name() != want {
				t.Errorf("node %d named %s, want %s", i, s.Name(), want)
			}
			if _, err := c.Killer(s.Name()); err != nil {
				t.Errorf("%s: %v", s.Name(), err)
			}
		}
		// A quorum queue declared through any node's link has a member
		// on every node, and every node's link serves it.
		q := "dc.formed"
		declareQuorum(t, dialT(t, ctx, urls[1]), q)
		leader, members := waitLeader(t, ctx, rc, q, "")
		if len(members) != rabbitNodes {
			t.Fatalf("members %v, want one on every node", members)
		}
		p := newPublisher(t, dialT(t, ctx, urls[2]), q)
		p.publish(t, ctx, "formed", 3)
		got := drain(t, ctx, urls[0], q, len(p.confirmed))
		if !slices.Equal(got, p.confirmed) {
			t.Fatalf("got %v, want %v", got, p.confirmed)
		}
		t.Logf("queue %s: leader %s, members %v", q, leader, members)
	})

	t.Run("kill-leader", func(t *testing.T) {
		q := "dc.kill-leader"
		declareQuorum(t, dialT(t, ctx, urls[0]), q)
		if err := rc.WaitQuorumQueueDurable(ctx, "/", q); err != nil {
			t.Fatal(err)
		}
		leader, _ := waitLeader(t, ctx, rc, q, "")
		l := index(leader)
		pubAt, getAt := (l+1)%rabbitNodes, (l+2)%rabbitNodes
		p := newPublisher(t, dialT(t, ctx, urls[pubAt]), q)
		p.publish(t, ctx, "before", 20)
		k, err := c.Killer(leader)
		if err != nil {
			t.Fatal(err)
		}
		if err := k.Kill(ctx); err != nil {
			t.Fatal(err)
		}
		if st := nodes[l].(interface{ ExitStatus() string }).ExitStatus(); st != "signal: killed" {
			t.Errorf("%s after kill: exit status %q", leader, st)
		}
		newLeader, _ := waitLeader(t, ctx, rc, q, leader)
		t.Logf("leader %s killed, new leader %s", leader, newLeader)
		p.publish(t, ctx, "during", 20)
		got := drain(t, ctx, urls[getAt], q, 1)
		if err := nodes[l].Start(ctx); err != nil {
			t.Fatal(err)
		}
		rec.add(c.PIDs())
		waitWhole(t, ctx, rc)
		p.publish(t, ctx, "after", 10)
		// Through the node that was killed: it serves the queue again.
		got = append(got, drain(t, ctx, urls[l], q, len(p.confirmed)-len(got))...)
		checkNoneLost(t, p.confirmed, got)
	})

	t.Run("pause-resume", func(t *testing.T) {
		q := "dc.pause"
		declareQuorum(t, dialT(t, ctx, urls[0]), q)
		leader, _ := waitLeader(t, ctx, rc, q, "")
		l := index(leader)
		p := newPublisher(t, dialT(t, ctx, urls[(l+1)%rabbitNodes]), q)
		p.publish(t, ctx, "before", 10)
		s, err := c.Pauser(leader)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		resumed := false
		defer func() {
			if !resumed {
				_ = s.Resume(context.Background())
			}
		}()
		// A frozen node answers nothing, not even to erl_call.
		qctx, qcancel := context.WithTimeout(ctx, 2*time.Second)
		_, _, err = nodes[l].(local.RabbitMQViewer).ClusterView(qctx)
		qcancel()
		if err == nil {
			t.Fatalf("paused %s answered", leader)
		}
		// The majority elects a leader and confirms without it.
		newLeader, _ := waitLeader(t, ctx, rc, q, leader)
		p.publish(t, ctx, "paused", 10)
		if err := s.Resume(ctx); err != nil {
			t.Fatal(err)
		}
		resumed = true
		t.Logf("leader %s paused, new leader %s", leader, newLeader)
		waitWholeMending(t, ctx, c, rc, leader)
		// On a new connection: autoheal may have restarted the rabbit
		// application of the publisher's node, closing its clients
		// (4.0.5 picked the majority's side as the loser once).
		p2 := newPublisher(t, dialT(t, ctx, urls[(l+1)%rabbitNodes]), q)
		p2.publish(t, ctx, "resumed", 5)
		all := append(p.confirmed, p2.confirmed...)
		checkNoneLost(t, all, drain(t, ctx, urls[l], q, len(all)))
	})

	t.Run("partition-leader", func(t *testing.T) {
		q := "dc.partition"
		declareQuorum(t, dialT(t, ctx, urls[0]), q)
		leader, _ := waitLeader(t, ctx, rc, q, "")
		l := index(leader)
		var majority []string
		for _, n := range nodes {
			if n.Name() != leader {
				majority = append(majority, n.Name())
			}
		}
		m := index(majority[0])
		p := newPublisher(t, dialT(t, ctx, urls[m]), q)
		p.publish(t, ctx, "before", 10)
		f, err := c.Network().Partition(ctx, []string{leader}, majority)
		if err != nil {
			t.Fatal(err)
		}
		healed := false
		defer func() {
			if !healed {
				_, _ = f.Heal(context.Background())
			}
		}()
		// Confirmed publishes through the majority go on, to a leader the
		// majority elects: the partition is real to the servers.
		p.publish(t, ctx, "cut", 20)
		newLeader, _ := waitLeader(t, ctx, rc, q, leader)
		p.publish(t, ctx, "new-leader", 10)
		ev, err := f.Heal(ctx)
		if err != nil {
			t.Fatal(err)
		}
		healed = true
		if ev.Packets() == 0 {
			t.Errorf("partition dropped nothing: %s", ev)
		}
		t.Logf("leader %s cut off (%s), new leader %s", leader, ev, newLeader)
		waitWholeMending(t, ctx, c, rc, leader)
		// The node that was cut off serves again, and loses nothing.
		p2 := newPublisher(t, dialT(t, ctx, urls[l]), q)
		p2.publish(t, ctx, "healed", 5)
		checkNoneLost(t, append(p.confirmed, p2.confirmed...), drain(t, ctx, urls[l], q, len(p.confirmed)+len(p2.confirmed)))
	})

	t.Run("wipe-leader", func(t *testing.T) {
		// The leader of a quorum queue, which also holds a classic
		// queue, is replaced with an empty disk: the quorum queue keeps
		// every confirmed message and has a member on every node again,
		// the classic queue is gone with its node.
		q, cq := "dc.wipe", "dc.wipe-classic"
		declareQuorum(t, dialT(t, ctx, urls[0]), q)
		if err := rc.WaitQuorumQueueDurable(ctx, "/", q); err != nil {
			t.Fatal(err)
		}
		leader, _ := waitLeader(t, ctx, rc, q, "")
		l := index(leader)
		declareClassic(t, dialT(t, ctx, urls[l]), cq)
		if home, members, err := nodes[l].(local.RabbitMQViewer).QueueLeader(ctx, "/", cq); err != nil || home != leader || len(members) != 1 {
			t.Fatalf("classic queue %s: home %s, members %v, %v; want %s alone", cq, home, members, err, leader)
		}
		classic := newPublisher(t, dialT(t, ctx, urls[l]), cq)
		classic.publish(t, ctx, "classic", 5)
		p := newPublisher(t, dialT(t, ctx, urls[(l+1)%rabbitNodes]), q)
		p.publish(t, ctx, "before", 20)
		w, err := c.Wiper(leader)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		ev, err := w.Wipe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("wipe: %s (%v)", ev, time.Since(start).Round(time.Millisecond))
		if !strings.Contains(ev, "killed (signal: killed)") || strings.Contains(ev, " 0 files") {
			t.Errorf("wipe evidence %q: want the kill and the files removed", ev)
		}
		newLeader, _ := waitLeader(t, ctx, rc, q, leader)
		p.publish(t, ctx, "wiped", 20)
		start = time.Now()
		ev, err = w.Rejoin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rec.add(c.PIDs())
		t.Logf("rejoin: %s (%v; new leader %s)", ev, time.Since(start).Round(time.Millisecond), newLeader)
		if !strings.Contains(ev, "1 classic queue deleted") || !strings.Contains(ev, "added back to") {
			t.Errorf("rejoin evidence %q: want the classic queue deleted and the quorum queues grown", ev)
		}
		if _, members := waitLeader(t, ctx, rc, q, ""); len(members) != rabbitNodes {
			t.Errorf("%s after the rejoin: members %v, want one on every node", q, members)
		}
		ch, err := dialT(t, ctx, urls[l]).Channel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclarePassive(cq, true, false, false, false, nil); err == nil {
			t.Errorf("classic queue %s outlived the wipe of its node", cq)
		}
		p.publish(t, ctx, "rejoined", 10)
		// Through the node that was wiped: it serves the queue again.
		checkNoneLost(t, p.confirmed, drain(t, ctx, urls[l], q, len(p.confirmed)))
	})

	t.Run("stop-start", func(t *testing.T) {
		q := "dc.stop-start"
		declareQuorum(t, dialT(t, ctx, urls[0]), q)
		p := newPublisher(t, dialT(t, ctx, urls[1]), q)
		p.publish(t, ctx, "before", 10)
		if err := rc.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if err := rc.Start(ctx); err != nil {
			t.Fatal(err)
		}
		rec.add(c.PIDs())
		if _, members := waitLeader(t, ctx, rc, q, ""); len(members) != rabbitNodes {
			t.Errorf("members after restart %v", members)
		}
		checkNoneLost(t, p.confirmed, drain(t, ctx, urls[2], q, len(p.confirmed)))
	})

	t.Run("users", func(t *testing.T) {
		if rt != cluster.Local {
			t.Skip("users of a run's own are the local runtime's only on a cluster")
		}
		checkRabbitMQUsers(t, ctx, c)
	})

	top := t
	t.Run("close-leaves-nothing", func(t *testing.T) {
		if top.Failed() {
			logTails(t, c)
		}
		var dirs, nss, ctrs []string
		for _, n := range nodes {
			dirs = append(dirs, n.(interface{ Dir() string }).Dir())
			nss = append(nss, c.Network().Namespace(n.Name()))
			if cn, ok := n.(containerNode); ok {
				ctrs = append(ctrs, cn.ContainerID(), cn.HolderID())
			}
		}
		rec.add(c.PIDs())
		closed = true
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if left := rec.alive(); len(left) > 0 {
			t.Errorf("alive after Close: %v", left)
		}
		for _, d := range dirs {
			if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("dir %s left: %v", d, err)
			}
		}
		for _, ns := range nss {
			if _, err := os.Stat(filepath.Join("/run/netns", ns)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("namespace %s left: %v", ns, err)
			}
		}
		if len(ctrs) > 0 {
			eng, err := containers.Detect(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range ctrs {
				if ok, err := containers.Exists(ctx, eng, id); err != nil || ok {
					t.Errorf("container %.12s left (%v)", id, err)
				}
			}
		}
	})
}

// waitWhole waits, bounded, until the cluster is whole again. The bound
// allows for two rounds of 3.10.8's autoheal, which retries after 60 s
// when the nodes saw a partition at different moments.
func waitWhole(t *testing.T, ctx context.Context, rc rabbitCluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 150*time.Second)
	defer cancel()
	start := time.Now()
	if err := rc.WaitWhole(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster whole after %v", time.Since(start).Round(time.Millisecond))
}

// autohealGrace is how long the cluster is given to mend itself after a
// node that was frozen or cut off is back, before the test restarts that
// node as an operator would. Autoheal needs 0.5 to 4 s when it works;
// RabbitMQ 3.10.8 (local) and 4.0.5 (containers) often never finish it
// (after a leader's pause or partition: the node no longer answers
// erl_call and the others keep it out; 3.10.8 retries only after 60 s),
// which is RabbitMQ's weakness, not the fault's, and would otherwise fail
// every subtest after this one. The restart (kill -9, start) mends it in
// about 3 s; waiting 60 s for an autoheal that did not come cost a minute
// of most CI runs. (4.0.5 once needed over 20 s after a pause: the
// restart then mends what autoheal was still doing.)
const autohealGrace = 20 * time.Second

// waitWholeMending waits for the cluster to be whole again after the
// fault on node ended: first on its own, for autohealGrace, then after
// restarting node with kill -9 and a start. Not a clean stop: the node
// autoheal left out is wedged (it answers no erl_call), and a clean stop
// of it 20 s after a fault waited out its whole 40 s deadline before the
// kill came anyway; on containers a stop once raced the engine's own. What
// a quorum queue confirmed must survive the kill as it survives any
// restart, which the callers check after.
func waitWholeMending(t *testing.T, ctx context.Context, c *cluster.Cluster, rc rabbitCluster, node string) {
	t.Helper()
	start := time.Now()
	gctx, cancel := context.WithTimeout(ctx, autohealGrace)
	err := rc.WaitWhole(gctx)
	cancel()
	if err == nil {
		t.Logf("cluster whole after %v", time.Since(start).Round(time.Millisecond))
		return
	}
	t.Logf("cluster not whole %v after the fault on %s ended (%v): restarting %s (kill -9, start), as an operator would", autohealGrace, node, err, node)
	svc := c.Service(node)
	if svc == nil {
		t.Fatalf("no RabbitMQ node %s", node)
	}
	k, err := c.Killer(node)
	if err != nil {
		t.Fatal(err)
	}
	// A kill that finds the node already gone is no failure: the start
	// below says whether it is down.
	if err := k.Kill(ctx); err != nil {
		t.Logf("kill %s: %v", node, err)
	}
	if err := svc.Start(ctx); err != nil {
		t.Fatalf("restart %s: %v", node, err)
	}
	waitWhole(t, ctx, rc)
}

// publisher publishes persistent messages to a queue on a confirm-mode
// channel and remembers those the broker confirmed.
type publisher struct {
	ch        *amqp.Channel
	q         string
	n         int
	confirmed []string
}

func newPublisher(t *testing.T, conn *amqp.Connection, q string) *publisher {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	return &publisher{ch: ch, q: q}
}

// publish publishes n messages one at a time, each waited for: a
// confirm may take an election, never forever.
func (p *publisher) publish(t *testing.T, ctx context.Context, prefix string, n int) {
	t.Helper()
	for range n {
		p.n++
		body := prefix + "-" + strconv.Itoa(p.n)
		dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, "", p.q, false, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, MessageId: body, Body: []byte(body),
		})
		if err != nil {
			t.Fatalf("publish %s: %v", body, err)
		}
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		ok, err := dc.WaitContext(wctx)
		cancel()
		switch {
		case err != nil:
			t.Fatalf("publish %s: no confirm: %v", body, err)
		case ok:
			p.confirmed = append(p.confirmed, body)
		default:
			t.Logf("publish %s: nacked", body)
		}
	}
}

// drain gets and acks every message in q through url, retrying until at
// least want came (a quorum queue answers once it has a leader, and a
// node just back may not serve yet).
func drain(t *testing.T, ctx context.Context, url, q string, want int) []string {
	t.Helper()
	var got []string
	testenv.Eventually(t, ctx, 60*time.Second, fmt.Sprintf("%d messages from %s", want, q), func() error {
		conn, err := probe.DialAMQP(ctx, url)
		if err != nil {
			return err
		}
		defer conn.CloseDeadline(time.Now().Add(time.Second))
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		for {
			d, ok, err := ch.Get(q, false)
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			got = append(got, string(d.Body))
			if err := d.Ack(false); err != nil {
				return err
			}
		}
		if len(got) < want {
			return fmt.Errorf("%d of %d messages", len(got), want)
		}
		return nil
	})
	return got
}

// checkNoneLost fails t if a confirmed message is not among got.
func checkNoneLost(t *testing.T, confirmed, got []string) {
	t.Helper()
	var lost []string
	for _, m := range confirmed {
		if !slices.Contains(got, m) {
			lost = append(lost, m)
		}
	}
	if len(lost) > 0 {
		t.Fatalf("%d of %d confirmed messages lost: %v (got %v)", len(lost), len(confirmed), lost, got)
	}
	t.Logf("%d confirmed, %d got, none lost", len(confirmed), len(got))
}

// rabbitChildEnv makes TestRabbitMQClusterChild start a cluster, report
// it and wait to be killed.
const rabbitChildEnv = "DELIVERYCHECK_RABBITMQ_CLUSTER_CHILD"

// TestRabbitMQClusterChild is the child of TestRabbitMQClusterHarnessKilled;
// it does nothing in a normal run.
func TestRabbitMQClusterChild(t *testing.T) {
	if os.Getenv(rabbitChildEnv) == "" {
		t.Skip("only runs as the child of TestRabbitMQClusterHarnessKilled")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, rc := startRabbitMQCluster(t, ctx, cluster.Local)
	defer c.Close()
	// The namespaces' hosts files must go like the temp dirs.
	rep := childReport{PIDs: c.PIDs(), Netns: []string{c.Network().Name()}}
	for _, n := range rc.(*local.RabbitMQCluster).Nodes() {
		ns := c.Network().Namespace(n.Name())
		rep.Dirs = append(rep.Dirs, n.Dir(), filepath.Join("/etc/netns", ns))
		rep.Netns = append(rep.Netns, ns)
	}
	b, _ := json.Marshal(rep)
	fmt.Println("REPORT", string(b))
	<-ctx.Done() // the parent kills us long before
	t.Fatal("child harness was not killed")
}

// TestRabbitMQClusterHarnessKilled: a harness SIGKILLed with a cluster
// running leaves nothing behind: the guards kill every node's VM and
// epmd, and remove the temp dirs and the namespaces.
func TestRabbitMQClusterHarnessKilled(t *testing.T) {
	testenv.SkipIfShort(t, "starts a 3-node RabbitMQ cluster")
	testenv.MustHaveServer(t, "network namespaces", netns.Check())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	shmBefore := shmFiles(t)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestRabbitMQClusterChild$", "-test.v")
	cmd.Env = append(os.Environ(), rabbitChildEnv+"=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rep := readReport(t, out)
	if len(rep.PIDs) == 0 {
		t.Fatalf("child reported no process: %+v", rep)
	}
	_ = cmd.Process.Kill()
	go func() { _, _ = io.Copy(io.Discard, out) }()
	_ = cmd.Wait()
	waitGone(t, ctx, rep, shmBefore)
	if t.Failed() {
		t.Logf("child stderr:\n%s", stderr.String())
	}
}

// BenchmarkRabbitMQClusterColdStart measures cluster.Start of a 3-node
// RabbitMQ cluster from nothing (the nodes' network, links, three nodes
// formed into one cluster, each answering AMQP) until ready, on each
// runtime, and reports the memory of the three Erlang VMs once ready
// (MiB-rss, their sum; on the containers runtime the containers' memory
// less their page cache). Teardown is not timed. The budget on a 2-core
// machine is 20 s.
func BenchmarkRabbitMQClusterColdStart(b *testing.B) {
	for _, rt := range benchRuntimes(b) {
		b.Run(rt, func(b *testing.B) {
			var rss float64
			var runs int
			for b.Loop() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				c, _ := startRabbitMQCluster(b, ctx, rt)
				cancel()
				b.StopTimer()
				rss += nodesMemMiB(b, c, cluster.RabbitMQ, func(pids []int) float64 { return float64(vmRSSOf(b, pids)) / (1 << 20) })
				runs++
				if err := c.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(rss/float64(runs), "MiB-rss")
		})
	}
}

// vmRSS is the summed resident memory of the cluster's Erlang VMs
// (beam.smp), in bytes.
func vmRSS(tb testing.TB, rc *local.RabbitMQCluster) int64 { return vmRSSOf(tb, rc.PIDs()) }

// vmRSSOf is the summed resident memory of the Erlang VMs among pids.
func vmRSSOf(tb testing.TB, pids []int) int64 {
	tb.Helper()
	var total int64
	for _, pid := range pids {
		dir := "/proc/" + strconv.Itoa(pid)
		comm, err := os.ReadFile(dir + "/comm")
		if err != nil || strings.TrimSpace(string(comm)) != "beam.smp" {
			continue
		}
		status, err := os.ReadFile(dir + "/status")
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				total += kb << 10
			}
		}
	}
	if total == 0 {
		tb.Fatal("no beam.smp among the cluster's processes")
	}
	return total
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

// declareClassic declares q as a durable classic queue, which lives on
// the node conn is connected to.
func declareClassic(t *testing.T, conn *amqp.Connection, q string) {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeClassic}); err != nil {
		t.Fatal(err)
	}
}

// waitLeader waits until a majority of the nodes agrees on a leader of q
// other than not, and returns it with q's members.
func waitLeader(t *testing.T, ctx context.Context, rc rabbitCluster, q, not string) (string, []string) {
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
