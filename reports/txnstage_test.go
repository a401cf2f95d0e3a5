package reports

import (
	"bytes"
	"encoding/xml"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/history"
)

// txnStageResult checks a golden history of a transactional stage
// (checker/testdata/txn-stage-*.jsonl), its ops changed by edit if set.
func txnStageResult(t *testing.T, name string, edit func(*history.Op)) *checker.Result {
	t.Helper()
	h, _, err := history.ReadFile(filepath.Join("..", "checker", "testdata", name+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		for i := range h {
			edit(&h[i])
		}
	}
	g, _ := checker.Preset("effectively-once")
	return checker.Check(h, checker.Options{Guarantees: g})
}

func TestTxnStageView(t *testing.T) {
	tests := []struct {
		name     string
		topics   string // delivery words on each side
		database string
		checks   map[string]string
	}{
		{
			name: "txn-stage-db-boundary", topics: "exactly once", database: "at least once",
			checks: map[string]string{"processor: no output duplicates": "held", "processor: transactions atomic": "held",
				"processor: aborted records invisible": "held", "processor: no duplicate effects": "broken", "billing: no duplicate effects": "held",
				"processor: input order kept": "allowed"},
		},
		{
			name: "txn-stage-read-uncommitted", topics: "at least once", database: "at least once",
			checks: map[string]string{"processor: aborted records invisible": "broken", "processor: no output lost": "held"},
		},
		{
			name: "txn-stage-valid", topics: "exactly once",
			checks: map[string]string{"processor: aborted records invisible": "held", "processor: no transaction left open": "held", "billing: no loss": "held"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := txnStageResult(t, tt.name, nil)
			v := newView(Record{Scenario: tt.name}, res)
			st := v.TxnStage
			if st == nil {
				t.Fatal("no stage section")
			}
			if st.TopicsDelivery != tt.topics || (st.Database == nil) != (tt.database == "") || st.Database != nil && st.Database.Delivery != tt.database {
				t.Errorf("topics %q, database %+v; want %q and %q", st.TopicsDelivery, st.Database, tt.topics, tt.database)
			}
			if tt.database != "" && !strings.Contains(v.Summary, "Transactional stage: "+tt.topics+" on Kafka's topics; "+tt.database+" on the database.") {
				t.Errorf("summary %q does not state the boundary", v.Summary)
			}
			got := statuses(v)
			for k, want := range tt.checks {
				if got[k] != want {
					t.Errorf("check %q: %q, want %q", k, got[k], want)
				}
			}
		})
	}
}

// An aborted-visible example shows its input across both output topics:
// the aborted record, written by its transaction and delivered, and the
// committed one the final read saw.
func TestTxnStageExampleTopics(t *testing.T) {
	res := txnStageResult(t, "txn-stage-read-uncommitted", nil)
	i := slices.IndexFunc(res.Anomalies, func(a checker.Anomaly) bool { return a.Kind == checker.AbortedVisible })
	if i < 0 {
		t.Fatalf("no aborted-visible: %+v", res.Anomalies)
	}
	av := newAnomalyView(i, res.Anomalies[i])
	if av.Subscription != "run.invoices" {
		t.Errorf("anomaly in %q, want its topic", av.Subscription)
	}
	ex := av.Examples[0]
	var lines []string
	for _, tl := range ex.Topics {
		for _, r := range tl.Records {
			lines = append(lines, strings.Join([]string{tl.Topic, r.Where, r.Written, r.Read, map[bool]string{true: "visible"}[r.Final], r.Class}, "|"))
		}
	}
	want := []string{
		"run.invoices|p0@0|processor-0:0:1 (aborted)|delivered to billing||bad",
		"run.invoices|p0@2|processor-0:0:2 (committed)|reader-0, delivered to billing|visible|",
		"run.revenue|p0@0|processor-0:0:1 (aborted)|||",
		"run.revenue|p0@2|processor-0:0:2 (committed)|reader-0|visible|",
	}
	if !slices.Equal(lines, want) {
		t.Errorf("topic lines\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

// Each broken guarantee of the stage is a JUnit failure of its kind.
func TestTxnStageJUnit(t *testing.T) {
	res := txnStageResult(t, "txn-stage-read-uncommitted", nil)
	var b bytes.Buffer
	if err := JUnit(&b, Record{Scenario: "txn"}, res); err != nil {
		t.Fatal(err)
	}
	var s xSuites
	if err := xml.Unmarshal(b.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, c := range s.Suites[0].Cases {
		got[c.Name] = outcome(c)
		if c.Failure != nil && c.Name == "processor: aborted records invisible" {
			if c.Failure.Type != string(checker.AbortedVisible) || !strings.Contains(c.Failure.Message, "1 aborted-visible") {
				t.Errorf("failure %+v", c.Failure)
			}
		}
	}
	for name, want := range map[string]string{"processor: aborted records invisible": "failure", "processor: no output duplicates": "pass",
		"processor: no duplicate effects": "failure", "processor: input order kept": ""} {
		if got[name] != want {
			t.Errorf("%s: %q, want %q (all %v)", name, got[name], want, got)
		}
	}
}

// Without the processor's lineage, the harness's aborted rows say which
// records aborted: the one billing read is marked bad all the same.
func TestTxnStageExampleTopicsWithoutLineage(t *testing.T) {
	res := txnStageResult(t, "txn-stage-team-read-uncommitted", nil)
	i := slices.IndexFunc(res.Anomalies, func(a checker.Anomaly) bool { return a.Kind == checker.AbortedVisible })
	if i < 0 {
		t.Fatalf("no aborted-visible: %+v", res.Anomalies)
	}
	var lines []string
	for _, tl := range newAnomalyView(i, res.Anomalies[i]).Examples[0].Topics {
		for _, r := range tl.Records {
			lines = append(lines, strings.Join([]string{tl.Topic, r.Where, r.Written, r.Read, map[bool]string{true: "visible"}[r.Final], r.Class}, "|"))
		}
	}
	want := []string{
		"run.invoices|p0@0|aborted (read uncommitted, not committed)|delivered to billing||bad",
		"run.invoices|p0@2||reader-0, delivered to billing|visible|",
		"run.revenue|p0@0|aborted (read uncommitted, not committed)|||",
		"run.revenue|p0@2||reader-0|visible|",
	}
	if !slices.Equal(lines, want) {
		t.Errorf("topic lines\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if st := res.TxnStage; st.Transactions.Begun != 0 || st.Topics[0].Aborted != 1 || st.Topics[0].Uncommitted != "complete" {
		t.Errorf("stage %+v", st)
	}
}

// The stage's results validate against the published schema.
func TestTxnStageResultsSchema(t *testing.T) {
	sch := compileSchema(t)
	for _, name := range []string{"txn-stage-valid", "txn-stage-read-uncommitted", "txn-stage-db-boundary", "txn-stage-team-valid", "txn-stage-team-read-uncommitted"} {
		var b bytes.Buffer
		if err := WriteResultsJSON(&b, Record{Scenario: name}, txnStageResult(t, name, nil)); err != nil {
			t.Fatal(err)
		}
		validate(t, sch, b.Bytes())
	}
}

// Topic names and event ids are untrusted: the stage's section and its
// examples show them escaped.
func TestTxnStageEscapes(t *testing.T) {
	res := txnStageResult(t, "txn-stage-read-uncommitted", func(op *history.Op) {
		v := &op.Value
		if v.Topic == "run.invoices" {
			v.Topic = xssScript
		}
		for i, tp := range v.Topics {
			if tp == "run.invoices" {
				v.Topics[i] = xssScript
			}
		}
		if v.Txn != "" {
			v.Txn = xssAttr + v.Txn
		}
		if v.Event == "e1" {
			v.Event = xssSub
		}
	})
	var b bytes.Buffer
	if err := HTML(&b, Record{Scenario: "txn"}, res); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, re := range []*regexp.Regexp{rawScript, rawHandler, rawImgOrSVG} {
		if m := re.FindString(page); m != "" {
			t.Errorf("%q in the page", m)
		}
	}
	for _, s := range []string{"&lt;script&gt;alert(", "&lt;img src=x onerror=alert(1)&gt;", "Transactional stage"} {
		if !strings.Contains(page, s) {
			t.Errorf("page does not show %q", s)
		}
	}
}

// The boundary: the report sets the topics' half and the database's
// side by side under the sentence that joins them, and the JUnit output
// ends with that sentence too. The database half names the effect's
// subscription, which the history names: escaped.
func TestTxnStageBoundaryShown(t *testing.T) {
	res := txnStageResult(t, "txn-stage-db-boundary", func(op *history.Op) {
		if op.Value.Consumer == "processor" {
			op.Value.Consumer = xssSub
		}
	})
	const sentence = "exactly once on Kafka's topics; at least once on the database"
	if st := res.TxnStage; st == nil || st.Boundary != sentence || st.Database == nil || st.Database.Subscription != xssSub {
		t.Fatalf("stage %+v", st)
	}
	var b bytes.Buffer
	if err := HTML(&b, Record{Scenario: "txn"}, res); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, re := range []*regexp.Regexp{rawScript, rawHandler, rawImgOrSVG} {
		if m := re.FindString(page); m != "" {
			t.Errorf("%q in the page", m)
		}
	}
	half := regexp.MustCompile(`(?s)<div class="grid boundary">\s*<div class="side ok"><b>Kafka's topics</b><div class="big">exactly once</div></div>\s*` +
		`<div class="side bad"><b>the database</b> <span class="muted">\(effects of email&#39;&#34;&gt;&lt;svg onload=alert\(2\)&gt;\)</span><div class="big">at least once</div>` +
		`<div class="muted">3 events, 6 effects: 3 events twice</div></div>\s*</div>\s*<p class="summary">exactly once on Kafka&#39;s topics; at least once on the database</p>`)
	if !half.MatchString(page) {
		i := strings.Index(page, `<div class="grid boundary">`)
		t.Errorf("the two halves and the sentence are not shown side by side:\n%s", page[max(i, 0):min(len(page), max(i, 0)+900)])
	}
	b.Reset()
	if err := JUnit(&b, Record{Scenario: "txn"}, res); err != nil {
		t.Fatal(err)
	}
	var s struct {
		Suites []struct {
			SystemOut string `xml:"system-out"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Suites) != 1 || !strings.HasSuffix(strings.TrimSpace(s.Suites[0].SystemOut), "Transactional stage: "+sentence+".") {
		t.Errorf("JUnit system-out does not end with the boundary: %+v", s.Suites)
	}
}
