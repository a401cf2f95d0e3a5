package pipeline

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/deliverycheck/deliverycheck/cluster"
)

// cpuMeter splits the machine's CPU time over a benchmark window by who
// spent it: each PostgreSQL backend under the application_name of the
// worker it serves (so "pg/producer" is the database's work for the
// producers), each worker process by role, the broker, and the harness
// (which runs the proxy every connection goes through). Divided by the
// events of the window, it says where an event's cost goes, a figure far
// steadier than throughput on a shared two-core machine.
type cpuMeter struct {
	start map[int]cpuSample
}

type cpuSample struct {
	group string
	ticks int64 // user + system, in clock ticks (USER_HZ, 100 per second)
}

// ticksPerSecond is USER_HZ, which Linux fixes at 100 for /proc.
const ticksPerSecond = 100

// startCPU samples every process of interest.
func startCPU(ctx context.Context, b *testing.B, r *Deployment) *cpuMeter {
	return &cpuMeter{start: cpuSamples(ctx, b, r)}
}

// perEvent returns, per group, the CPU microseconds spent since the meter
// started divided by events.
func (m *cpuMeter) perEvent(ctx context.Context, b *testing.B, r *Deployment, events int64) map[string]float64 {
	out := map[string]float64{}
	for pid, s := range cpuSamples(ctx, b, r) {
		// A process the first sample missed began in the window (a
		// worker's pool connects after Start returns): all its time
		// counts.
		out[s.group] += float64(s.ticks-m.start[pid].ticks) * 1e6 / ticksPerSecond / float64(events)
	}
	return out
}

var workerName = regexp.MustCompile(`"process":"([a-z]+)`)

func cpuSamples(ctx context.Context, b *testing.B, r *Deployment) map[int]cpuSample {
	b.Helper()
	out := map[int]cpuSample{}
	add := func(pid int, group string) {
		if t, ok := procTicks(pid); ok {
			out[pid] = cpuSample{group: group, ticks: t}
		}
	}
	add(os.Getpid(), "harness")
	for _, pid := range r.Supervisor().PIDs() {
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			continue
		}
		if m := workerName.FindSubmatch(env); m != nil {
			add(pid, "worker/"+string(m[1]))
		}
	}
	// Every PostgreSQL process but the postmaster is in pg_stat_activity.
	rows, err := r.DB().Query(ctx, `SELECT pid, coalesce(nullif(application_name, ''), backend_type) FROM pg_stat_activity`)
	if err != nil {
		b.Fatal(err)
	}
	for rows.Next() {
		var pid int
		var app string
		if err := rows.Scan(&pid, &app); err != nil {
			b.Fatal(err)
		}
		// producer-3, relay-0, consumer-inventory-0: the role comes first.
		if w, _, _ := strings.Cut(app, "-"); slices.Contains([]string{"producer", "relay", "consumer"}, w) {
			add(pid, "pg/"+w)
		} else {
			add(pid, "pg/other")
		}
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	for _, s := range r.Cluster().Services() {
		p, ok := s.(cluster.PIDer)
		if !ok || s.Name() == cluster.Postgres {
			continue
		}
		for _, pid := range p.PIDs() {
			add(pid, s.Name())
		}
	}
	return out
}

// report logs every group's share and reports the totals per kind.
func reportCPU(b *testing.B, per map[string]float64) {
	var total, pg, workers float64
	var keys []string
	for k, v := range per {
		keys = append(keys, k)
		total += v
		switch {
		case strings.HasPrefix(k, "pg/"):
			pg += v
		case strings.HasPrefix(k, "worker/"):
			workers += v
		}
	}
	slices.Sort(keys)
	var sb strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&sb, " %s=%.0f", k, per[k])
	}
	b.Logf("CPU µs per event:%s", sb.String())
	b.ReportMetric(total, "cpu-µs/ev")
	b.ReportMetric(pg, "pg-µs/ev")
	b.ReportMetric(workers, "workers-µs/ev")
}

// procTicks is the CPU time pid has spent (user + system, in clock ticks);
// false if it is gone.
func procTicks(pid int) (int64, bool) {
	f, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	s := string(f)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseInt(fields[11], 10, 64)
	k, _ := strconv.ParseInt(fields[12], 10, 64)
	return u + k, true
}

// pgbenchSample is the CPU time of pgbench's backends and the
// transactions committed in its database so far.
func pgbenchSample(ctx context.Context, db *pgx.Conn) (ticks, commits int64, err error) {
	rows, err := db.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = 'pgbench'`)
	if err != nil {
		return 0, 0, err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return 0, 0, err
	}
	for _, pid := range pids {
		t, _ := procTicks(pid)
		ticks += t
	}
	err = db.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&commits)
	return ticks, commits, err
}
