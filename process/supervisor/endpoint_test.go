package supervisor

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/failpoint"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/internal/testenv"
)

// The Go half of TestEndpointClients: the test binary, started as an
// external worker, is a component using the failpoint package.
func init() {
	switch os.Getenv("ENDPOINT_TEST_CHILD") {
	case "go":
	case "threads":
		// Eight threads reach the failpoint together, again and again.
		fmt.Println("before")
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 50 {
					failpoint.Inject("after-commit-before-ack")
				}
			})
		}
		wg.Wait()
		fmt.Println("after")
		time.Sleep(10 * time.Minute)
	default:
		return
	}
	fmt.Println("before")
	failpoint.InjectEvent("after-commit-before-ack", "ev-1")
	fmt.Println("after")
	if os.Getenv(failpoint.EnvEndpoint) != "" {
		time.Sleep(10 * time.Minute)
	}
	os.Exit(0)
}

// A client component in each language, as the test runs it: the client
// docs/contract.md gives for that language, and a main that records a
// delivery, crosses after-commit-before-ack for ev-1 between printing
// "before" and "after", records the ack, and then waits to be stopped
// (or, outside a run, exits).
var clientMains = map[string]struct {
	files func(client string) map[string]string
	argv  []string
}{
	"python": {
		files: func(client string) map[string]string {
			return map[string]string{"deliverycheck.py": client, "main.py": `import os, time
from deliverycheck import failpoint, history
history({"type": "ok", "f": "deliver", "value": {"event": "ev-1", "consumer": "inventory"}})
print("before", flush=True)
failpoint("after-commit-before-ack", "ev-1")
print("after", flush=True)
history({"type": "ok", "f": "ack", "value": {"event": "ev-1", "consumer": "inventory"}})
if os.environ.get("DELIVERYCHECK_ENDPOINT"):
    time.sleep(600)
`}
		},
		argv: []string{"python3", "main.py"},
	},
	"node": {
		files: func(client string) map[string]string {
			return map[string]string{"deliverycheck.js": client, "main.js": `const { failpoint, history } = require("./deliverycheck.js");
(async () => {
  await history({ type: "ok", f: "deliver", value: { event: "ev-1", consumer: "inventory" } });
  console.log("before");
  await failpoint("after-commit-before-ack", "ev-1");
  console.log("after");
  await history({ type: "ok", f: "ack", value: { event: "ev-1", consumer: "inventory" } });
  if (process.env.DELIVERYCHECK_ENDPOINT) setTimeout(() => {}, 600000);
})();
`}
		},
		argv: []string{"node", "main.js"},
	},
	"java": {
		// The source launcher runs the first class of one file, and
		// imports come first: hoist the client's.
		files: func(client string) map[string]string {
			var imports, rest []string
			for _, l := range strings.Split(client, "\n") {
				if strings.HasPrefix(l, "import ") {
					imports = append(imports, l)
				} else {
					rest = append(rest, l)
				}
			}
			return map[string]string{"Main.java": strings.Join(imports, "\n") + `
public class Main {
    public static void main(String[] args) throws Exception {
        Deliverycheck.history("{\"type\":\"ok\",\"f\":\"deliver\",\"value\":{\"event\":\"ev-1\",\"consumer\":\"inventory\"}}\n");
        System.out.println("before");
        System.out.flush();
        Deliverycheck.failpoint("after-commit-before-ack", "ev-1");
        System.out.println("after");
        System.out.flush();
        Deliverycheck.history("{\"type\":\"ok\",\"f\":\"ack\",\"value\":{\"event\":\"ev-1\",\"consumer\":\"inventory\"}}\n");
        if (System.getenv("DELIVERYCHECK_ENDPOINT") != null) Thread.sleep(600_000);
    }
}
` + strings.Join(rest, "\n")}
		},
		argv: []string{"java", "Main.java"},
	},
}

