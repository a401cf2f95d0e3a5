package cluster_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/cluster/probe"
	"github.com/deliverycheck/deliverycheck/internal/testenv"
)

// TestRabbitMQUsers: a RabbitMQ, single on every runtime or replicated
// on the local runtime, adds a user of a run's own (the intruder's): it
// logs in on every node, and is gone from every node once deleted. (What
// its permissions allow is tested with the intruder in package pipeline.)
func TestRabbitMQUsers(t *testing.T) {
	testenv.SkipIfShort(t, "starts RabbitMQ")
	for _, rt := range runtimesUnderTest(t) {
		t.Run(rt, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			c, err := cluster.Start(ctx, cluster.Config{Runtime: rt, Services: []string{cluster.RabbitMQ}})
			if err != nil {
				t.Fatal(err)
			}
			checkRabbitMQUsers(t, ctx, c)
		})
	}
	t.Run("local cluster", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		c, _ := startRabbitMQCluster(t, ctx, cluster.Local)
		checkRabbitMQUsers(t, ctx, c)
	})
}

// checkRabbitMQUsers adds, checks and deletes a user on c, then closes c.
func checkRabbitMQUsers(t *testing.T, ctx context.Context, c *cluster.Cluster) {
	defer func() {
		if t.Failed() {
			logTails(t, c)
		}
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}()
	admin, err := c.RabbitUserAdmin(cluster.RabbitMQ)
	if err != nil {
		t.Fatal(err)
	}
	const user, password = "run1-intruder", "s3cret"
	if err := admin.AddUser(ctx, user, password, "^$", `^run1\.events$`, "^$"); err != nil {
		t.Fatal(err)
	}
	login := func(u string) error {
		p, err := url.Parse(u)
		if err != nil {
			return err
		}
		p.User = url.UserPassword(user, password)
		conn, err := probe.DialAMQP(ctx, p.String())
		if err != nil {
			return err
		}
		return conn.Close()
	}
	urls := c.NodeURLs(cluster.RabbitMQ)
	if len(urls) == 0 {
		urls = []string{c.ClientURL(cluster.RabbitMQ)}
	}
	for _, u := range urls {
		if err := login(u); err != nil {
			t.Errorf("log in as %s at %s: %v", user, u, err)
		}
	}
	if ok, err := admin.UserExists(ctx, user); err != nil || !ok {
		t.Errorf("user exists: %v %v", ok, err)
	}
	if err := admin.DeleteUser(ctx, user); err != nil {
		t.Fatal(err)
	}
	if err := admin.DeleteUser(ctx, user); err != nil {
		t.Errorf("delete a user that is gone: %v", err)
	}
	if ok, err := admin.UserExists(ctx, user); err != nil || ok {
		t.Errorf("after delete, user exists: %v %v", ok, err)
	}
	for _, u := range urls {
		if err := login(u); err == nil || !strings.Contains(err.Error(), "403") {
			t.Errorf("log in as a deleted user at %s: %v, want refused (403)", u, err)
		}
	}
}
