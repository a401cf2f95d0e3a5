package reports

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/history"
)

// The positions of a consumer that skipped an offset reach the report:
// a row per subscription, marked bad, with its counts and first
// delivery.
func TestPositionsReported(t *testing.T) {
	h, _, err := history.ReadFile(filepath.Join("..", "checker", "testdata", "positions-poll-skip.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := checker.ParseGuarantees("effectively-once,subscriptions=inv")
	if err != nil {
		t.Fatal(err)
	}
	res := checker.Check(h, checker.Options{Guarantees: g})
	run := Record{Scenario: "positions", Guarantees: g}
	v := newView(run, res)
	if len(v.Positions) != 1 || v.Positions[0].PollSkip != 1 || v.Positions[0].Class != "bad" || v.Positions[0].Sessions != 2 || v.Positions[0].Joined == "" {
		t.Fatalf("positions %+v", v.Positions)
	}
	var page bytes.Buffer
	if err := HTML(&page, run, res); err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(page.String(), `<h2 id="positions">Positions</h2>`)
	if !ok {
		t.Fatal("the page has no Positions section")
	}
	section, _, _ = strings.Cut(section, "<h2")
	for _, s := range []string{`<tr class="bad"><td>inv</td>`, "poll-skip"} {
		if !strings.Contains(section, s) {
			t.Errorf("the Positions section lacks %q:\n%s", s, section)
		}
	}
}
