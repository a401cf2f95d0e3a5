package failpoint

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"
)

// EnvEndpoint names the environment variable holding the harness's
// endpoint for one external component: an http://127.0.0.1 URL, different
// for each component, that the harness serves for the run. It is absent
// outside a run. The protocol is plain HTTP so a component in any
// language can speak it (docs/contract.md):
//
//	POST $DELIVERYCHECK_ENDPOINT/failpoint/<name>?event=<id>
//	    204: not armed, go on. Armed: the harness records the crash and
//	    kills the caller's process group; the call never returns.
//	POST $DELIVERYCHECK_ENDPOINT/history
//	    one history op per line, without index, time or process.
const EnvEndpoint = "DELIVERYCHECK_ENDPOINT"

// Inject marks a crash window in a team's own component, as etcd's gofail
// does: call it exactly where a crash matters, e.g.
//
//	tx.Commit(ctx)
//	failpoint.Inject("after-commit-before-ack")
//	msg.Ack()
//
// It is a no-op (one atomic load) unless the process runs under
// deliverycheck with EnvEndpoint set. Then it asks the harness whether
// name is armed; when it is, the harness records a crash op naming it and
// kills the process while the call is blocked, so Inject does not return.
func Inject(name string) { InjectEvent(name, "") }

// InjectEvent is [Inject] naming the event in flight, which the crash op
// records, so the report can say which event the crash interrupted.
func InjectEvent(name, event string) {
	if c := defaultClient(); c != nil {
		c.Inject(context.Background(), name, event)
	}
}

// defaultClient is the process's client, from EnvEndpoint. Inject is a
// package function so a team can call it anywhere without plumbing, which
// is why this package keeps this one piece of process state.
var defaultClient = sync.OnceValue(func() *Client {
	if u := os.Getenv(EnvEndpoint); u != "" {
		return NewClient(u)
	}
	return nil
})

// Client speaks the endpoint protocol to one component's endpoint. The
// package functions use the one EnvEndpoint names; a test, or a process
// that hosts several components, can make its own.
type Client struct {
	base string
	http *http.Client
	warn sync.Once
}

// NewClient returns a client of the endpoint at base (the value of
// EnvEndpoint). It keeps one connection alive, so a call costs a loopback
// round trip, not a TCP handshake.
func NewClient(base string) *Client {
	tr := &http.Transport{
		// The endpoint is always on loopback: never use a proxy.
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     time.Minute,
	}
	return &Client{base: base, http: &http.Client{Transport: tr}}
}

// Inject tells the harness the component is about to cross failpoint
// name with event in flight ("" for none). It returns when the failpoint
// is not armed; when it is, the process is killed before the call
// returns. A harness that cannot be reached, or an answer other than
// "not armed", is logged once and otherwise ignored: a component must
// never fail because its test harness went away (outside a run it dies
// with the harness anyway).
func (c *Client) Inject(ctx context.Context, name, event string) {
	u := c.base + "/failpoint/" + url.PathEscape(name)
	if event != "" {
		u += "?event=" + url.QueryEscape(event)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		c.warnOnce("failpoint: bad endpoint", err)
		return
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.warnOnce("failpoint: endpoint unreachable", err)
		return
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		c.warnOnce("failpoint: endpoint refused the call", fmt.Errorf("%s: %s", resp.Status, body))
	}
}

func (c *Client) warnOnce(msg string, err error) {
	c.warn.Do(func() { slog.Warn(msg, "endpoint", c.base, "err", err) })
}
