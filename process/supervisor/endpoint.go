package supervisor

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/deliverycheck/deliverycheck/failpoint"
	"github.com/deliverycheck/deliverycheck/history"
)

// The endpoint is how a component in any language takes part in a run's
// failpoints and history without importing Go: a loopback HTTP server,
// one URL per external worker (failpoint.EnvEndpoint). A failpoint call
// blocks while the harness decides; when the failpoint is armed, the
// harness records the crash and SIGKILLs the worker's process group before
// it answers, so the crash lands exactly in the window the component
// named, whatever its language. docs/contract.md is the protocol's
// reference; failpoint.Client is the Go client.

// maxHistoryBody bounds one history request: lineage comes a few ops at a
// time, and a runaway client must not make the harness buffer without end.
const maxHistoryBody = 4 << 20

// harnessOnly are the history functions only the harness and its nemesis
// write: a component's endpoint may not, since the checker trusts them
// as the run's own facts (its subscriptions, faults, drain and final
// state).
var harnessOnly = map[history.F]bool{
	history.Setup: true, history.Fault: true, history.Drain: true, history.FinalRead: true,
	history.Crash: true, history.Restart: true,
	// The stage's declaration: its output topics are the harness's to
	// say (a processor's own would redefine what the checker owes).
	history.TxnStage: true,
}

// endpoint is the server; it exists from the first external worker on.
type endpoint struct {
	ln    net.Listener
	srv   *http.Server
	token string // per run, so a stray process of another run is refused
	done  chan struct{}
}

// EndpointURL is the endpoint of external worker name, as its
// failpoint.EnvEndpoint holds it, or "" before any external worker was
// started.
func (s *Supervisor) EndpointURL(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ep == nil {
		return ""
	}
	return s.endpointURLLocked(name)
}

func (s *Supervisor) endpointURLLocked(name string) string {
	return "http://" + s.ep.ln.Addr().String() + "/" + s.ep.token + "/" + name
}

// startEndpointLocked starts the endpoint if it is not running.
func (s *Supervisor) startEndpointLocked() error {
	if s.ep != nil {
		return nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("supervisor: endpoint: %w", err)
	}
	var tok [12]byte
	_, _ = rand.Read(tok[:])
	ep := &endpoint{ln: ln, token: hex.EncodeToString(tok[:]), done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /{token}/{worker}/failpoint/{name}", s.serveFailpoint)
	mux.HandleFunc("POST /{token}/{worker}/history", s.serveHistory)
	ep.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: nil}
	go func() {
		defer close(ep.done)
		_ = ep.srv.Serve(ln)
	}()
	s.ep = ep
	return nil
}

// stopEndpoint closes the endpoint, after every worker has exited.
func (s *Supervisor) stopEndpoint() {
	s.mu.Lock()
	ep := s.ep
	s.mu.Unlock()
	if ep == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ep.srv.Shutdown(ctx); err != nil {
		_ = ep.srv.Close()
	}
	<-ep.done
}

// endpointWorker is the external worker a request's path names, or an
// error already answered.
func (s *Supervisor) endpointWorker(rw http.ResponseWriter, r *http.Request) *worker {
	s.mu.Lock()
	ep := s.ep
	w := s.workers[r.PathValue("worker")]
	s.mu.Unlock()
	if ep == nil || r.PathValue("token") != ep.token {
		http.Error(rw, "not this run's endpoint", http.StatusNotFound)
		return nil
	}
	if w == nil || w.external == nil {
		http.Error(rw, fmt.Sprintf("no external worker %q in this run", r.PathValue("worker")), http.StatusNotFound)
		return nil
	}
	return w
}

// serveFailpoint answers "about to cross failpoint name": 204 when it
// does not fire; when it fires, it records the crash, kills the caller's
// process group and never answers.
func (s *Supervisor) serveFailpoint(rw http.ResponseWriter, r *http.Request) {
	w := s.endpointWorker(rw, r)
	if w == nil {
		return
	}
	t, err := failpoint.ParseAny(r.PathValue("name"))
	if err != nil || strings.Contains(r.PathValue("name"), "=") {
		http.Error(rw, fmt.Sprintf("bad failpoint name %q: use letters, digits, '.', '-' and '_'", r.PathValue("name")), http.StatusBadRequest)
		return
	}
	fire, exited, err := s.crashAt(w, t.Name, r.URL.Query().Get("event"))
	if err != nil {
		http.Error(rw, err.Error(), http.StatusConflict)
		return
	}
	if !fire {
		rw.WriteHeader(http.StatusNoContent)
		return
	}
	// The caller is dying; it must never read an answer. Wait for the
	// kernel to confirm, then drop the connection without one.
	select {
	case <-exited:
	case <-r.Context().Done():
	case <-time.After(10 * time.Second):
	}
	if hj, ok := rw.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			c.Close()
		}
	}
}

