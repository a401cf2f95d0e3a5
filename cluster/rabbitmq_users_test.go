package cluster_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/cluster/probe"
)

// checkRabbitMQUsers adds a user of a run's own (the intruder's) to c's
// RabbitMQ, single on every runtime or replicated on the local runtime:
// it logs in on every node, and is gone from every node once deleted. (What
// its permissions allow is tested with the intruder in package pipeline.)
// It runs on servers other tests start anyway (TestConformance's single
// one, TestRabbitMQCluster's local cluster): a RabbitMQ of its own per
// case cost about 25 s of every CI run.
func checkRabbitMQUsers(t *testing.T, ctx context.Context, c *cluster.Cluster) {
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
