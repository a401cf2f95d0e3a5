package reports

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/checker"
)

// omSample is one sample line read back from an OpenMetrics file.
type omSample struct {
	family string
	labels map[string]string
	value  int64
	ms     int64
}

// parseOpenMetrics reads an OpenMetrics text file back, checking what a
// Prometheus backfill needs: every family declared (TYPE, HELP) before
// its samples and never resumed after another began, each series'
// samples together with increasing timestamps, and "# EOF" the last
// line.
func parseOpenMetrics(t *testing.T, b []byte) (types map[string]string, samples []omSample) {
	t.Helper()
	types = map[string]string{}
	done := map[string]bool{} // families and series ended
	family, series := "", ""
	lastMs := int64(-1)
	sc := bufio.NewScanner(bytes.NewReader(b))
	eof := false
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if eof {
			t.Fatalf("line %d after # EOF: %q", n, line)
		}
		switch {
		case line == "# EOF":
			eof = true
		case strings.HasPrefix(line, "# TYPE "):
			f := strings.Fields(line)
			if len(f) != 4 || done[f[2]] || types[f[2]] != "" {
				t.Fatalf("line %d: bad or repeated TYPE: %q", n, line)
			}
			done[family], family, types[f[2]] = true, f[2], f[3]
		case strings.HasPrefix(line, "# HELP "):
			if f := strings.Fields(line); len(f) < 4 || f[2] != family {
				t.Fatalf("line %d: HELP outside its family: %q", n, line)
			}
		case strings.HasPrefix(line, "#"):
			t.Fatalf("line %d: unknown comment %q", n, line)
		default:
			s, key := parseSampleLine(t, n, line)
			if s.family != family {
				t.Fatalf("line %d: sample of %s inside family %q", n, s.family, family)
			}
			if key != series {
				if done[key] {
					t.Fatalf("line %d: series %s resumed", n, key)
				}
				done[series], series, lastMs = true, key, -1
			}
			if s.ms <= lastMs {
				t.Fatalf("line %d: timestamp %d not after %d", n, s.ms, lastMs)
			}
			lastMs = s.ms
			samples = append(samples, s)
		}
	}
	if !eof || !bytes.HasSuffix(b, []byte("# EOF\n")) {
		t.Fatalf("no # EOF at the end")
	}
	return types, samples
}

// parseSampleLine parses `name{k="v",...} value seconds`.
func parseSampleLine(t *testing.T, n int, line string) (omSample, string) {
	t.Helper()
	open := strings.IndexByte(line, '{')
	if open < 0 {
		t.Fatalf("line %d: no labels: %q", n, line)
	}
	s := omSample{family: line[:open], labels: map[string]string{}}
	rest := line[open+1:]
	for !strings.HasPrefix(rest, "}") {
		eq := strings.Index(rest, `="`)
		if eq < 0 {
			t.Fatalf("line %d: bad label in %q", n, line)
		}
		name := rest[:eq]
		rest = rest[eq+2:]
		var v strings.Builder
		for {
			if rest == "" {
				t.Fatalf("line %d: unterminated label value", n)
			}
			c := rest[0]
			rest = rest[1:]
			if c == '"' {
				break
			}
			if c == '\\' {
				switch rest[0] {
				case 'n':
					v.WriteByte('\n')
				case '\\', '"':
					v.WriteByte(rest[0])
				default:
					t.Fatalf("line %d: bad escape in %q", n, line)
				}
				rest = rest[1:]
				continue
			}
			v.WriteByte(c)
		}
		s.labels[name] = v.String()
		rest = strings.TrimPrefix(rest, ",")
	}
	key := line[:len(line)-len(rest)+1]
	f := strings.Fields(rest[1:])
	if len(f) != 2 {
		t.Fatalf("line %d: want value and timestamp: %q", n, line)
	}
	var err error
	if s.value, err = strconv.ParseInt(f[0], 10, 64); err != nil {
		t.Fatalf("line %d: %v", n, err)
	}
	sec, frac, ok := strings.Cut(f[1], ".")
	secs, err1 := strconv.ParseInt(sec, 10, 64)
	ms, err2 := strconv.ParseInt(frac, 10, 64)
	if !ok || len(frac) != 3 || err1 != nil || err2 != nil {
		t.Fatalf("line %d: bad timestamp %q", n, f[1])
	}
	s.ms = secs*1000 + ms
	return s, key
}

