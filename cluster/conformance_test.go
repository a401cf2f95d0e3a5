package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/cluster/link"
	"github.com/deliverycheck/deliverycheck/cluster/probe"
	"github.com/deliverycheck/deliverycheck/internal/testenv"
)

// runtimesUnderTest is every runtime this machine can run: local always,
// containers when an engine can provide the images. A missing engine or
// image fails t under testenv.RequireContainers (make test sets it: there
// the containers runtime must be tested, not silently left out).
func runtimesUnderTest(t *testing.T) []string {
	t.Helper()
	out := []string{cluster.Local}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt, why := cluster.ResolveRuntime(ctx, cluster.Auto, cluster.ImageList(nil, cluster.Names()))
	switch {
	case rt == cluster.Containers:
		out = append(out, cluster.Containers)
	case testenv.ContainersRequired():
		t.Fatalf("containers runtime required (%s is set) but unavailable: %s", testenv.RequireContainers, why)
	default:
		t.Logf("containers runtime not tested: %s", why)
	}
	return out
}

// TestConformance runs the same checks against every runtime: a Service
// must behave the same whichever runtime provides it.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real servers")
	}
	for _, rt := range runtimesUnderTest(t) {
		t.Run(rt, func(t *testing.T) {
			// Each runtime's single servers are its own (its own ports,
			// dirs, containers): the two go side by side, as the
			// runner's matrix lanes of single servers do.
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			c, err := cluster.Start(ctx, cluster.Config{Runtime: rt})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := c.Close(); err != nil {
					t.Error(err)
				}
			}()
			if c.Runtime() != rt {
				t.Fatalf("runtime %q, want %q", c.Runtime(), rt)
			}
			for _, name := range cluster.Names() {
				if full(c, name).Version() == "" {
					t.Errorf("%s: no version after Start", name)
				}
			}
			t.Run("start", func(t *testing.T) {
				for _, r := range cluster.Smoke(ctx, c) {
					if r.Err != nil {
						t.Errorf("%s: %v", r.Service, r.Err)
					}
				}
			})
			t.Run("rabbitmq-users", func(t *testing.T) { checkRabbitMQUsers(t, ctx, c) })
			t.Run("kill-restart-keeps-acknowledged-data", func(t *testing.T) {
				for _, name := range cluster.Names() {
					t.Run(name, func(t *testing.T) { killKeepsData(t, ctx, c, name) })
				}
			})
			t.Run("pause-resume", func(t *testing.T) {
				for _, name := range cluster.Names() {
					t.Run(name, func(t *testing.T) {
						s := full(c, name)
						if err := s.Pause(ctx); err != nil {
							t.Fatal(err)
						}
						resumed := false
						defer func() {
							if !resumed {
								_ = s.Resume(context.Background())
							}
						}()
						if err := ping(ctx, c, name, time.Second); err == nil {
							t.Fatal("a paused server answered")
						}
						if err := s.Resume(ctx); err != nil {
							t.Fatal(err)
						}
						resumed = true
						waitPing(t, ctx, c, name)
					})
				}
			})
			t.Run("kill-while-paused", func(t *testing.T) {
				// A nemesis may kill a frozen server: the kill must land
				// (Podman refuses to signal a paused container; the
				// runtime works around it) and the server come back.
				for _, name := range cluster.Names() {
					t.Run(name, func(t *testing.T) {
						s := full(c, name)
						if err := s.Pause(ctx); err != nil {
							t.Fatal(err)
						}
						if err := s.Kill(ctx); err != nil {
							_ = s.Resume(context.Background())
							t.Fatal(err)
						}
						if err := s.Start(ctx); err != nil {
							t.Fatal(err)
						}
						waitPing(t, ctx, c, name)
					})
				}
			})
			t.Run("partition-heal", func(t *testing.T) {
				for _, name := range cluster.Names() {
					t.Run(name, func(t *testing.T) {
						l := c.Link(name)
						if err := l.Partition(link.Both); err != nil {
							t.Fatal(err)
						}
						if err := ping(ctx, c, name, time.Second); err == nil {
							t.Error("answered through a partitioned link")
						}
						if err := l.Heal(); err != nil {
							t.Fatal(err)
						}
						waitPing(t, ctx, c, name)
					})
				}
			})
			t.Run("restart-keeps-endpoint", func(t *testing.T) {
				for _, name := range cluster.Names() {
					t.Run(name, func(t *testing.T) {
						s := full(c, name)
						before := s.Endpoint()
						if err := s.Restart(ctx); err != nil {
							t.Fatal(err)
						}
						if after := s.Endpoint(); after != before {
							t.Errorf("endpoint %s after restart, was %s", after, before)
						}
						waitPing(t, ctx, c, name)
					})
				}
			})
		})
	}
}

