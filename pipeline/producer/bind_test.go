package producer

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestBind(t *testing.T) {
	tests := []struct {
		in, sql string
		args    []string
		err     string
	}{
		{in: "INSERT INTO outbox (id, aggregateid) VALUES (:event_id, :aggregate_id)",
			sql: "INSERT INTO outbox (id, aggregateid) VALUES ($1, $2)", args: []string{"event_id", "aggregate_id"}},
		{in: "UPDATE t SET v = :version, w = :version::text WHERE k = :aggregate_id",
			sql: "UPDATE t SET v = $1, w = $1::text WHERE k = $2", args: []string{"version", "aggregate_id"}},
		{in: "INSERT INTO x VALUES (:payload::jsonb, 'a:b', \"c:d\", $$e:f$$, $q$:g$q$) -- :h\n/* :i */",
			sql: "INSERT INTO x VALUES ($1::jsonb, 'a:b', \"c:d\", $$e:f$$, $q$:g$q$) -- :h\n/* :i */", args: []string{"payload"}},
		{in: "SELECT 'it''s :x'", sql: "SELECT 'it''s :x'"},
		{in: "SELECT :nope", err: "unknown placeholder :nope"},
		{in: "SELECT $1", err: "positional parameter"},
		{in: "  ", err: "empty statement"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			st, err := Bind(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if st.SQL != tt.sql || !slices.Equal(st.Args, tt.args) {
				t.Fatalf("Bind = %q %q, want %q %q", st.SQL, st.Args, tt.sql, tt.args)
			}
		})
	}
}

// TestStatementValues: each placeholder binds its op's value, in $n
// order, on the broker it exists on; the other broker's destination
// placeholder is refused before the run.
func TestStatementValues(t *testing.T) {
	v := Values{EventID: "e-1", AggregateID: "order-3", Version: 7, Payload: `{"v":7}`, Type: EventType, Source: "/orders", Events: "run1.events"}
	tests := []struct {
		broker, sql string
		want        []any
		err         string
	}{
		{broker: "kafka", sql: "INSERT INTO box (id, agg, v, body, t, src, dest) VALUES (:event_id, :aggregate_id, :version, :payload, :type, :source, :topic)",
			want: []any{"e-1", "order-3", int64(7), `{"v":7}`, EventType, "/orders", "run1.events"}},
		{broker: "rabbitmq", sql: "INSERT INTO box (dest, id, again) VALUES (:exchange, :event_id, :exchange)",
			want: []any{"run1.events", "e-1"}},
		{broker: "kafka", sql: "INSERT INTO box (topic, exchange) VALUES (:topic, :exchange)", err: ":exchange only exists on rabbitmq runs, and this run's broker is kafka: use :topic"},
		{broker: "rabbitmq", sql: "INSERT INTO box (dest) VALUES (:topic)", err: ":topic only exists on kafka runs, and this run's broker is rabbitmq: use :exchange"},
		{broker: "", sql: "INSERT INTO box (dest) VALUES (:topic)", err: ":topic only exists on kafka runs, and this run's broker is not set"},
		{broker: "", sql: "INSERT INTO box (id) VALUES (:event_id)", want: []any{"e-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.broker+" "+tt.sql, func(t *testing.T) {
			st, err := Bind(tt.sql)
			if err != nil {
				t.Fatal(err)
			}
			err = st.CheckBroker(tt.broker)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("CheckBroker = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Values(v); !slices.Equal(got, tt.want) {
				t.Fatalf("Values = %#v, want %#v", got, tt.want)
			}
		})
	}
}

// TestNewChecksBroker: a producer built in Go gets the same check as a
// scenario file.
func TestNewChecksBroker(t *testing.T) {
	st, err := Bind("INSERT INTO box (dest) VALUES (:exchange)")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Variant: Outbox, Transaction: []Statement{{SQL: "SELECT 1"}, st}, Broker: "kafka", Events: "x.events"}
	if _, err := New(cfg, nil, nil, nil, nil); err == nil || !strings.Contains(err.Error(), "transaction[1]: :exchange only exists on rabbitmq runs") {
		t.Fatalf("New = %v", err)
	}
	cfg.Broker = "rabbitmq"
	if _, err := New(cfg, nil, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
}

// TestPlaceholderDocs keeps docs/contract.md's placeholder table the list
// Bind reads, row for row, and the scenario reference naming each.
func TestPlaceholderDocs(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "contract.md"))
	if err != nil {
		t.Fatal(err)
	}
	var want, got []string
	for _, p := range placeholders {
		want = append(want, "| `:"+p.name+"` | "+p.doc+" |")
	}
	for line := range strings.Lines(string(data)) {
		if strings.HasPrefix(line, "| `:") {
			got = append(got, strings.TrimSpace(line))
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("docs/contract.md's placeholder table is\n%s\nwant (from placeholders in bind.go)\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	ref, err := os.ReadFile(filepath.Join("..", "..", "docs", "scenarios.md"))
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(ref), "| `transaction` |")
	if i < 0 {
		t.Fatal("docs/scenarios.md has no transaction row")
	}
	row, _, _ := strings.Cut(string(ref[i:]), "\n")
	for _, p := range placeholders {
		if !strings.Contains(row, "`:"+p.name+"`") {
			t.Errorf("docs/scenarios.md's transaction row does not name :%s (scenarios.System.Transaction's doc)", p.name)
		}
	}
}

var positional = regexp.MustCompile(`\$([0-9]+)`)

// FuzzBind: Bind never panics, and what it accepts numbers its parameters
// 1..len(Args), each naming a placeholder, with no :name left outside
// quotes it did not understand.
func FuzzBind(f *testing.F) {
	for _, s := range []string{"INSERT INTO t VALUES (:event_id, :version::int)", "'a:b' \"x\" $t$:q$t$ -- :c", "/* :x", "$", ":", "::", "'"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		st, err := Bind(in)
		if err != nil {
			return
		}
		for _, a := range st.Args {
			if _, ok := lookup(a); !ok {
				t.Fatalf("arg %q is not a placeholder", a)
			}
		}
		if strings.Contains(in, "$") {
			return // positions may be inside quoted text the input had
		}
		for _, m := range positional.FindAllStringSubmatch(st.SQL, -1) {
			n, _ := strconv.Atoi(m[1])
			if n < 1 || n > len(st.Args) {
				t.Fatalf("$%d out of range in %q (args %q)", n, st.SQL, st.Args)
			}
		}
	})
}

// TestNewEventID: ids are UUIDv7 (version and variant bits set), unique,
// and ordered by their millisecond.
func TestNewEventID(t *testing.T) {
	seen := map[string]bool{}
	prev := ""
	for i := range 1000 {
		id := NewEventID()
		if len(id) != 36 || id[14] != '7' || !strings.ContainsRune("89ab", rune(id[19])) {
			t.Fatalf("%s is not a UUIDv7", id)
		}
		if seen[id] {
			t.Fatalf("%s generated twice", id)
		}
		seen[id] = true
		if i > 0 && id[:13] < prev[:13] {
			t.Fatalf("%s's timestamp is before %s's", id, prev)
		}
		prev = id
	}
}

// BenchmarkNewEventID: an id is made per event, on the producer's path.
func BenchmarkNewEventID(b *testing.B) {
	for b.Loop() {
		_ = NewEventID()
	}
}
