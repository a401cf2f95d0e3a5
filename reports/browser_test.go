package reports

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/internal/testenv"
)

// chromium returns the headless browser, or skips: .ci/run installs
// Debian's chromium (scripts/deps.sh), a laptop may not have it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testenv.MustHaveServer(t, "chromium", errors.New("no chromium on PATH (scripts/deps.sh installs it)"))
	return ""
}

// headless runs the browser on a file with no network and a throwaway
// profile, returning stdout and stderr.
func headless(t *testing.T, bin, page string, args ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(), "--enable-logging=stderr", "--v=0"}
	cmd := exec.CommandContext(ctx, bin, append(append(base, args...), "file://"+page)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
	}
	return stdout.String(), stderr.String()
}

// Console errors, uncaught exceptions and CSP refusals (something tried to
// run) as Chromium logs them to stderr.
// Chromium 156 logs them as `INFO:CONSOLE:1] "message", source: ...`.
var consoleProblem = regexp.MustCompile(`(?i)(Uncaught|CONSOLE[:(]\d+|Refused to (execute|load|apply)|Content.Security.Policy)`)

// A real run's report, a report full of hostile strings and one full of
// hostile payloads open in headless Chromium with no console error and no
// injected element, and render to a screenshot ($DELIVERYCHECK_REPORT_SHOT
// keeps a copy of the real one, e.g. for docs/report.png).
func TestReportInBrowser(t *testing.T) {
	bin := chromium(t)
	t.Run("control: a page that runs a script is caught", func(t *testing.T) {
		page := filepath.Join(t.TempDir(), "bad.html")
		os.WriteFile(page, []byte(`<html><body><img src=x onerror="undefinedFn()"></body></html>`), 0o644)
		dom, stderr := headless(t, bin, page, "--dump-dom")
		if !consoleProblem.MatchString(stderr) || !rawImgOrSVG.MatchString(dom) {
			t.Fatalf("the detectors missed a script error; stderr:\n%s\nDOM:\n%s", stderr, dom)
		}
	})
	// readDir is a run folder's report as ReadRunDir reads it.
	readDir := func(t *testing.T, dir string) (string, Record, *checker.Result) {
		t.Helper()
		run, res, err := ReadRunDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		return dir, run, res
	}
	for _, tc := range []struct {
		name   string
		report func(t *testing.T) (dir string, run Record, res *checker.Result)
	}{
		{"real run", func(t *testing.T) (string, Record, *checker.Result) {
			dir := t.TempDir()
			for _, f := range []string{RunFile, ResultsFile} {
				b, err := os.ReadFile(filepath.Join("testdata", "run-no-inbox-rabbitmq", f))
				if err != nil {
					t.Fatal(err)
				}
				os.WriteFile(filepath.Join(dir, f), b, 0o644)
			}
			return readDir(t, dir)
		}},
		{"hostile", func(t *testing.T) (string, Record, *checker.Result) {
			f := fixture{drain: history.OK, hostile: true}
			dir := f.writeRunDir(t)
			if err := WriteAll(dir, f.run(), f.result()); err != nil {
				t.Fatal(err)
			}
			dir, run, res := readDir(t, dir)
			run.HarnessError = xssScript + xssAttr
			return dir, run, res
		}},
		// Invalid UTF-8, controls, 1 MiB strings: in memory, as the runner
		// has them (a history file holds no invalid UTF-8 to read back).
		{"hostile payloads", func(t *testing.T) (string, Record, *checker.Result) {
			run, res := payloadRun(t)
			return t.TempDir(), run, res
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, run, res := tc.report(t)
			page := filepath.Join(dir, HTMLName)
			if err := HTMLFile(page, run, res); err != nil {
				t.Fatal(err)
			}

			dom, stderr := headless(t, bin, page, "--dump-dom")
			if m := consoleProblem.FindAllString(stderr, -1); len(m) > 0 {
				t.Errorf("console problems %q:\n%s", m, stderr)
			}
			if !strings.Contains(dom, `class="banner `) || !strings.Contains(dom, "<svg") {
				t.Errorf("DOM lacks the banner or the plots:\n%.2000s", dom)
			}
			for _, re := range []*regexp.Regexp{rawScript, rawHandler, rawImgOrSVG} {
				if m := re.FindString(dom); m != "" {
					t.Errorf("injected element in the DOM: %q", m)
				}
			}

			shot := filepath.Join(t.TempDir(), "report.png")
			headless(t, bin, page, "--hide-scrollbars", "--window-size=1280,2400", "--screenshot="+shot)
			st, err := os.Stat(shot)
			if err != nil || st.Size() < 10_000 {
				t.Fatalf("screenshot %s: %v", shot, err)
			}
			t.Logf("screenshot: %s (%d bytes), page %s", shot, st.Size(), page)
			if keep := os.Getenv("DELIVERYCHECK_REPORT_SHOT"); keep != "" && tc.name == "real run" {
				b, _ := os.ReadFile(shot)
				if err := os.WriteFile(keep, b, 0o644); err != nil {
					t.Error(err)
				}
			}
		})
	}
}
