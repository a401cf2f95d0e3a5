// Package historytest generates large, correct histories for benchmarks
// and tests of code that reads histories.
package historytest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/history"
)

// Config shapes a generated history.
type Config struct {
	Ops           int64    // approximate number of ops
	Subscriptions []string // default: inventory, billing
	Keys          int      // aggregates, default 10000
}

// Write writes a correct effectively-once history of about cfg.Ops ops to
// w, already merged (ordered by time): concurrent producers, a relay,
// consumers per subscription with some redeliveries and indeterminate
// commits that are recovered, then drain and final read. It returns the
// number of events.
func Write(w io.Writer, cfg Config) (int64, error) {
	if len(cfg.Subscriptions) == 0 {
		cfg.Subscriptions = []string{"inventory", "billing"}
	}
	if cfg.Keys <= 0 {
		cfg.Keys = 10000
	}
	subs := cfg.Subscriptions
	perEvent := int64(3 + 5*len(subs))
	events := max(1, cfg.Ops/perEvent)
	bw := bufio.NewWriterSize(w, 1<<20)
	var (
		t   int64
		idx int64
		buf []byte
	)
	emit := func(p string, typ history.Type, f history.F, v history.Value) {
		t += 700
		op := history.Op{Index: idx, Time: t, Process: p, Type: typ, F: f, Value: v}
		idx++
		buf = append(op.AppendJSON(buf[:0]), '\n')
		bw.Write(buf)
	}
	id := func(i int64) string {
		return "evt-" + strconv.FormatInt(i, 36) + "-" + strconv.FormatInt(i*7919%100003, 10)
	}
	kv := func(i int64) (string, int64) {
		return "order-" + strconv.Itoa(int(i%int64(cfg.Keys))), i/int64(cfg.Keys) + 1
	}
	emit("harness", history.OK, history.Setup, history.Value{Subscriptions: subs})
	producers := []string{"producer-0", "producer-1", "producer-2", "producer-3"}
	consumers := make([]string, len(subs))
	for i, s := range subs {
		consumers[i] = "consumer-" + s + "-0"
	}
	// Stage s of event i is written at step i+lag[s], interleaving events.
	const lagPublish, lagConsume = 3, 8
	for step := int64(0); step < events+lagConsume; step++ {
		if i := step; i < events {
			k, v := kv(i)
			p := producers[i%int64(len(producers))]
			emit(p, history.Invoke, history.Commit, history.Value{Event: id(i), Key: k, Version: v})
			typ := history.OK
			if i%97 == 5 {
				typ = history.Info
			}
			emit(p, typ, history.Commit, history.Value{Event: id(i), Key: k, Version: v, Error: map[bool]string{true: "timeout"}[typ == history.Info]})
		}
		if i := step - lagPublish; i >= 0 && i < events {
			emit("relay-0", history.OK, history.Publish, history.Value{Event: id(i), Partition: i % 12, Offset: i / 12})
		}
		if i := step - lagConsume; i >= 0 && i < events {
			k, v := kv(i)
			for si, s := range subs {
				c := consumers[si]
				emit(c, history.OK, history.Deliver, history.Value{Event: id(i), Consumer: s, Partition: i % 12, Offset: i / 12, Attempt: 1})
				if i%53 == 7 {
					emit(c, history.OK, history.Deliver, history.Value{Event: id(i), Consumer: s, Partition: i % 12, Offset: i / 12, Attempt: 2})
				}
				emit(c, history.Invoke, history.Apply, history.Value{Event: id(i), Consumer: s, Key: k, Version: v})
				emit(c, history.OK, history.Apply, history.Value{Event: id(i), Consumer: s, Key: k, Version: v})
				emit(c, history.OK, history.Ack, history.Value{Event: id(i), Consumer: s, Offset: i / 12})
			}
		}
	}
	emit("harness", history.OK, history.Drain, history.Value{})
	emit("harness", history.Invoke, history.FinalRead, history.Value{})
	for i := range events {
		k, v := kv(i)
		emit("harness", history.OK, history.FinalRead, history.Value{Table: history.TableOutbox, Event: id(i), Key: k, Version: v, Published: true})
		for _, s := range subs {
			emit("harness", history.OK, history.FinalRead, history.Value{Table: history.TableEffects, Event: id(i), Consumer: s, Key: k, Version: v})
		}
	}
	emit("harness", history.OK, history.FinalRead, history.Value{})
	return events, bw.Flush()
}

// File returns the path of a generated history of about ops ops, writing
// it once into a cache directory ($DELIVERYCHECK_BENCH_DIR, or the user
// cache dir) and reusing it afterwards. It also returns the event count.
func File(tb testing.TB, ops int64) (string, int64) {
	tb.Helper()
	dir := os.Getenv("DELIVERYCHECK_BENCH_DIR")
	if dir == "" {
		c, err := os.UserCacheDir()
		if err != nil {
			c = os.TempDir()
		}
		dir = filepath.Join(c, "deliverycheck-bench")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	path := filepath.Join(dir, fmt.Sprintf("history-%d.jsonl", ops))
	countPath := path + ".events"
	if b, err := os.ReadFile(countPath); err == nil {
		if n, err := strconv.ParseInt(string(b), 10, 64); err == nil {
			return path, n
		}
	}
	f, err := os.Create(path + ".tmp")
	if err != nil {
		tb.Fatal(err)
	}
	n, err := Write(f, Config{Ops: ops})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(path+".tmp", path)
	}
	if err == nil {
		err = os.WriteFile(countPath, []byte(strconv.FormatInt(n, 10)), 0o644)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return path, n
}

// BenchOps is the op count of benchmark histories: $DELIVERYCHECK_BENCH_OPS,
// default 200000 so a plain go test -bench stays quick. Set it to 10000000
// for the figures in the issue.
func BenchOps(tb testing.TB) int64 {
	if s := os.Getenv("DELIVERYCHECK_BENCH_OPS"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			tb.Fatalf("DELIVERYCHECK_BENCH_OPS=%q: want a positive integer", s)
		}
		return n
	}
	return 200000
}

// CPUTime is the user plus system CPU time of this process so far, all
// threads. Benchmarks report it per op ("cpu-ns/op"): on a machine shared
// with other work it is far steadier than wall time.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
