package producer

import (
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
			if !slices.Contains(placeholders, a) {
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
