package history

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// A Cut is a line that could not be read because its writer was killed
// while writing it (or the file system kept only zeros of it). Everything
// before and after it is kept; the reader reports it as a Cut so the caller
// can show it, and never drops it silently.
//
// A line is a Cut when it is the last line of its file, when it is a
// prefix of an op (the JSON ends early: a torn write that a restarted
// process terminated with a newline), or when it holds only NUL bytes.
// Any other unreadable line is an error: the file is not a history.
type Cut struct {
	File   string `json:"file"`
	Line   int64  `json:"line"`   // 1-based line number
	Offset int64  `json:"offset"` // byte offset of the line in the file
	Bytes  int    `json:"bytes"`  // length of the torn line
	Text   string `json:"text"`   // up to 80 bytes of it
	Reason string `json:"reason"` // in words, e.g. "torn: its JSON ends before the object does"
}

func (c Cut) String() string {
	return fmt.Sprintf("%s:%d: torn line of %d bytes at offset %d (%s), read up to it and on from the next line: %q", c.File, c.Line, c.Bytes, c.Offset, c.Reason, c.Text)
}

// A LineError is an unreadable line that is not a [Cut]: the file is not
// a history. Its message says what is wrong in words, e.g.
// "history: h.jsonl: line 1 is not JSON (...)".
type LineError struct {
	File string
	Line int64
	Err  error // the decoder's error
}

func (e *LineError) Error() string {
	return fmt.Sprintf("history: %s: line %d %s", e.File, e.Line, describe(nil, e.Err))
}

func (e *LineError) Unwrap() error { return e.Err }

// bom is the UTF-8 byte-order mark, which some editors put first.
var bom = []byte("\xef\xbb\xbf")

// errBOM is a line that starts with a byte-order mark.
var errBOM = errors.New("starts with a UTF-8 byte-order mark (bytes EF BB BF), which a history must not have: write the file as UTF-8 without a BOM")

// describe says in words what is wrong with a line, as a predicate of
// "line N": "is not JSON (...)". l, if given, is the line itself.
func describe(l []byte, err error) string {
	var (
		se  *json.SyntaxError
		ute *json.UnmarshalTypeError
		te  *TypeError
		ie  *InvalidOpError
	)
	switch {
	case bytes.HasPrefix(l, bom) || errors.Is(err, errBOM):
		return errBOM.Error()
	case errors.As(err, &ie):
		return "is not a history op: " + ie.Problem
	case errors.As(err, &te):
		return fmt.Sprintf("is not a history op: its type %q is not one of invoke, ok, fail or info", te.Name)
	case errors.As(err, &ute) && ute.Field == "":
		return "is JSON but not an object (a JSON " + ute.Value + ")"
	case errors.As(err, &ute):
		return fmt.Sprintf("is not a history op: its field %s is a JSON %s, want %s", ute.Field, ute.Value, ute.Type)
	case len(l) > 0 && len(bytes.Trim(l, "\x00")) == 0:
		return "is torn: it holds only NUL bytes (what a file system can leave after a crash)"
	case errors.As(err, &se) && len(l) > 0 && se.Offset >= int64(len(l)):
		return "is torn: its JSON ends before the object does"
	case errors.As(err, &se):
		return fmt.Sprintf("is not JSON (%v, at byte %d)", se, se.Offset)
	}
	return "is not a history op: " + err.Error()
}

// chunk is a run of whole lines of one file, decoded by a worker.
type chunk struct {
	data      []byte
	line      int64 // line number of data's first line, 1-based
	offset    int64 // byte offset of data in the file
	last      bool  // data reaches the end of the file
	ops       []Op
	cuts      []Cut
	bad       *badLine // first line that is neither an op nor a cut
	afterBad  bool     // non-blank lines follow bad within the chunk
	nonBlank  bool     // the chunk has any non-blank line
	done      chan struct{}
	file      string
	readError error
}

type badLine struct {
	cut   Cut
	err   error
	whole bool // the line is complete JSON (or starts with a BOM): never a cut
}

// decode decodes c.data into c.ops. Malformed lines that look torn become
// cuts; the first other malformed line stops decoding and is kept in c.bad.
func (c *chunk) decode(file string, in *interner) {
	data := c.data
	line := c.line
	off := c.offset
	for len(data) > 0 {
		n := bytes.IndexByte(data, '\n')
		var l []byte
		if n < 0 {
			l, data = data, nil
		} else {
			l, data = data[:n], data[n+1:]
		}
		lineNo, lineOff := line, off
		line++
		off += int64(len(l)) + 1
		if isBlank(l) {
			continue
		}
		c.nonBlank = true
		if c.bad != nil {
			c.afterBad = true
			return
		}
		// Decode into the next slot as it is: every slot past len(c.ops)
		// is zero (fresh, or cleared by putOps and by the error path below).
		if len(c.ops) < cap(c.ops) {
			c.ops = c.ops[:len(c.ops)+1]
		} else {
			c.ops = append(c.ops, Op{})
		}
		op := &c.ops[len(c.ops)-1]
		err := unmarshalLine(l, op, in)
		if err == nil {
			continue
		}
		*op = Op{}
		c.ops = c.ops[:len(c.ops)-1]
		if bytes.HasPrefix(l, bom) {
			err = fmt.Errorf("%w: %w", errBOM, err)
		}
		words := describe(l, err)
		cut := Cut{File: file, Line: lineNo, Offset: lineOff, Bytes: len(l), Text: preview(l), Reason: strings.TrimPrefix(words, "is ")}
		if looksTorn(l, err) {
			c.cuts = append(c.cuts, cut)
			continue
		}
		// A line that is whole JSON was not torn by a kill, even as the
		// last line of its file: it is bad input wherever it is.
		cut.Reason = "torn: the file ends in this line, which " + words
		c.bad = &badLine{cut: cut, err: err, whole: json.Valid(l) || bytes.HasPrefix(l, bom)}
	}
}

