package pipeline

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliverycheck/deliverycheck/history"
	"github.com/deliverycheck/deliverycheck/pipeline/producer"
	"github.com/deliverycheck/deliverycheck/pipeline/schema"
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
			sys:  System{Setup: "CREATE TABLE broken (", Where: map[string]string{"system.setup": "shop.yaml:3"}},
			want: []string{"shop.yaml:3: system.setup: ", "syntax error"},
		},
		{
			name: "effects query fails",
			sys:  System{Consumers: consumer, EffectsQuery: "SELECT event_id, consumer FROM no_such_table", Where: map[string]string{"system.effects_query": "shop.yaml:20"}},
			want: []string{"shop.yaml:20: system.effects_query: ", `"no_such_table" does not exist`},
		},
		{
			name: "effects query misses a column",
			sys:  System{Consumers: consumer, EffectsQuery: "SELECT 'e' AS event, 'c' AS consumer"},
			want: []string{`system.effects_query: returns column "event"`, "event_id, consumer, aggregate_id, version, source, committed_at, applied_at"},
		},
		{
			name: "effects query lacks the consumer",
			sys:  System{Consumers: consumer, EffectsQuery: "SELECT 'e' AS event_id"},
			want: []string{`system.effects_query: must return column "consumer"`},
		},
		{
			name: "inbox query wrong",
			sys:  System{Consumers: consumer, EffectsQuery: "SELECT 'e' AS event_id, 'c' AS consumer", InboxQuery: "SELECT 'e' AS event_id, 'c' AS sub"},
			want: []string{`system.inbox_query: returns column "sub"`, "event_id, consumer, source"},
		},
		{
			name: "pending query not one integer",
			sys:  System{Relay: &External{Command: []string{"/bin/sleep", "60"}}, PendingQuery: "SELECT 1, 2", Where: map[string]string{"system.pending_query": "shop.yaml:30"}},
			want: []string{"shop.yaml:30: system.pending_query: ", "one row with one integer"},
		},
		{
			name: "dead-letters query wrong",
			sys:  System{Consumers: consumer, EffectsQuery: "SELECT 'e' AS event_id, 'c' AS consumer", DeadLettersQuery: "SELECT 1 AS why"},
			want: []string{`system.dead_letters_query: returns column "why"`},
		},
		{
			name: "transaction statement does not prepare",
			sys:  System{Transaction: []producer.Statement{bind("INSERT INTO nowhere (id) VALUES (:event_id)")}},
			want: []string{"system.transaction[0]: ", `"nowhere" does not exist`},
		},
		{
			name: "transaction placeholder PostgreSQL cannot type",
			sys: System{Transaction: []producer.Statement{
				bind("SELECT 1"),
				bind("SELECT json_build_object('id', :event_id, 'v', :version::int)"),
			}, Where: map[string]string{"system.transaction[0]": "shop.yaml:6", "system.transaction[1]": "shop.yaml:7"}},
			want: []string{"shop.yaml:7: system.transaction[1]: PostgreSQL cannot tell the type of :event_id", ":event_id::text", "42P18"},
		},
		{
			name: "destination placeholder of the other broker",
			sys: System{Transaction: []producer.Statement{bind("INSERT INTO outbox (id) VALUES (:exchange)")},
				Where: map[string]string{"system.transaction[0]": "shop.yaml:6"}},
			want: []string{"shop.yaml:6: system.transaction[0]: :exchange only exists on rabbitmq runs, and this run's broker is kafka: use :topic"},
		},
		{
			name: "consumer command not found",
			sys: System{Consumers: map[string]External{"inventory": {Command: []string{"./no-such-consumer"}, Dir: t.TempDir()}},
				EffectsQuery: "SELECT 'e' AS event_id, 'c' AS consumer", Where: map[string]string{"system.consumer.command": "shop.yaml:14"}},
			want: []string{"shop.yaml:14: system.consumer.command: ", "no-such-consumer"},
		},
		{
			name: "relay command not found",
			sys: System{Relay: &External{Command: []string{"./no-such-relay"}, Dir: t.TempDir()},
				Where: map[string]string{"system.relay.command": "shop.yaml:12"}},
			want: []string{"shop.yaml:12: system.relay.command: ", "no-such-relay"},
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

// A team's transaction can name the event's destination, the run's
// events topic or exchange, the same name its relay gets in its
// environment.
func TestTeamTransactionBindsDestination(t *testing.T) {
	cl := servers.Get(t)
	for i, tc := range []struct{ broker, placeholder string }{{"kafka", ":topic"}, {"rabbitmq", ":exchange"}} {
		t.Run(tc.broker, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			st, err := producer.Bind("INSERT INTO team_outbox (id, destination) VALUES (:event_id, " + tc.placeholder + ")")
			if err != nil {
				t.Fatal(err)
			}
			cfg := Config{Broker: tc.broker, Producers: 1, Rate: 50, Subscriptions: []string{"inventory"},
				Name: "d_" + strconv.FormatInt(time.Now().UnixNano(), 36) + strconv.Itoa(i),
				System: System{Setup: "CREATE TABLE team_outbox (id text PRIMARY KEY, destination text)",
					Transaction: []producer.Statement{st}, Relay: &External{Command: []string{"sleep", "600"}}}}
			r, err := Start(ctx, cl, t.TempDir(), cfg, workerCmd(), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			var got []string
			waitUntil(t, 30*time.Second, func() error {
				rows, err := r.DB().Query(ctx, "SELECT DISTINCT destination FROM team_outbox")
				if err != nil {
					return err
				}
				got, err = pgx.CollectRows(rows, pgx.RowTo[string])
				if err == nil && len(got) == 0 {
					err = errors.New("no row yet")
				}
				return err
			})
			env := r.contractEnv("relay-0", "relay", "")
			want := map[string]string{"kafka": EnvKafkaTopic, "rabbitmq": EnvAMQPExchange}[tc.broker] + "=" + got[0]
			if len(got) != 1 || !slices.Contains(env, want) {
				t.Errorf("%s bound %q; the relay's environment is %q", tc.placeholder, got, env)
			}
		})
	}
}

// A team's effects are recorded in commit order: by committed_at (or
// applied_at) when the query returns it, which also becomes each row's
// commit_time on the history's clock, else in the query's own order.
func TestTeamEffectsOrder(t *testing.T) {
	cl := servers.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn, err := createDatabase(ctx, cl.ClientURL("postgres"), "o_"+strconv.FormatInt(time.Now().UnixNano(), 36))
	if err != nil {
		t.Fatal(err)
	}
	db, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := schema.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	// Inserted e3, e1, e2; applied (by the clock the team kept) e1, e2, e3.
	if _, err := db.Exec(ctx, `CREATE TABLE moves (id serial, event text, sub text, at timestamptz);
		INSERT INTO moves (event, sub, at) VALUES ('e3', 'inv', '2026-01-01 00:00:03+00'), ('e1', 'inv', '2026-01-01 00:00:01+00'), ('e2', 'inv', '2026-01-01 00:00:02+00')`); err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		sql, want string
		timed     bool
	}{
		{"SELECT event AS event_id, sub AS consumer, at AS committed_at FROM moves", "e1 e2 e3", true},
		{"SELECT event AS event_id, sub AS consumer, at AS applied_at FROM moves", "e1 e2 e3", true},
		{"SELECT event AS event_id, sub AS consumer FROM moves ORDER BY id", "e3 e1 e2", false},
	} {
		var buf bytes.Buffer
		rec := history.NewWriterRecorder(&buf, "harness", time.Now())
		if err := schema.FinalRead(ctx, db, rec, base, nil, schema.Query{Table: history.TableEffects, SQL: tc.sql, Source: "/orders"}); err != nil {
			t.Fatal(err)
		}
		h, _, err := history.Read(&buf, "h")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, op := range h {
			if op.Value.Table == history.TableEffects {
				got = append(got, op.Value.Event)
				if op.Value.Source != "/orders" || op.Value.Consumer != "inv" {
					t.Errorf("row %+v", op.Value)
				}
				// e1 committed 1 s after the base, on the history's clock.
				want := int64(0)
				if tc.timed {
					want = map[string]int64{"e1": 1e9, "e2": 2e9, "e3": 3e9}[op.Value.Event]
				}
				if op.Value.CommitTime != want {
					t.Errorf("%s: %s commit_time %d, want %d", tc.sql, op.Value.Event, op.Value.CommitTime, want)
				}
			}
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("%s: order %q, want %q", tc.sql, got, tc.want)
		}
	}
}
