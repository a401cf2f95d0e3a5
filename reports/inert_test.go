package reports

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/history"
)

// payloadRun is the payloads fixture's run and result with its fault
// windows and processes, as a run folder's report would show them.
func payloadRun(t *testing.T) (Record, *checker.Result) {
	t.Helper()
	f := fixture{drain: history.OK, payloads: true}
	run, res := f.run(), f.result()
	run.Faults = FaultWindows(res)
	if len(run.Faults) == 0 || res.Intruder == nil {
		t.Fatalf("the payloads fixture has no fault window or no intruder: %+v", run.Faults)
	}
	name := "consumer-email" + badUTF8 + "\x1b-0"
	run.Processes = []Process{{Name: name, Role: "consumer", Ops: 40, Log: "logs/" + name + ".log"}}
	return run, res
}

// The hostile payloads the fixture plants in the history reach the
// checker's result, so the report tests below see them: the event id and
// subscription with invalid bytes and controls, the reasons listing
// headers and nesting JSON (the checker keeps 300 bytes of each; the run's
// crash-loop reason and description carry them whole), the 1 MiB error.
func TestPayloadFixtureCarriesPayloads(t *testing.T) {
	_, res := payloadRun(t)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(res); err != nil {
		t.Fatal(err)
	}
	// encoding/json writes invalid bytes as U+FFFD and controls as \u00XX.
	for name, s := range map[string]string{
		"invalid UTF-8 id":  `"e4\ufffd`,
		"control bytes":     `\u0000\u0001\u0007`,
		"many headers":      "too many headers: x-hostile-0000=v0, x-hostile-0001=v1",
		"deep JSON":         strings.Repeat(`{\"a\":`, 50),
		"1 MiB error":       strings.Repeat(`<script>alert(\"script\")</script>\ufffd\ufffd\ufffd\ufffd\ufffd\ufffd\ufffd\u0000\u0001\u0007\b\u000b\f\u001b[2J`+"\x7f\u0085\ufffe", 1<<20/len(xssScript+badUTF8+ctrl)),
		"hostile intruder":  `"intruder-\ufffd`,
		"hostile sub email": `"email\ufffd`,
	} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("the result lacks the %s (%q)", name, s)
		}
	}
}

// maxReportHTML bounds report.html for the payloads fixture, whose run
// and result carry several MiB of hostile text: the page shows each
// string cut to maxShownText bytes, so its size is the report's, not the
// payloads'.
const maxReportHTML = 512 << 10

// report.html of a run full of hostile payloads is valid UTF-8 without
// the controls HTML forbids, parses with no element the template does not
// write, has no script from the data, stays under maxReportHTML, and
// marks where it cut a string.
func TestHTMLInertPayloads(t *testing.T) {
	run, res := payloadRun(t)
	var b bytes.Buffer
	if err := HTML(&b, run, res); err != nil {
		t.Fatal(err)
	}
	page := b.Bytes()
	defer func() {
		if t.Failed() {
			if f, err := os.CreateTemp("", "report-*.html"); err == nil {
				f.Write(page)
				f.Close()
				t.Logf("page: %s", f.Name())
			}
		}
	}()
	if len(page) > maxReportHTML {
		t.Errorf("report.html is %d bytes, over %d", len(page), maxReportHTML)
	}
	if !utf8.Valid(page) {
		i := firstInvalid(page)
		t.Errorf("report.html is not valid UTF-8 at byte %d: %q", i, page[max(0, i-40):min(len(page), i+10)])
	}
	for i, r := range string(page) {
		if htmlForbidden(r) {
			t.Errorf("report.html has control %U at byte %d: %q", r, i, page[max(0, i-40):min(len(page), i+10)])
			break
		}
	}
	if m := rawScript.Find(page); m != nil {
		t.Errorf("raw %q in the page", m)
	}
	if err := onlyTemplateElements(page); err != nil {
		t.Error(err)
	}
	if !bytes.Contains(page, []byte(cutMarker)) {
		t.Errorf("the page cut no string (no %q)", cutMarker)
	}
	// The lost event's id: its invalid bytes as U+FFFD, its controls as
	// pictures.
	if !bytes.Contains(page, []byte("e4\ufffd\ufffd\ufffd\ufffd\ufffd\ufffd\ufffd␀␁␇␈␋␌␛[2J␡\ufffd\ufffd")) {
		t.Error("the hostile event id is not shown")
	}
}

