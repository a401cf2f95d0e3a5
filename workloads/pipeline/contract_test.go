package pipeline

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/workloads/producer"
)

// Bad contract input stops the run in Start, before any worker (let
// alone any fault) runs, with an error that says what is wrong.
func TestContractErrors(t *testing.T) {
	cl := servers.Get(t)
	bind := func(sql string) producer.Statement {
		st, err := producer.Bind(sql)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	consumer := map[string]External{"inventory": {Command: []string{"/bin/sleep", "60"}}}
	tests := []struct {
		name string
		sys  System
		want []string
	}{
		{
			name: "setup SQL fails",
			sys:  System{Setup: "CREATE TABLE broken ("},
			want: []string{"system setup SQL", "syntax error"},
		},
		{
			name: "effects query fails",
			sys:  System{Consumers: consumer, EffectsQuery: "SELECT event_id, consumer FROM no_such_table"},
			want: []string{"effects query", `"no_such_table" does not exist`},
		},
		{
			name: "effects query misses a column",
			sys:  System{Consumers: consumer, EffectsQuery: "SELECT 'e' AS event, 'c' AS consumer"},
			want: []string{`effects query returns column "event"`, "event_id, consumer, aggregate_id, version, source"},
		},
		{
			name: "effects query lacks the consumer",
			sys:  System{Consumers: consumer, EffectsQuery: "SELECT 'e' AS event_id"},
			want: []string{`effects query must return column "consumer"`},
		},
		{
			name: "dead-letters query wrong",
			sys:  System{Consumers: consumer, EffectsQuery: "SELECT 'e' AS event_id, 'c' AS consumer", DeadLettersQuery: "SELECT 1 AS why"},
			want: []string{`dead-letters query returns column "why"`},
		},
		{
			name: "transaction statement does not prepare",
			sys:  System{Transaction: []producer.Statement{bind("INSERT INTO nowhere (id) VALUES (:event_id)")}},
			want: []string{"system transaction statement 1", `"nowhere" does not exist`},
		},
		{
			name: "consumer command not found",
			sys: System{Consumers: map[string]External{"inventory": {Command: []string{"./no-such-consumer"}, Dir: t.TempDir()}},
				EffectsQuery: "SELECT 'e' AS event_id, 'c' AS consumer"},
			want: []string{"no-such-consumer"},
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			dir := t.TempDir()
			cfg := Config{Broker: "kafka", Name: "c_" + strconv.FormatInt(time.Now().UnixNano(), 36) + strconv.Itoa(i),
				Subscriptions: []string{"inventory"}, System: tt.sys}
			r, err := Start(ctx, cl, dir, cfg, workerCmd(), nil)
			if err == nil {
				r.Close()
				t.Fatal("Start succeeded")
			}
			if !errors.Is(err, ErrContract) {
				t.Errorf("error %q is not an ErrContract (bad input)", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			// Nothing ran: no worker wrote a history, no fault was recorded.
			files, _ := filepath.Glob(filepath.Join(dir, HistoryDir, "*.jsonl"))
			for _, f := range files {
				if filepath.Base(f) == "harness.jsonl" {
					f, err := os.Open(f)
					if err != nil {
						t.Fatal(err)
					}
					h, _, err := history.Read(f, "harness.jsonl")
					f.Close()
					if err != nil {
						t.Fatal(err)
					}
					for _, op := range h {
						if op.F == history.Fault || op.F == history.Crash {
							t.Errorf("fault before the contract was checked: %+v", op)
						}
					}
					continue
				}
				t.Errorf("a worker ran: %s", f)
			}
		})
	}
}