// ping is one client round trip to the named service through its link,
// bounded by d.
func ping(ctx context.Context, c *cluster.Cluster, name string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	url := c.ClientURL(name)
	switch name {
	case cluster.Postgres:
		_, err := probe.Postgres(ctx, url)
		return err
	case cluster.Kafka:
		cl, err := kgo.NewClient(kgo.SeedBrokers(url), kgo.DialTimeout(d))
		if err != nil {
			return err
		}
		defer cl.Close()
		return probe.Kafka(ctx, cl, 1)
	case cluster.RabbitMQ:
		_, err := probe.RabbitMQ(ctx, url)
		return err
	}
	return fmt.Errorf("unknown service %s", name)
}

// waitPing waits until the service answers through its link again.
func waitPing(t *testing.T, ctx context.Context, c *cluster.Cluster, name string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		err := ping(ctx, c, name, 3*time.Second)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not answering within 90s: %v", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fullService is a service with every optional ability: both runtimes
// have them all.
type fullService interface {
	cluster.Service
	cluster.Killer
	cluster.Pauser
	cluster.Restarter
	cluster.Versioner
}

// full is the named service with every ability; the test fails (panics)
// if the runtime lacks one.
func full(c *cluster.Cluster, name string) fullService { return c.Service(name).(fullService) }

// killKeepsData writes one acknowledged item, kill -9s the server,
// starts it again and reads the item back: what a server acknowledged
// must survive a crash of its process (or container).
func killKeepsData(t *testing.T, ctx context.Context, c *cluster.Cluster, name string) {
	s := full(c, name)
	url := c.ClientURL(name)
	key := fmt.Sprintf("conf-%d", time.Now().UnixNano())
	var write, read func(context.Context) error
	switch name {
	case cluster.Postgres:
		write = func(ctx context.Context) error {
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				return err
			}
			defer conn.Close(context.Background())
			if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS conformance (k text PRIMARY KEY)"); err != nil {
				return err
			}
			_, err = conn.Exec(ctx, "INSERT INTO conformance VALUES ($1)", key)
			return err
		}
		read = func(ctx context.Context) error {
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				return err
			}
			defer conn.Close(context.Background())
			var n int
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM conformance WHERE k = $1", key).Scan(&n); err != nil {
				return err
			}
			if n != 1 {
				return fmt.Errorf("committed row %s: %d copies after the crash", key, n)
			}
			return nil
		}
	case cluster.Kafka:
		write = func(ctx context.Context) error {
			cl, err := kgo.NewClient(kgo.SeedBrokers(url), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.AllowAutoTopicCreation())
			if err != nil {
				return err
			}
			defer cl.Close()
			return cl.ProduceSync(ctx, &kgo.Record{Topic: key, Value: []byte(key)}).FirstErr()
		}
		read = func(ctx context.Context) error {
			cl, err := kgo.NewClient(kgo.SeedBrokers(url), kgo.ConsumeTopics(key),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err != nil {
				return err
			}
			defer cl.Close()
			for {
				fs := cl.PollFetches(ctx)
				if err := ctx.Err(); err != nil {
					return fmt.Errorf("acked record not back: %w", err)
				}
				found := false
				fs.EachRecord(func(r *kgo.Record) { found = found || string(r.Value) == key })
				if found {
					return nil
				}
			}
		}
	case cluster.RabbitMQ:
		write = func(ctx context.Context) error {
			conn, err := probe.DialAMQP(ctx, url)
			if err != nil {
				return err
			}
			defer conn.Close()
			ch, err := conn.Channel()
			if err != nil {
				return err
			}
			if _, err := ch.QueueDeclare(key, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}); err != nil {
				return err
			}
			if err := ch.Confirm(false); err != nil {
				return err
			}
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", key, true, false,
				amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(key)})
			if err != nil {
				return err
			}
			if ok, err := dc.WaitContext(ctx); err != nil || !ok {
				return fmt.Errorf("not confirmed (ack=%v): %v", ok, err)
			}
			// RabbitMQ 3.10 saves a new quorum queue's registration
			// every 500ms; both runtimes can wait for it.
			w, ok := s.(interface {
				WaitQuorumQueueDurable(context.Context, string, string) error
			})
			if !ok {
				return errors.New("rabbitmq service cannot wait for its quorum queue registration")
			}
			return w.WaitQuorumQueueDurable(ctx, "/", key)
		}
		read = func(ctx context.Context) error {
			conn, err := probe.DialAMQP(ctx, url)
			if err != nil {
				return err
			}
			defer conn.Close()
			ch, err := conn.Channel()
			if err != nil {
				return err
			}
			for {
				m, ok, err := ch.Get(key, true)
				if err != nil {
					return err
				}
				if ok && string(m.Body) == key {
					return nil
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("confirmed message not back: %w", ctx.Err())
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := write(wctx); err != nil {
		t.Fatalf("write before the crash: %v", err)
	}
	if err := s.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ping(ctx, c, name, time.Second); err == nil {
		t.Fatal("a killed server answered")
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// A client may need a moment to find the restarted server through
	// its link (Kafka's metadata, RabbitMQ's queue leader): retry the
	// read until a deadline.
	deadline := time.Now().Add(60 * time.Second)
	for {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := read(rctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after kill -9 and restart: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
