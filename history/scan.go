package history

import (
	"bytes"
	"container/heap"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
)

// ErrUnordered is returned by [ScanFiles] when a file is not ordered by
// Time then Process, so it cannot be merged as a stream. Such files can
// still be read with [ReadFiles], which sorts in memory.
var ErrUnordered = errors.New("history: file not ordered by time")

// A ScanReport says what [ScanFiles] read.
type ScanReport struct {
	Files []FileReport `json:"files"`
	Ops   int64        `json:"ops"`
}

// A FileReport says what was read from one file.
type FileReport struct {
	Path string `json:"path"`
	Ops  int64  `json:"ops"`
	Cuts []Cut  `json:"cuts,omitempty"`
}

// Cuts returns the cuts of every file, in file order.
func (r *ScanReport) Cuts() []Cut {
	var out []Cut
	for _, f := range r.Files {
		out = append(out, f.Cuts...)
	}
	return out
}

var chunkSize = 1 << 20 // a var so tests can cross chunk boundaries

// ScanFiles reads the history files with every core, merges them in the
// order of [Merge] and calls fn with consecutive batches of ops, Index
// renumbered from 0. A batch and its ops are valid only during the call;
// strings in the ops may be kept. Each file must already be ordered by Time
// then Process, as a [Recorder] writes it; otherwise ScanFiles returns an
// error wrapping [ErrUnordered] ([ScanFilesOrSort] then sorts). An error
// from fn stops the scan and is returned.
func ScanFiles(paths []string, fn func(batch []Op) error) (ScanReport, error) {
	s := newScanner(len(paths))
	defer s.stop()
	files := make([]*fileStream, len(paths))
	for i, p := range paths {
		fh, err := os.Open(p)
		if err != nil {
			return ScanReport{}, fmt.Errorf("history: %w", err)
		}
		defer fh.Close()
		files[i] = s.start(fh, p)
	}
	var err error
	if len(files) == 1 {
		err = s.single(files[0], fn)
	} else {
		err = s.merge(files, fn)
	}
	rep := ScanReport{Ops: s.n}
	for _, f := range files {
		rep.Files = append(rep.Files, FileReport{Path: f.r.path, Ops: f.r.ops, Cuts: f.r.cuts})
	}
	return rep, err
}

// ScanFilesOrSort is [ScanFiles] for files that may not be ordered by
// time: when one is not, it calls restart, reads every file whole and
// sorts them with [ReadFiles], and calls fn once with the whole history.
// fn may have seen part of the files by then, which restart must forget.
// It returns the cuts of every file, in file order.
func ScanFilesOrSort(paths []string, restart func(), fn func(batch []Op) error) ([]Cut, error) {
	rep, err := ScanFiles(paths, fn)
	if !errors.Is(err, ErrUnordered) {
		return rep.Cuts(), err
	}
	restart()
	h, cuts, err := ReadFiles(paths...)
	if err != nil {
		return cuts, err
	}
	return cuts, fn(h)
}

type scanner struct {
	jobs    chan *chunk
	quit    chan struct{}
	wg      sync.WaitGroup
	n       int64 // ops emitted
	pools   sync.Pool
	opsPool sync.Pool
}

func newScanner(files int) *scanner {
	s := &scanner{jobs: make(chan *chunk, 4*runtime.GOMAXPROCS(0)), quit: make(chan struct{})}
	for range runtime.GOMAXPROCS(0) {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			in := &interner{}
			for {
				select {
				case c := <-s.jobs:
					c.ops = s.getOps(len(c.data))
					c.decode(c.file, in)
					close(c.done)
				case <-s.quit:
					return
				}
			}
		}()
	}
	return s
}

func (s *scanner) stop() {
	close(s.quit)
	s.wg.Wait()
}

func (s *scanner) getOps(dataLen int) []Op {
	if p, ok := s.opsPool.Get().(*[]Op); ok {
		return (*p)[:0]
	}
	return make([]Op, 0, dataLen/150+16)
}

func (s *scanner) putOps(ops []Op) {
	clear(ops)
	ops = ops[:0]
	s.opsPool.Put(&ops)
}

// fileStream is one file being read: a reader goroutine cuts it into
// chunks, sends each to the workers and, in order, to ordered.
type fileStream struct {
	r       fileReader
	ordered chan *chunk
	cur     *chunk
	pos     int
	prev    Op // last op emitted, for the order check
	idx     int
	started bool
}

func (s *scanner) start(r io.Reader, path string) *fileStream {
	f := &fileStream{r: fileReader{path: path}, ordered: make(chan *chunk, 2*runtime.GOMAXPROCS(0)+2)}
	go s.read(r, f)
	return f
}

func (s *scanner) getBuf() []byte {
	if b, ok := s.pools.Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, chunkSize+chunkSize/4)
}

func (s *scanner) putBuf(b []byte) {
	if cap(b) <= 4*chunkSize {
		s.pools.Put(&b)
	}
}

