package pipeline

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/cluster/local"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/internal/testenv"
	"github.com/deliverycheck/deliverycheck/pipeline/relay"
)

// benchClients is the concurrency of both the pipeline's producers and
// pgbench, so the two figures compare.
const benchClients = 8

// benchThreads is how many threads pgbench drives its clients from (-j):
// one process with two threads, one per core. The pipeline's producers
// match it: all of them are clients of one process, whose Go runtime runs
// them on as many threads as there are cores. A process per client would
// weigh the pipeline with seven more Go runtimes that pgbench does not pay
// for, and even two processes cost about 20µs more CPU per event than
// one (each runtime's scheduler and monitor wake on their own).
const benchThreads = 2

// BenchmarkPipeline measures end-to-end events per second with no faults:
// producers as fast as they can for a fixed window, one subscription, and
// the rate the pipeline sustained in steady state (see steadyRate). It also reports
// commit→apply latency, and the yardstick of issue 4's goal: pgbench's
// single-insert TPS at the same concurrency on the same PostgreSQL
// instance through the same proxy, measured just before each pipeline
// window (so both see the database in the same state), and the pipeline's
// rate as a share of it.
func BenchmarkPipeline(b *testing.B) {
	for _, br := range []string{"kafka", "rabbitmq"} {
		b.Run(br, func(b *testing.B) {
			alone(b, br)
			// Means over the iterations: one window is noisy on a
			// shared two-core machine.
			var rate, p50, p99, tps, share, pgbenchPG, pgbenchCPU, cpuShare float64
			cpu := map[string]float64{}
			n := 0
			// An unmeasured window first: a freshly started broker's
			// JVM spends a core compiling its hot paths, and it still
			// compiled through the next windows after 3s of warm-up
			// (Kafka's CPU per event halved over the first minute).
			benchRun(b, br, 15*time.Second)
			for b.Loop() {
				quiesce(b)
				y := pgbench(b, servers.Get(b), 5*time.Second)
				quiesce(b)
				f := benchRun(b, br, 5*time.Second)
				rate, p50, p99, tps, share = rate+f.rate, p50+f.p50, p99+f.p99, tps+y.tps, share+100*f.rate/y.tps
				pgbenchPG += y.pgPerTxn
				pgbenchCPU += y.cpuPerTxn
				var perEvent float64
				for k, v := range f.cpu {
					cpu[k] += v
					perEvent += v
				}
				cpuShare += 100 * y.cpuPerTxn / perEvent
				n++
			}
			f := float64(n)
			b.ReportMetric(rate/f, "events/s")
			b.ReportMetric(p50/f, "p50-ms")
			b.ReportMetric(p99/f, "p99-ms")
			b.ReportMetric(tps/f, "pgbench-tps")
			b.ReportMetric(share/f, "%-of-pgbench")
			// The database's work for one pgbench transaction, to hold
			// pg-µs/ev against: how many single-row inserts' worth of
			// database work one event costs.
			b.ReportMetric(pgbenchPG/f, "pgbench-pg-µs/txn")
			// The same processes' count for a pgbench transaction
			// (its backends, pgbench itself, the harness's proxy) as
			// cpu-µs/ev counts for an event. When both saturate the
			// machine, the share is about their ratio: cpu-share is
			// that ratio, the goal in CPU terms (an event may cost at
			// most two pgbench transactions), and steadier than the
			// share of throughput, which moves with the machine's minute.
			b.ReportMetric(pgbenchCPU/f, "pgbench-cpu-µs/txn")
			b.ReportMetric(cpuShare/f, "%-cpu-share")
			for k := range cpu {
				cpu[k] /= f
			}
			reportCPU(b, cpu)
		})
	}
}

// BenchmarkRelay compares the Debezium relay with the built-in polling
// relay on Kafka over the same run length (producers flat out for 5s):
// relayed events/s is what the relay put in the topic from the window's
// start until the topic held every committed event (so a relay that falls
// behind shows it), next to the producers' committed/s; start-s is how
// long Start took, which for Debezium includes Kafka Connect's start and
// its replication slot beginning to stream.
func BenchmarkRelay(b *testing.B) {
	for _, v := range []relay.Variant{relay.Polling, relay.Debezium} {
		b.Run(string(v), func(b *testing.B) {
			var m relayFigures
			for b.Loop() {
				m = relayRun(b, v, 5*time.Second)
			}
			b.ReportMetric(m.relayed, "relayed/s")
			b.ReportMetric(m.committed, "committed/s")
			b.ReportMetric(m.start, "start-s")
		})
	}
}

