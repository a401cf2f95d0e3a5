package history

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// A Recorder appends ops to one process's history file. Each op is one
// line written with a single write call, so a SIGKILL can cut at most the
// line being written. A Recorder is safe for concurrent use; it stamps
// Index, Time and Process itself, so each file is ordered by Time.
type Recorder struct {
	mu      sync.Mutex
	w       io.Writer
	c       io.Closer
	process string
	base    time.Time
	next    int64
	last    int64
	buf     []byte
	err     error
}

// NewRecorder opens (creating or appending to) the history file at path
// for process, timing ops from base, the run's start. Every process of a
// run must be given the same base. If the file ends in a torn line left by
// an earlier incarnation, NewRecorder ends that line first so the torn
// line stays a recognisable [Cut]. The caller should call Close when
// finished.
func NewRecorder(path, process string, base time.Time) (*Recorder, error) {
	fh, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	if err := terminateTornLine(fh); err != nil {
		fh.Close()
		return nil, fmt.Errorf("history: %s: %w", path, err)
	}
	r := NewWriterRecorder(fh, process, base)
	r.c = fh
	return r, nil
}

func terminateTornLine(fh *os.File) error {
	st, err := fh.Stat()
	if err != nil || st.Size() == 0 {
		return err
	}
	var last [1]byte
	if _, err := fh.ReadAt(last[:], st.Size()-1); err != nil {
		return err
	}
	if last[0] != '\n' {
		_, err = fh.Write([]byte{'\n'})
	}
	return err
}

// NewWriterRecorder returns a Recorder writing to w. Each op is passed to
// w in a single Write call.
func NewWriterRecorder(w io.Writer, process string, base time.Time) *Recorder {
	return &Recorder{w: w, process: process, base: base}
}

// Record stamps an op of type t, f and v with the next Index, the time
// since the run's base and the recorder's process, writes it as one line
// and returns it. After a write error every later Record returns it too.
func (r *Recorder) Record(t Type, f F, v Value) (Op, error) {
	e := [1]Entry{{Type: t, F: f, Value: v}}
	return r.record(e[:])
}

// Entry is one op for [Recorder.RecordAll]: what Record takes.
type Entry struct {
	Type  Type
	F     F
	Value Value
}

// RecordAll records es as Record would, one after another, in a single
// write call: a worker handling a batch of events writes their ops at
// once. A SIGKILL cannot cut a write to a regular file, so either every
// line lands or none does.
func (r *Recorder) RecordAll(es []Entry) error {
	if len(es) == 0 {
		return nil
	}
	_, err := r.record(es)
	return err
}

// record stamps es (at least one) with consecutive indexes and one time,
// writes them in one call, and returns the last.
func (r *Recorder) record(es []Entry) (Op, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return Op{}, r.err
	}
	now := int64(time.Since(r.base))
	if now < r.last {
		now = r.last // a wall-clock base may step back; keep the file ordered
	}
	r.last = now
	r.buf = r.buf[:0]
	var op Op
	for i, e := range es {
		op = Op{Index: r.next + int64(i), Time: now, Process: r.process, Type: e.Type, F: e.F, Value: e.Value}
		r.buf = append(op.AppendJSON(r.buf), '\n')
	}
	if _, err := r.w.Write(r.buf); err != nil {
		r.err = fmt.Errorf("history: record: %w", err)
		return Op{}, r.err
	}
	r.next += int64(len(es))
	return op, nil
}

// Close closes the file opened by [NewRecorder]. Later Records fail.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = errors.New("history: recorder closed")
	}
	if r.c == nil {
		return nil
	}
	return r.c.Close()
}