// read cuts r into chunks of whole lines. The chunk that reaches the end
// of the file is marked last.
func (s *scanner) read(r io.Reader, f *fileStream) {
	defer close(f.ordered)
	var (
		line   int64 = 1
		offset int64
		held   *chunk // a full chunk waiting to learn whether it is last
	)
	send := func(c *chunk) bool {
		c.done = make(chan struct{})
		c.file = f.r.path
		select {
		case f.ordered <- c:
		case <-s.quit:
			return false
		}
		select {
		case s.jobs <- c:
		case <-s.quit:
			return false
		}
		return true
	}
	buf := s.getBuf()
	for {
		if cap(buf)-len(buf) < chunkSize/4 {
			nb := make([]byte, len(buf), 2*cap(buf))
			copy(nb, buf)
			buf = nb
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil && err != io.EOF {
			c := &chunk{readError: err, done: make(chan struct{}), last: true}
			close(c.done)
			if held != nil && !send(held) {
				return
			}
			select {
			case f.ordered <- c:
			case <-s.quit:
			}
			return
		}
		eof := err == io.EOF
		if eof {
			if held != nil && len(buf) == 0 {
				held.last = true
				send(held)
				return
			}
			if held != nil && !send(held) {
				return
			}
			send(&chunk{data: buf, line: line, offset: offset, last: true})
			return
		}
		if len(buf) < chunkSize {
			continue
		}
		cutAt := lastNewline(buf)
		if cutAt < 0 {
			continue // a line longer than the buffer: grow it
		}
		c := &chunk{data: buf[:cutAt+1], line: line, offset: offset}
		line += int64(bytes.Count(c.data, []byte{'\n'}))
		offset += int64(len(c.data))
		rest := buf[cutAt+1:]
		buf = append(s.getBuf(), rest...)
		if held != nil && !send(held) {
			return
		}
		held = c
	}
}

func lastNewline(b []byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			return i
		}
	}
	return -1
}

// next returns f's next decoded chunk, or nil at the end of the file.
func (s *scanner) next(f *fileStream) (*chunk, error) {
	c, ok := <-f.ordered
	if !ok {
		return nil, nil
	}
	<-c.done
	if err := f.r.accept(c); err != nil {
		return nil, err
	}
	s.putBuf(c.data)
	c.data = nil
	return c, nil
}

func (f *fileStream) check(op *Op) error {
	if f.started && before(op, &f.prev) {
		return fmt.Errorf("%w: %s: op with time %d, process %q follows time %d, process %q",
			ErrUnordered, f.r.path, op.Time, op.Process, f.prev.Time, f.prev.Process)
	}
	f.started = true
	f.prev.Time, f.prev.Process = op.Time, op.Process
	return nil
}

func (s *scanner) single(f *fileStream, fn func([]Op) error) error {
	for {
		c, err := s.next(f)
		if err != nil || c == nil {
			return err
		}
		f.cur = c
		for i := range c.ops {
			if err := f.check(&c.ops[i]); err != nil {
				return err
			}
			c.ops[i].Index = s.n
			s.n++
		}
		if len(c.ops) == 0 {
			s.putOps(c.ops)
			continue
		}
		err = fn(c.ops)
		s.putOps(c.ops)
		if err != nil {
			return err
		}
	}
}

type fileHeap []*fileStream

func (h fileHeap) Len() int { return len(h) }
func (h fileHeap) Less(i, j int) bool {
	a, b := &h[i].cur.ops[h[i].pos], &h[j].cur.ops[h[j].pos]
	if before(a, b) {
		return true
	}
	if before(b, a) {
		return false
	}
	return h[i].order() < h[j].order()
}
func (h fileHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *fileHeap) Push(x any)   { *h = append(*h, x.(*fileStream)) }
func (h *fileHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (f *fileStream) order() int { return f.idx }

// advance moves f to its next op, loading chunks as needed. It reports
// false at the end of the file.
func (s *scanner) advance(f *fileStream) (bool, error) {
	for f.cur == nil || f.pos >= len(f.cur.ops) {
		if f.cur != nil {
			s.putOps(f.cur.ops)
			f.cur = nil
		}
		c, err := s.next(f)
		if err != nil || c == nil {
			return false, err
		}
		f.cur, f.pos = c, 0
	}
	return true, f.check(&f.cur.ops[f.pos])
}

func (s *scanner) merge(files []*fileStream, fn func([]Op) error) error {
	h := make(fileHeap, 0, len(files))
	for i, f := range files {
		f.idx = i
		ok, err := s.advance(f)
		if err != nil {
			return err
		}
		if ok {
			h = append(h, f)
		}
	}
	heap.Init(&h)
	batch := s.getOps(4096 * 150)
	for len(h) > 0 {
		f := h[0]
		op := f.cur.ops[f.pos]
		op.Index = s.n
		s.n++
		batch = append(batch, op)
		if len(batch) == cap(batch) {
			err := fn(batch)
			s.putOps(batch)
			if err != nil {
				return err
			}
			batch = s.getOps(4096 * 150)
		}
		f.pos++
		ok, err := s.advance(f)
		if err != nil {
			return err
		}
		if ok {
			heap.Fix(&h, 0)
		} else {
			heap.Pop(&h)
		}
	}
	var err error
	if len(batch) > 0 {
		err = fn(batch)
	}
	s.putOps(batch)
	return err
}