// lagResult is a result with two Kafka partitions of one subscription
// whose name needs escaping, and a RabbitMQ-style dead-letter series.
func lagResult() *checker.Result {
	ms := int64(time.Millisecond)
	p0, p1 := int64(0), int64(1)
	return &checker.Result{Lag: &checker.Lag{
		Series: []checker.LagSeries{
			{Subscription: "inv\"en\\to\nry", Target: "run.inventory", Topic: "run.events", Partition: &p0, Samples: [][2]int64{{0, 3}, {500 * ms, 12}, {500*ms + 1, 13}, {1000 * ms, 0}}},
			{Subscription: "inv\"en\\to\nry", Target: "run.inventory", Topic: "run.events", Partition: &p1, Samples: [][2]int64{{1 * ms, 4}, {501 * ms, 0}}},
		},
		DLQ: []checker.LagSeries{{Subscription: "email", Target: "run.email.dlq", Samples: [][2]int64{{2 * ms, 1}}}},
	}}
}

// The file reads back as written: two gauge families, the labels
// unescaped, timestamps the run's start plus each sample's time, a
// sample in the same millisecond as the one before left out.
func TestWriteOpenMetrics(t *testing.T) {
	run := Record{Started: time.Date(2026, 12, 2, 17, 0, 0, 0, time.UTC)}
	var b bytes.Buffer
	if err := WriteOpenMetrics(&b, run, lagResult()); err != nil {
		t.Fatal(err)
	}
	types, samples := parseOpenMetrics(t, b.Bytes())
	if !reflect.DeepEqual(types, map[string]string{MetricConsumerLag: "gauge", MetricDLQDepth: "gauge"}) {
		t.Errorf("families %v", types)
	}
	base := run.Started.UnixMilli()
	var got []string
	for _, s := range samples {
		got = append(got, fmt.Sprintf("%s %s/%s/%s/%s/%s %d +%d", s.family, s.labels["subscription"], s.labels["group"], s.labels["topic"], s.labels["partition"], s.labels["queue"], s.value, s.ms-base))
	}
	want := []string{
		MetricConsumerLag + " inv\"en\\to\nry/run.inventory/run.events/0/ 3 +0",
		MetricConsumerLag + " inv\"en\\to\nry/run.inventory/run.events/0/ 12 +500",
		MetricConsumerLag + " inv\"en\\to\nry/run.inventory/run.events/0/ 0 +1000",
		MetricConsumerLag + " inv\"en\\to\nry/run.inventory/run.events/1/ 4 +1",
		MetricConsumerLag + " inv\"en\\to\nry/run.inventory/run.events/1/ 0 +501",
		MetricDLQDepth + " email////run.email.dlq 1 +2",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("samples\n%q\nwant\n%q", got, want)
	}
	// Without lag: the families' metadata and # EOF, still well formed.
	b.Reset()
	if err := WriteOpenMetrics(&b, run, nil); err != nil {
		t.Fatal(err)
	}
	if _, samples := parseOpenMetrics(t, b.Bytes()); len(samples) != 0 {
		t.Errorf("samples without lag: %v", samples)
	}
}

// promtool, when installed, agrees the file is well-formed OpenMetrics.
func TestOpenMetricsPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed")
	}
	path := filepath.Join(t.TempDir(), LagFile)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteOpenMetrics(f, Record{Started: time.Now()}, lagResult()); err != nil {
		t.Fatal(err)
	}
	f.Close()
	out, err := exec.Command(promtool, "tsdb", "create-blocks-from", "openmetrics", path, t.TempDir()).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool: %v\n%s", err, out)
	}
}