// firstInvalid is the offset of b's first byte that is not UTF-8.
func firstInvalid(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

// htmlForbidden reports whether r is a control or noncharacter that the
// HTML standard makes a parse error in a document's text (all controls
// but tab, line feed, form feed and carriage return; U+FFFE, U+FFFF).
func htmlForbidden(r rune) bool {
	switch {
	case r == '\t' || r == '\n' || r == '\f' || r == '\r':
		return false
	case r < 0x20 || r >= 0x7f && r < 0xa0:
		return true
	case r >= 0xfdd0 && r <= 0xfdef || r&0xfffe == 0xfffe:
		return true
	}
	return false
}

// templateElement is an element name in the report template.
var templateElement = regexp.MustCompile(`<([a-zA-Z][a-zA-Z0-9]*)\b`)

// onlyTemplateElements parses page as HTML (encoding/xml in its lenient
// HTML mode; the module has no HTML parser) and returns an error for a
// parse error or an element the template does not write.
func onlyTemplateElements(page []byte) error {
	tmpl, err := templateFS.ReadFile("report.html.tmpl")
	if err != nil {
		return err
	}
	allowed := map[string]bool{}
	for _, m := range templateElement.FindAllSubmatch(tmpl, -1) {
		allowed[strings.ToLower(string(m[1]))] = true
	}
	d := xml.NewDecoder(bytes.NewReader(page))
	d.Strict, d.AutoClose, d.Entity = false, xml.HTMLAutoClose, xml.HTMLEntity
	var elements int
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if se, ok := tok.(xml.StartElement); ok {
			elements++
			if name := strings.ToLower(se.Name.Local); !allowed[name] {
				return errors.New("element <" + name + "> is not the template's")
			}
		}
	}
	if elements < 100 {
		return errors.New("the page parsed into too few elements to be the report")
	}
	return nil
}

// results.json of a run full of hostile payloads is valid UTF-8 JSON that
// reads back into the same envelope (encoding/json writes a byte that is
// not UTF-8 as the escape \ufffd and reads it back as U+FFFD, so the
// second writing is the fixed point), and ReadRunDir reads the folder.
func TestResultsJSONInertPayloads(t *testing.T) {
	run, res := payloadRun(t)
	var b bytes.Buffer
	if err := WriteResultsJSON(&b, run, res); err != nil {
		t.Fatal(err)
	}
	if !utf8.Valid(b.Bytes()) || !json.Valid(b.Bytes()) {
		t.Fatal("results.json is not valid UTF-8 JSON")
	}
	validate(t, compileSchema(t), b.Bytes())
	back, again := readBack(t, b.Bytes())
	back2, again2 := readBack(t, again)
	if !bytes.Equal(again, again2) || !reflect.DeepEqual(back, back2) {
		t.Error("results.json read back and written again is not a fixed point")
	}
	if back.Run.Scenario != "order"+strings.Repeat("\ufffd", len(badUTF8))+ctrl || back.Run.HarnessError[:len(xssScript)] != xssScript ||
		len(back.Run.HarnessError) != len(huge)+(len("\ufffd")-1)*strings.Count(huge, badUTF8)*len(badUTF8) {
		t.Errorf("results.json's scenario or harness error read back as %q, %d bytes", back.Run.Scenario, len(back.Run.HarnessError))
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ResultsFile), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, got, err := ReadRunDir(dir); err != nil || got.Valid != res.Valid {
		t.Errorf("ReadRunDir: %v, verdict %v", err, got)
	}
}

// readBack decodes results.json and writes it again as WriteResultsJSON
// does.
func readBack(t *testing.T, b []byte) (Results, []byte) {
	t.Helper()
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("results.json does not read back: %v", err)
	}
	again, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return r, append(again, '\n')
}

