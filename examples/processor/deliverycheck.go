package main

import (
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
)

// endpoint marks crash windows through deliverycheck's endpoint
// (docs/contract.md, "Failpoints"): one POST per window, which the
// harness answers 204 unless the failpoint is armed; armed, it kills
// this process while the call waits. Outside a run it does nothing.
type endpoint struct {
	base string
	http *http.Client
}

func newEndpoint() *endpoint {
	base := os.Getenv("DELIVERYCHECK_ENDPOINT")
	if base == "" {
		return nil
	}
	// Loopback only: never through a proxy. The client keeps its
	// connection alive between calls.
	return &endpoint{base: base, http: &http.Client{Transport: &http.Transport{Proxy: nil}}}
}

// failpoint marks the window name for event; it returns unless armed.
func (e *endpoint) failpoint(name, event string) {
	if e == nil {
		return
	}
	resp, err := e.http.Post(e.base+"/failpoint/"+name+"?event="+url.QueryEscape(event), "", nil)
	if err != nil {
		slog.Warn("deliverycheck endpoint", "err", err) // the harness is gone: go on
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		body, _ := io.ReadAll(resp.Body)
		slog.Warn("deliverycheck endpoint", "status", resp.Status, "body", string(body))
	}
}