// crashAt decides a hit of failpoint n in w with event in flight. When
// it fires, it records the crash, counts the hit and SIGKILLs w's process
// group, and returns the channel closed once that process has exited. A
// process already being killed (by an earlier hit from another of its
// threads, or by the nemesis) is dying: its call is held too, without
// spending another hit of the term, so kill(2) is two crashes.
func (s *Supervisor) crashAt(w *worker, n failpoint.Name, event string) (fire bool, exited <-chan struct{}, err error) {
	w.mu.Lock()
	if w.cmd == nil || closed(w.exited) {
		w.mu.Unlock()
		return false, nil, fmt.Errorf("%w: %s", ErrNotRunning, w.name)
	}
	if w.killed {
		exited := w.exited
		w.mu.Unlock()
		return true, exited, nil
	}
	if !w.armed.Take(n) {
		w.mu.Unlock()
		return false, nil, nil
	}
	// The crash op first: if the harness died between the two, the
	// history must still say why the worker went away.
	if rec, err := s.endpointRecorderLocked(w); err == nil && rec != nil {
		_, _ = rec.Record(history.Info, history.Crash, history.Value{Event: event, Target: w.name, Detail: "failpoint " + string(n)})
	} else if err != nil {
		s.log.Error("endpoint: record crash", "worker", w.name, "err", err)
	}
	w.killed = true // recorded here, not again by watch
	if err := syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		w.mu.Unlock()
		return false, nil, fmt.Errorf("supervisor: kill %s at failpoint %s: %w", w.name, n, err)
	}
	exited = w.exited
	w.mu.Unlock()
	s.countHit(w, string(n))
	return true, exited, nil
}

// serveHistory appends the request's ops to the worker's endpoint history,
// all of them or, when one line is bad, none.
func (s *Supervisor) serveHistory(rw http.ResponseWriter, r *http.Request) {
	w := s.endpointWorker(rw, r)
	if w == nil {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, maxHistoryBody))
	if err != nil {
		http.Error(rw, fmt.Sprintf("read body: %v", err), http.StatusBadRequest)
		return
	}
	entries, err := parseEntries(body)
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	w.mu.Lock()
	rec, err := s.endpointRecorderLocked(w)
	w.mu.Unlock()
	if err == nil && rec != nil {
		err = rec.RecordAll(entries)
	}
	if err != nil {
		http.Error(rw, err.Error(), http.StatusInternalServerError)
		return
	}
	rw.WriteHeader(http.StatusNoContent)
}

// parseEntries reads one op per line as the history format writes it.
// index, time and process are the harness's to stamp and are ignored.
func parseEntries(body []byte) ([]history.Entry, error) {
	var out []history.Entry
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), maxHistoryBody)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var op history.Op
		if err := history.UnmarshalLine(line, &op); err != nil {
			return nil, fmt.Errorf("line %d: %v", n, err)
		}
		if op.F == "" {
			return nil, fmt.Errorf("line %d: no f (what the op is: deliver, ack, apply, dlq, ...)", n)
		}
		if harnessOnly[op.F] {
			return nil, fmt.Errorf("line %d: f %q is written by the harness only", n, op.F)
		}
		out = append(out, history.Entry{Type: op.Type, F: op.F, Value: op.Value})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read ops: %w", err)
	}
	return out, nil
}

// EndpointHistorySuffix ends the file name of the history the endpoint
// writes for an external worker, next to the worker's own: the harness
// process is its one writer (one file per writing process), and its ops
// carry the worker's name as their process.
const EndpointHistorySuffix = ".endpoint.jsonl"

// endpointRecorderLocked is w's endpoint history recorder, opened on
// first use; nil when the supervisor keeps no history directory.
func (s *Supervisor) endpointRecorderLocked(w *worker) (*history.Recorder, error) {
	if w.epRec != nil || s.cfg.HistoryDir == "" {
		return w.epRec, nil
	}
	if err := os.MkdirAll(s.cfg.HistoryDir, 0o755); err != nil {
		return nil, fmt.Errorf("supervisor: endpoint history: %w", err)
	}
	rec, err := history.NewRecorder(filepath.Join(s.cfg.HistoryDir, w.name+EndpointHistorySuffix), w.name, s.cfg.Base)
	if err != nil {
		return nil, fmt.Errorf("supervisor: endpoint history: %w", err)
	}
	w.epRec = rec
	return rec, nil
}
