package supervisor

// This file measures the memory of every worker the supervisor runs (ours
// and team processes alike), for the checker's memory guarantee
// (history.Resources, docs/history.md): a worker that grows without bound
// on hostile input is caught by its peak resident set, not by the OOM
// killer some time after the run.

import (
	"bytes"
	"os"
	"strconv"
	"time"

	"github.com/deliverycheck/deliverycheck/history"
)

// DefaultRSSInterval is how often the supervisor samples each worker's
// peak resident set, unless Config.RSSInterval says otherwise.
const DefaultRSSInterval = 200 * time.Millisecond

// A resources op is written when the peak grew by at least rssMinStep
// and rssMinFraction of the last one written for the incarnation: enough
// to draw the growth, few enough to keep the history small.
const (
	rssMinStep     = 1 << 20
	rssMinFraction = 0.05
)

// rssGrew reports whether peak is worth a new op after last.
func rssGrew(last, peak int64) bool {
	d := peak - last
	return d >= rssMinStep && float64(d) >= rssMinFraction*float64(last)
}

// rssSampler follows the peak resident set (VmHWM) of one incarnation of
// a worker: one small /proc read per tick, an op only when the peak grew
// enough. It owns its buffer, so a tick allocates nothing.
type rssSampler struct {
	s      *Supervisor
	name   string
	path   string // /proc/<pid>/status
	parent []byte // "PPid:\t<our pid>": the pid is still our child's
	buf    []byte
	peak   int64 // the last sample
	last   int64 // the rss of the last op written
}

// sampleRSS samples pid, the process of worker name, at once and every
// interval until exited closes, and then writes the incarnation's last op
// from the last sample it had, if that grew at all since the last op. It
// returns once that op is written.
//
// It does not take the kernel's account at exit (wait4's ru_maxrss): a
// child started by vfork, as Go's os/exec does, shares its parent's
// memory until it execs, and Linux's exec folds that memory's peak into
// the child's maxrss, so a small worker of a large harness would report
// the harness's peak. A process that grows and exits between two samples
// is measured short of its peak.
func (s *Supervisor) sampleRSS(name string, pid int, exited <-chan struct{}) {
	r := &rssSampler{s: s, name: name, path: "/proc/" + strconv.Itoa(pid) + "/status",
		parent: []byte("PPid:\t" + strconv.Itoa(os.Getpid()) + "\n"), buf: make([]byte, 4096)}
	t := time.NewTicker(s.cfg.RSSInterval)
	defer t.Stop()
	r.tick()
	for {
		select {
		case <-exited:
			if r.peak > r.last {
				r.record()
			}
			return
		case <-t.C:
			r.tick()
		}
	}
}

// tick takes one sample and writes an op if the peak grew enough.
func (r *rssSampler) tick() {
	if hwm, ok := r.read(); ok {
		r.peak = max(r.peak, hwm)
	}
	if rssGrew(r.last, r.peak) {
		r.record()
	}
}

func (r *rssSampler) record() {
	r.last = r.peak
	r.s.record(history.OK, history.Resources, history.Value{Target: r.name, RSS: r.peak})
}

// read returns VmHWM from /proc/<pid>/status in bytes. ok is false when
// the file cannot be read, the process is a zombie (no VmHWM), or the pid
// is no longer our child's (reaped and reused).
func (r *rssSampler) read() (int64, bool) {
	f, err := os.Open(r.path)
	if err != nil {
		return 0, false
	}
	n, _ := f.Read(r.buf)
	f.Close()
	b := r.buf[:n]
	if !bytes.Contains(b, r.parent) {
		return 0, false
	}
	return vmHWM(b)
}

// vmHWM parses the "VmHWM:    1234 kB" line of a /proc/<pid>/status.
func vmHWM(status []byte) (int64, bool) {
	i := bytes.Index(status, []byte("\nVmHWM:"))
	if i < 0 {
		return 0, false
	}
	line := status[i+len("\nVmHWM:"):]
	if j := bytes.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	kb, unit, _ := bytes.Cut(bytes.TrimSpace(line), []byte(" "))
	v, err := strconv.ParseInt(string(kb), 10, 64)
	if err != nil || string(bytes.TrimSpace(unit)) != "kB" {
		return 0, false
	}
	return v << 10, true
}