// docClients returns the client code blocks of docs/contract.md, by the
// language of their "<!-- client: lang -->" marker.
func docClients(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "contract.md"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)<!-- client: (\\w+) -->\n```\\w+\n(.*?)```\n")
	out := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		out[m[1]] = m[2]
	}
	return out
}

// Every client docs/contract.md gives, and the Go package, run as a real
// external worker against a real endpoint: armed kill(2), the first two
// incarnations die inside the failpoint call (they print "before" and
// never "after"), each crash recorded once with its event and counted as
// a hit; the third passes the disarmed failpoint. The lineage they send
// lands in the worker's endpoint history. Outside a run the same program
// runs straight through.
func TestEndpointClients(t *testing.T) {
	docs := docClients(t)
	for _, lang := range []string{"go", "python", "node", "java"} {
		t.Run(lang, func(t *testing.T) {
			dir := t.TempDir()
			var argv, env []string
			if lang == "go" {
				argv, env = []string{os.Args[0], "-test.run=^$"}, []string{"ENDPOINT_TEST_CHILD=go"}
			} else {
				m := clientMains[lang]
				client, ok := docs[lang]
				if !ok {
					t.Fatalf("docs/contract.md has no <!-- client: %s --> block", lang)
				}
				_, err := exec.LookPath(m.argv[0])
				testenv.MustHaveServer(t, m.argv[0], err)
				for name, text := range m.files(client) {
					if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				argv = m.argv
			}

			hist := filepath.Join(dir, "history")
			var harness bytes.Buffer
			s, err := New(Config{Command: []string{"/bin/false"}, LogDir: filepath.Join(dir, "logs"), RestartDelay: 10 * time.Millisecond,
				HistoryDir: hist, Base: time.Now(), Recorder: history.NewWriterRecorder(&harness, "harness", time.Now()),
				Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			const name = "consumer-inventory-0"
			term, _ := failpoint.ParseAny("after-commit-before-ack=kill(2)")
			if err := s.StartCommand(context.Background(), name, Command{Argv: argv, Env: env, Dir: dir, Failpoints: []failpoint.Term{term}}); err != nil {
				t.Fatal(err)
			}
			logPath := filepath.Join(dir, "logs", name+".log")
			lines := waitLines(t, logPath, "after", 90*time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := s.StopAll(ctx); err != nil {
				t.Fatal(err)
			}
			if want := []string{"before", "before", "before", "after"}; !slices.Equal(lines, want) {
				b, _ := os.ReadFile(logPath)
				t.Fatalf("printed %q, want %q; log:\n%s", lines, want, b)
			}
			if n, _ := s.Hits(name, "after-commit-before-ack"); n != 2 {
				t.Errorf("hits = %d, want 2", n)
			}
			if c, r := s.Stats(name); c != 2 || r != 2 {
				t.Errorf("crashes, restarts = %d, %d; want 2, 2", c, r)
			}
			if bytes.Contains(harness.Bytes(), []byte(`"f":"crash"`)) {
				t.Errorf("the supervisor recorded the failpoint's crash again:\n%s", harness.Bytes())
			}

			h, cuts, err := history.ReadFile(filepath.Join(hist, name+EndpointHistorySuffix))
			if err != nil || len(cuts) > 0 {
				t.Fatalf("endpoint history: %v, cuts %v", err, cuts)
			}
			var got []string
			for _, op := range h {
				if op.Process != name {
					t.Errorf("op of process %q, want %q: %v", op.Process, name, op)
				}
				got = append(got, fmt.Sprintf("%s %s %s %s", op.Type, op.F, op.Value.Event, op.Value.Detail))
			}
			deliver, crash := "ok deliver ev-1 ", "info crash ev-1 failpoint after-commit-before-ack"
			want := []string{deliver, crash, deliver, crash, deliver, "ok ack ev-1 "}
			if lang == "go" { // its lineage goes through history.Recorder
				want = []string{crash, crash}
			}
			if !slices.Equal(got, want) {
				t.Errorf("endpoint history:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}

			// Outside a run: no endpoint, nothing armed, straight through.
			ctx, cancel = context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
			cmd.Dir = dir
			cmd.Env = append(slices.DeleteFunc(os.Environ(), func(e string) bool {
				return strings.HasPrefix(e, failpoint.EnvEndpoint+"=")
			}), env...)
			out, err := cmd.CombinedOutput()
			if err != nil || string(out) != "before\nafter\n" {
				t.Errorf("outside a run: %v, printed %q, want \"before\\nafter\\n\"", err, out)
			}
		})
	}
}

// waitLines waits until the log at path has a line want, and returns its
// lines "before" and "after".
func waitLines(t *testing.T, path, want string, timeout time.Duration) []string {
	t.Helper()
	var lines []string
	testenv.Eventually(t, context.Background(), timeout, fmt.Sprintf("a line %q in %s", want, path), func() error {
		b, _ := os.ReadFile(path)
		lines = lines[:0]
		for _, l := range strings.Split(string(b), "\n") {
			if l == "before" || l == "after" {
				lines = append(lines, l)
			}
		}
		if !slices.Contains(lines, want) {
			return fmt.Errorf("have:\n%s", b)
		}
		return nil
	})
	return lines
}

// endpointSup is a supervisor with one external worker, relay-0, that
// sleeps; its endpoint URL is returned.
func endpointSup(t testing.TB) (*Supervisor, string, string) {
	t.Helper()
	hist := t.TempDir()
	s, err := New(Config{Command: []string{"/bin/false"}, LogDir: t.TempDir(), HistoryDir: hist, Base: time.Now(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.StopAll(ctx)
	})
	if err := s.StartCommand(context.Background(), "relay-0", Command{Argv: []string{"/bin/sleep", "600"}}); err != nil {
		t.Fatal(err)
	}
	return s, s.EndpointURL("relay-0"), filepath.Join(hist, "relay-0"+EndpointHistorySuffix)
}

func post(t testing.TB, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/x-ndjson", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A history request is recorded whole or, with one bad line, not at all,
// and the answer names the line; ops only the harness writes are refused.
func TestEndpointHistory(t *testing.T) {
	_, url, path := endpointSup(t)
	for _, tc := range []struct {
		name, body string
		status     int
		msg        string
	}{
		{"torn line", `{"type":"ok","f":"deliver","value":{"event":"a"}}` + "\n" + `{"type":"ok","f":"ack"`, 400, "line 2:"},
		{"no type", `{"f":"deliver","value":{"event":"a"}}`, 400, "line 1: history: invalid op: it has no type"},
		{"no f", `{"type":"ok","value":{"event":"a"}}`, 400, "line 1: no f"},
		{"harness only", `{"type":"ok","f":"deliver"}` + "\n\n" + `{"type":"ok","f":"final-read","value":{"table":"effects","event":"x"}}`, 400, `line 3: f "final-read" is written by the harness only`},
		{"the stage is the harness's", `{"type":"ok","f":"txn-stage","value":{"topics":["x"]}}`, 400, `line 1: f "txn-stage" is written by the harness only`},
		{"bad utf-8 id", `{"type":"ok","f":"deliver","value":{"event":"\ud800"}}`, 400, "not valid UTF-8"},
		{"recorded", `{"type":"ok","f":"deliver","value":{"event":"a","consumer":"inventory","attempt":2},"time":5,"process":"someone-else"}` + "\n" + `{"type":"ok","f":"ack","value":{"event":"a","consumer":"inventory"}}` + "\n", 204, ""},
	} {
		status, msg := post(t, url+"/history", tc.body)
		if status != tc.status || !strings.Contains(msg, tc.msg) {
			t.Errorf("%s: %d %q, want %d %q", tc.name, status, msg, tc.status, tc.msg)
		}
	}
	h, _, err := history.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 2 || h[0].F != history.Deliver || h[0].Value.Attempt != 2 || h[1].F != history.Ack || h[0].Process != "relay-0" || h[0].Time == 5 {
		t.Fatalf("recorded %v, want the two ops of the good request, stamped by the harness", h)
	}
}

// A URL that is not this run's, or names no external worker, or a bad
// failpoint name, is refused with a reason; an unarmed failpoint is 204.
func TestEndpointRefuses(t *testing.T) {
	s, url, _ := endpointSup(t)
	base := strings.TrimSuffix(url, "/relay-0")
	for _, tc := range []struct {
		url    string
		status int
		msg    string
	}{
		{url + "/failpoint/before-publish", 204, ""},
		{url + "/failpoint/before-publish=kill(1)", 400, "bad failpoint name"},
		{base + "/relay-9/failpoint/before-publish", 404, `no external worker "relay-9"`},
		{strings.Replace(url, "/relay-0", "x/relay-0", 1) + "/failpoint/before-publish", 404, "not this run's endpoint"},
	} {
		if status, msg := post(t, tc.url, ""); status != tc.status || !strings.Contains(msg, tc.msg) {
			t.Errorf("POST %s: %d %q, want %d %q", tc.url, status, msg, tc.status, tc.msg)
		}
	}
	if n, _ := s.Hits("relay-0", "before-publish"); n != 0 {
		t.Errorf("hits = %d, want 0", n)
	}
}

// BenchmarkEndpointFailpoint is the cost of one unarmed failpoint call
// through the Go client: what a component pays per event and window.
func BenchmarkEndpointFailpoint(b *testing.B) {
	_, url, _ := endpointSup(b)
	c := failpoint.NewClient(url)
	ctx := context.Background()
	for b.Loop() {
		c.Inject(ctx, "after-commit-before-ack", "4b1c2f0e-5d6a-4f7e-9a1b-2c3d4e5f6a7b")
	}
}

// BenchmarkEndpointHistory is the cost of recording one lineage op.
func BenchmarkEndpointHistory(b *testing.B) {
	_, url, _ := endpointSup(b)
	body := `{"type":"ok","f":"deliver","value":{"event":"4b1c2f0e-5d6a-4f7e-9a1b-2c3d4e5f6a7b","consumer":"inventory","attempt":1}}` + "\n"
	client := &http.Client{}
	for b.Loop() {
		resp, err := client.Post(url+"/history", "application/x-ndjson", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			b.Fatal(resp.Status)
		}
	}
}

// Threads of one process that reach an armed failpoint together die
// together: one crash, one hit, so kill(2) is two incarnations, not two
// threads of the first.
func TestEndpointConcurrentHits(t *testing.T) {
	dir := t.TempDir()
	s, err := New(Config{Command: []string{"/bin/false"}, LogDir: dir, RestartDelay: 10 * time.Millisecond,
		HistoryDir: dir, Base: time.Now(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	term, _ := failpoint.ParseAny("after-commit-before-ack=kill(2)")
	if err := s.StartCommand(context.Background(), "relay-0", Command{Argv: []string{os.Args[0], "-test.run=^$"},
		Env: []string{"ENDPOINT_TEST_CHILD=threads"}, Failpoints: []failpoint.Term{term}}); err != nil {
		t.Fatal(err)
	}
	lines := waitLines(t, filepath.Join(dir, "relay-0.log"), "after", 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.StopAll(ctx); err != nil {
		t.Fatal(err)
	}
	if want := []string{"before", "before", "before", "after"}; !slices.Equal(lines, want) {
		t.Errorf("printed %q, want %q", lines, want)
	}
	if n, _ := s.Hits("relay-0", "after-commit-before-ack"); n != 2 {
		t.Errorf("hits = %d, want 2", n)
	}
	h, _, err := history.ReadFile(filepath.Join(dir, "relay-0"+EndpointHistorySuffix))
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 2 {
		t.Errorf("%d crash ops, want 2: %v", len(h), h)
	}
}