// junit.xml of a run full of hostile payloads is valid UTF-8, decodes
// with encoding/xml, and has no character XML 1.0 forbids nor a raw
// script.
func TestJUnitInertPayloads(t *testing.T) {
	run, res := payloadRun(t)
	var b bytes.Buffer
	if err := JUnit(&b, run, res); err != nil {
		t.Fatal(err)
	}
	doc := b.Bytes()
	if !utf8.Valid(doc) {
		t.Fatalf("junit.xml is not valid UTF-8 at byte %d", firstInvalid(doc))
	}
	for i, r := range string(doc) {
		if !xmlChar(r) {
			t.Fatalf("junit.xml has %U at byte %d, not an XML 1.0 character", r, i)
		}
	}
	if m := rawScript.Find(doc); m != nil {
		t.Errorf("raw %q in junit.xml", m)
	}
	var suites xSuites
	if err := xml.Unmarshal(doc, &suites); err != nil {
		t.Fatalf("junit.xml does not parse: %v", err)
	}
	if len(suites.Suites) != 1 || !slices.ContainsFunc(suites.Suites[0].Cases, func(c xCase) bool { return c.Error != nil }) {
		t.Errorf("junit.xml lost its suite or the harness error: %+v", suites)
	}
}

// xmlChar is XML 1.0's Char production.
func xmlChar(r rune) bool {
	return r == 0x9 || r == 0xA || r == 0xD || r >= 0x20 && r <= 0xD7FF || r >= 0xE000 && r <= 0xFFFD || r >= 0x10000 && r <= 0x10FFFF
}

// shown keeps plain text as it is, shows what is not text as U+FFFD or a
// control picture, and cuts long text at a rune boundary with a marker.
func TestShown(t *testing.T) {
	long := strings.Repeat("é", maxShownText) // two bytes each
	for _, tc := range []struct{ name, in, want string }{
		{"plain", "e1 <b>\t\"x\"\n", "e1 <b>\t\"x\"\n"},
		{"empty", "", ""},
		{"invalid bytes", "a\xffb\xc0\xafc", "a\ufffdb\ufffd\ufffdc"},
		{"NUL, ESC and CR", "\x00\x1b[2J\r", "␀␛[2J␍"},
		{"DEL and a C1 control", "\x7f\u0085", "␡\ufffd"},
		{"noncharacters", "\ufffe\uffff\ufdd0\U0001fffe", "\ufffd\ufffd\ufffd\ufffd"},
		{"at the limit", strings.Repeat("a", maxShownText), strings.Repeat("a", maxShownText)},
		{"over the limit", strings.Repeat("a", maxShownText+1), strings.Repeat("a", maxShownText) + cutMarker + "4,097 bytes in all, whole in results.json]"},
		{"cut at a rune", long, long[:maxShownText] + cutMarker + "8,192 bytes in all, whole in results.json]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := shown(tc.in)
			if got != tc.want {
				t.Errorf("shown(%.40q) = %.80q, want %.80q", tc.in, got, tc.want)
			}
			if !utf8.ValidString(got) {
				t.Errorf("shown(%.40q) is not valid UTF-8", tc.in)
			}
		})
	}
}

// Rendering the page leaves the run and the result as they were: the view
// shares their slices, and inert rewrites copies.
func TestHTMLLeavesResultWhole(t *testing.T) {
	run, res := payloadRun(t)
	before, _ := json.Marshal(struct {
		R Record
		C *checker.Result
	}{run, res})
	if err := HTML(io.Discard, run, res); err != nil {
		t.Fatal(err)
	}
	after, _ := json.Marshal(struct {
		R Record
		C *checker.Result
	}{run, res})
	if !bytes.Equal(before, after) {
		t.Error("rendering report.html changed the run or the result")
	}
}

// A reason's one line (a harness error's first line) is cut at a rune
// boundary: results.json and junit.xml show it as it is.
func TestOneLineCutsAtRune(t *testing.T) {
	in := "x" + strings.Repeat("é", 200) // é at odd offsets: byte 300 is inside one
	got := oneLine(in)
	if !utf8.ValidString(got) || !strings.HasSuffix(got, "é…") || len(got) > 300+len("…") {
		t.Errorf("oneLine cut to %d bytes: %q", len(got), got[max(0, len(got)-10):])
	}
}