type relayFigures struct{ relayed, committed, start float64 }

func relayRun(b *testing.B, v relay.Variant, d time.Duration) relayFigures {
	cl := servers.Get(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg := benchConfig("kafka")
	cfg.RelayVariant = v
	began := time.Now()
	r, err := Start(ctx, cl, b.TempDir(), cfg, workerCmd(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	window := time.Now()
	start := window.Sub(began).Seconds()
	time.Sleep(d) // the measured window: producers run flat out
	if err := r.StopProducers(ctx); err != nil {
		b.Fatal(err)
	}
	var committed int64
	if err := r.DB().QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&committed); err != nil {
		b.Fatal(err)
	}
	kc, err := kgo.NewClient(kgo.SeedBrokers(cl.ClientURL(cluster.Kafka)))
	if err != nil {
		b.Fatal(err)
	}
	defer kc.Close()
	adm := kadm.NewClient(kc)
	for {
		ends, err := adm.ListEndOffsets(ctx, r.broker.Events())
		if err != nil {
			b.Fatal(err)
		}
		var n int64
		ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
		if n >= committed {
			break
		}
		if ctx.Err() != nil {
			b.Fatalf("the relay never caught up: %d of %d in the topic", n, committed)
		}
		time.Sleep(20 * time.Millisecond)
	}
	relayed := time.Since(window).Seconds()
	return relayFigures{relayed: float64(committed) / relayed, committed: float64(committed) / d.Seconds(), start: start}
}

// alone stops the broker not under test until b ends, so br and the
// yardstick run on a machine holding only what a team running br would
// run: the package starts both brokers, and an idle Kafka JVM alone
// spends about 15µs of CPU per RabbitMQ event (its timers, heartbeats and
// the compiler) that neither pipeline nor pgbench has anything to do with.
func alone(b *testing.B, br string) {
	b.Helper()
	other := cluster.Kafka
	if br == cluster.Kafka {
		other = cluster.RabbitMQ
	}
	svc := servers.Get(b).Service(other)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := svc.Stop(ctx); err != nil {
		b.Fatalf("stop %s: %v", other, err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := svc.Start(ctx); err != nil {
			b.Errorf("start %s again: %v", other, err)
		}
	})
}

// benchConfig is every benchmark's pipeline on broker br: benchClients
// producers flat out as clients of one process, one subscription.
func benchConfig(br string) Config {
	cfg := Config{Broker: br, Name: "b_" + strconv.FormatInt(time.Now().UnixNano(), 36),
		Producers: benchClients, ProducerProcesses: 1, Rate: 0, Keys: 1000,
		Subscriptions: []string{"inventory"}, Partitions: 8, RelayBatch: 500}
	if br == "rabbitmq" {
		// Competing consumers: one process with 8 batches in flight,
		// room for 16 deliveries each (two processes of 4, each with
		// the default window of 32, cost about 100µs more CPU per event, most of it in the second
		// Go runtime and the broker). On Kafka one worker per partition
		// (the default) is the most that keeps order.
		cfg.ConsumerWorkers, cfg.Prefetch = 8, 128
	}
	return cfg
}

// benchFigures are one window's: events/s, commit→apply latency
// percentiles (ms) and CPU µs per event by who spent it (see cpuMeter).
type benchFigures struct {
	rate, p50, p99 float64
	cpu            map[string]float64
}

// benchRun runs one measured window of d.
func benchRun(b *testing.B, br string, d time.Duration) benchFigures {
	cl := servers.Get(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg := benchConfig(br)
	r, err := Start(ctx, cl, b.TempDir(), cfg, workerCmd(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	c0 := committed(ctx, b, r)
	meter := startCPU(ctx, b, r)
	time.Sleep(d) // the measured window: producers run flat out
	cpu := meter.perEvent(ctx, b, r, committed(ctx, b, r)-c0)
	if _, err := r.Finish(ctx); err != nil {
		b.Fatal(err)
	}
	h := runHistory(b, r)
	rate, lat := steadyRate(h, time.Second)
	if len(lat) == 0 || rate == 0 {
		b.Fatal("nothing applied")
	}
	slices.Sort(lat)
	return benchFigures{rate: rate, p50: lat[len(lat)/2], p99: lat[len(lat)*99/100], cpu: cpu}
}

// steadyRate is a window's end-to-end events/s in steady state, and every
// applied event's commit→apply latency (ms). The rate is measured from
// warm after the first commit to the last one (when the producers
// stopped): events committed per second and events applied per second
// over that span, whichever is lower. The lower of the two is what the
// pipeline sustains: applies fall behind commits when the pipeline cannot
// keep up, and run ahead of them only while it catches up with what piled
// up during the start. The start (workers connecting, a consumer group
// joining) and the drain after the last commit are left out: they are the
// pipeline's latency, which p50 and p99 report, not its throughput
// (counted in, they took 2–4% off a 5 s window's rate).
func steadyRate(h history.History, warm time.Duration) (rate float64, lat []float64) {
	commits := map[string]int64{}
	var first, last int64 = -1, 0
	for _, op := range h {
		if op.F == history.Commit && op.Type == history.OK {
			commits[op.Value.Event] = op.Time
			if first < 0 {
				first = op.Time
			}
			last = op.Time
		}
	}
	from := first + int64(warm)
	if first < 0 || last <= from {
		return 0, nil
	}
	var committed, applied int
	for _, t := range commits {
		if t >= from {
			committed++
		}
	}
	for _, op := range h {
		if op.F != history.Apply || op.Type != history.OK {
			continue
		}
		c, ok := commits[op.Value.Event]
		if !ok {
			continue
		}
		lat = append(lat, float64(op.Time-c)/1e6)
		delete(commits, op.Value.Event)
		if op.Time >= from && op.Time <= last {
			applied++
		}
	}
	return float64(min(committed, applied)) / (float64(last-from) / 1e9), lat
}

// committed counts the outbox rows so far.
func committed(ctx context.Context, b *testing.B, r *Deployment) int64 {
	b.Helper()
	var n int64
	if err := r.DB().QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}

// BenchmarkPgbenchInsert is the yardstick alone: pgbench with a one-row
// insert per transaction, fsync on, at the pipeline's concurrency, on the
// same PostgreSQL instance (through the same proxy).
func BenchmarkPgbenchInsert(b *testing.B) {
	cl := servers.Get(b)
	var y pgbenchFigures
	for b.Loop() {
		y = pgbench(b, cl, 5*time.Second)
	}
	b.ReportMetric(y.tps, "tps")
	b.ReportMetric(y.pgPerTxn, "pg-µs/txn")
	b.ReportMetric(y.cpuPerTxn, "cpu-µs/txn")
}

// pgbenchFigures are one pgbench run's figures.
type pgbenchFigures struct {
	tps float64
	// pgPerTxn is its database backends' CPU µs per transaction.
	pgPerTxn float64
	// cpuPerTxn adds pgbench's own and the harness's (whose proxy its
	// connections go through): what cpu-µs/ev counts for an event.
	cpuPerTxn float64
}

// pgbench runs pgbench for d with benchClients clients, each transaction
// one single-row insert, and returns its figures; CPU is measured over the
// middle of the run (the backends exit with pgbench). It skips b when
// PostgreSQL's client tools are not installed.
func pgbench(b *testing.B, cl *cluster.Cluster, d time.Duration) pgbenchFigures {
	b.Helper()
	bin, err := local.PostgresBinDir("")
	testenv.MustHaveServer(b, "pgbench", err)
	dir := b.TempDir()
	script := filepath.Join(dir, "insert.sql")
	if err := os.WriteFile(script, []byte("INSERT INTO pgbench_one (v) VALUES (1);\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	dsn := cl.ClientURL(cluster.Postgres)
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close(ctx)
	if _, err := db.Exec(ctx, "CREATE TABLE IF NOT EXISTS pgbench_one (id bigserial PRIMARY KEY, v int)"); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, "pgbench"), "-n", "-c", strconv.Itoa(benchClients), "-j", strconv.Itoa(benchThreads),
		"-T", strconv.Itoa(int(d.Seconds())), "-f", script, dsn)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	// pgbench and the harness, counted as cpu-µs/ev counts them.
	others := func() (ticks int64) {
		for _, pid := range []int{cmd.Process.Pid, os.Getpid()} {
			t, _ := procTicks(pid)
			ticks += t
		}
		return ticks
	}
	time.Sleep(time.Second)
	o0 := others()
	t0, c0, err0 := pgbenchSample(ctx, db)
	time.Sleep(d - 2*time.Second)
	o1 := others()
	t1, c1, err1 := pgbenchSample(ctx, db)
	if err := cmd.Wait(); err != nil {
		b.Fatalf("pgbench: %v\n%s", err, out.Bytes())
	}
	if err := errors.Join(err0, err1); err != nil {
		b.Fatal(err)
	}
	m := regexp.MustCompile(`tps = ([0-9.]+)`).FindSubmatch(out.Bytes())
	if m == nil {
		b.Fatalf("no tps in pgbench output:\n%s", out.Bytes())
	}
	var y pgbenchFigures
	y.tps, _ = strconv.ParseFloat(string(m[1]), 64)
	if c1 > c0 {
		y.pgPerTxn = float64(t1-t0) * 1e6 / ticksPerSecond / float64(c1-c0)
		y.cpuPerTxn = y.pgPerTxn + float64(o1-o0)*1e6/ticksPerSecond/float64(c1-c0)
	}
	return y
}

// quiesce waits (up to 30s) until the machine is nearly idle, so one
// measurement does not pay for the last one's leftovers: a server's
// background work after a run, or RabbitMQ finishing its boot.
func quiesce(b *testing.B) {
	b.Helper()
	idle := func() (idle, total uint64) {
		f, err := os.ReadFile("/proc/stat")
		if err != nil {
			return 0, 0
		}
		line, _, _ := strings.Cut(string(f), "\n")
		for i, v := range strings.Fields(line)[1:] {
			n, _ := strconv.ParseUint(v, 10, 64)
			total += n
			if i == 3 || i == 4 { // idle, iowait
				idle += n
			}
		}
		return idle, total
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		i0, t0 := idle()
		time.Sleep(500 * time.Millisecond)
		i1, t1 := idle()
		if t1 == t0 || float64(i1-i0)/float64(t1-t0) >= 0.9 {
			return
		}
	}
}

// TestSteadyRate: the steady rate leaves out the start and the drain,
// and is the applies' rate when the consumer falls behind.
func TestSteadyRate(t *testing.T) {
	// 5 s of one commit per ms; each applied lag later, every every-th.
	hist := func(lag time.Duration, every int) history.History {
		var h history.History
		for i := range 5000 {
			at := int64(i) * int64(time.Millisecond)
			ev := history.Value{Event: strconv.Itoa(i)}
			h = append(h, history.Op{Time: at, Type: history.OK, F: history.Commit, Value: ev})
			if i%every == 0 {
				h = append(h, history.Op{Time: at + int64(lag), Type: history.OK, F: history.Apply, Value: ev})
			}
		}
		slices.SortStableFunc(h, func(a, b history.Op) int { return int(a.Time - b.Time) })
		return h
	}
	for _, tc := range []struct {
		name  string
		h     history.History
		rate  float64
		count int
	}{
		{"keeps up, 200ms behind", hist(200*time.Millisecond, 1), 1000, 5000},
		{"applies half", hist(10*time.Millisecond, 2), 500, 2500},
		{"too short", hist(0, 1)[:1000], 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rate, lat := steadyRate(tc.h, time.Second)
			if math.Abs(rate-tc.rate) > tc.rate/100 || len(lat) != tc.count {
				t.Fatalf("rate %.1f over %d latencies, want %.0f over %d", rate, len(lat), tc.rate, tc.count)
			}
		})
	}
}