func isBlank(l []byte) bool {
	for _, c := range l {
		if c != ' ' && c != '\t' && c != '\r' {
			return false
		}
	}
	return true
}

func looksTorn(l []byte, err error) bool {
	if len(bytes.Trim(l, "\x00")) == 0 {
		return true
	}
	var se *json.SyntaxError
	return errors.As(err, &se) && se.Offset >= int64(len(l)) && l[0] == '{'
}

func preview(l []byte) string {
	if len(l) > 80 {
		l = l[:80]
	}
	return string(bytes.ToValidUTF8(l, []byte("?")))
}

// fileReader turns decoded chunks of one file, in order, into ops, cuts
// and at most one error: a bad line is an error unless nothing but blank
// lines follows it, in which case it is the file's torn last line.
type fileReader struct {
	path    string
	cuts    []Cut
	pending *badLine // a bad line not yet known to be the last
	ops     int64
}

func (f *fileReader) accept(c *chunk) error {
	if c.readError != nil {
		return fmt.Errorf("history: read %s: %w", f.path, c.readError)
	}
	if f.pending != nil && c.nonBlank {
		return &LineError{File: f.path, Line: f.pending.cut.Line, Err: f.pending.err}
	}
	f.cuts = append(f.cuts, c.cuts...)
	f.ops += int64(len(c.ops))
	if c.bad != nil {
		if c.afterBad || c.bad.whole {
			return &LineError{File: f.path, Line: c.bad.cut.Line, Err: c.bad.err}
		}
		f.pending = c.bad
	}
	if c.last && f.pending != nil {
		f.cuts = append(f.cuts, f.pending.cut)
		f.pending = nil
	}
	return nil
}

// Read reads a whole JSONL history from r, named name in cuts and errors.
// It returns the ops in file order (Index as written), the torn lines it
// skipped, and an error only if r is not a history.
func Read(r io.Reader, name string) (History, []Cut, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, nil, fmt.Errorf("history: read %s: %w", name, err)
	}
	c := &chunk{data: data, line: 1, last: true, ops: make([]Op, 0, len(data)/150+1)}
	var in *interner
	if len(data) > 1<<16 {
		in = &interner{}
	}
	c.decode(name, in)
	f := fileReader{path: name}
	if err := f.accept(c); err != nil {
		return nil, f.cuts, err
	}
	return History(c.ops), f.cuts, nil
}

// ReadFile reads one history file with [Read].
func ReadFile(path string) (History, []Cut, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("history: %w", err)
	}
	defer fh.Close()
	return Read(fh, path)
}

// ReadFiles reads every file and merges them with [Merge].
func ReadFiles(paths ...string) (History, []Cut, error) {
	var hs []History
	var cuts []Cut
	for _, p := range paths {
		h, c, err := ReadFile(p)
		cuts = append(cuts, c...)
		if err != nil {
			return nil, cuts, err
		}
		hs = append(hs, h)
	}
	return Merge(hs...), cuts, nil
}

// before is the merge order: by Time, then Process.
func before(a, b *Op) bool {
	if a.Time != b.Time {
		return a.Time < b.Time
	}
	return a.Process < b.Process
}

// Merge merges histories into one ordered by Time, then Process, then the
// position of the op in its input (histories earlier in the argument list
// first), and renumbers Index from 0. The inputs are not modified.
func Merge(hs ...History) History {
	n := 0
	for _, h := range hs {
		n += len(h)
	}
	out := make(History, 0, n)
	for _, h := range hs {
		out = append(out, h...)
	}
	sortStable(out)
	for i := range out {
		out[i].Index = int64(i)
	}
	return out
}

func sortStable(h History) {
	sorted := true
	for i := 1; i < len(h); i++ {
		if before(&h[i], &h[i-1]) {
			sorted = false
			break
		}
	}
	if sorted {
		return
	}
	// Sort a permutation instead of the 300-byte ops themselves.
	perm := make([]int32, len(h))
	for i := range perm {
		perm[i] = int32(i)
	}
	stableSortPerm(perm, h)
	tmp := make(History, len(h))
	for i, p := range perm {
		tmp[i] = h[p]
	}
	copy(h, tmp)
}

func stableSortPerm(perm []int32, h History) {
	slices.SortStableFunc(perm, func(a, b int32) int {
		x, y := &h[a], &h[b]
		switch {
		case before(x, y):
			return -1
		case before(y, x):
			return 1
		}
		return 0
	})
}
