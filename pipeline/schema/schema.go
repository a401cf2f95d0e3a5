// Package schema holds the pipeline's PostgreSQL tables and the final read
// that turns them into history ops after a run.
//
// Read schema.sql first: orders (the aggregate), outbox (Debezium's outbox
// shape), inbox (unique per consumer), effects (append-only, no unique
// constraint, so duplicates show), projection (the version guard's state)
// and dead_letters.
package schema

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliverycheck/deliverycheck/history"
)

//go:embed schema.sql
var ddl string

// DDL returns the statements that create every table.
func DDL() string { return ddl }

// Create creates every table (idempotent).
func Create(ctx context.Context, db *pgxpool.Pool) error {
	if _, err := db.Exec(ctx, ddl); err != nil {
		return fmt.Errorf("create schema: %w", err)
	}
	return nil
}

// Reset empties every table, for a fresh run on a reused database.
func Reset(ctx context.Context, db *pgxpool.Pool) error {
	_, err := db.Exec(ctx, `TRUNCATE orders, outbox, inbox, inbox_unchecked, inbox_keyed, effects, projection, dead_letters, relay_idle RESTART IDENTITY`)
	if err != nil {
		return fmt.Errorf("reset schema: %w", err)
	}
	return nil
}

// FinalRead reads the authoritative final state into ops: one
// [history.FinalRead] ok op per outbox, effects, inbox and dead_letters
// row, bracketed by an invoke and an ok without a table so a reader can
// tell a complete final read from one cut short. Rows come in a stable
// order so the same state always gives the same history.
//
// extra are a team's own tables, read in the same snapshot after the
// built-in ones. base is the run's start, the history's clock: each
// effect's commit timestamp (when the server tracks them) is recorded as
// its commit_time on that clock, since the order effects committed in is
// what order checks judge, not the order rows were inserted in.
//
// brokerRows are final-read ops read from the broker before the snapshot
// (what its dead-letter queues and its log hold, and how the read of the
// log ended), recorded as given inside the same bracket.
func FinalRead(ctx context.Context, db *pgxpool.Pool, rec *history.Recorder, base time.Time, brokerRows []history.Entry, extra ...Query) error {
	if _, err := rec.Record(history.Invoke, history.FinalRead, history.Value{}); err != nil {
		return err
	}
	// One snapshot for all four tables.
	tx, err := db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("final read: %w", err)
	}
	defer tx.Rollback(context.Background())
	var track string
	if err := tx.QueryRow(ctx, `SELECT current_setting('track_commit_timestamp')`).Scan(&track); err != nil {
		return fmt.Errorf("final read: %w", err)
	}
	committed := `NULL::timestamptz`
	if track == "on" {
		committed = `pg_xact_commit_timestamp(xmin)`
	}
	queries := []struct {
		table string
		sql   string
		scan  func(pgx.Rows) (history.Value, error)
	}{
		{history.TableOutbox, `SELECT id, source, aggregateid, version, published_at IS NOT NULL FROM outbox ORDER BY seq`,
			func(r pgx.Rows) (v history.Value, err error) {
				err = r.Scan(&v.Event, &v.Source, &v.Key, &v.Version, &v.Published)
				return v, err
			}},
		{history.TableEffects, `SELECT event_id, source, consumer, aggregateid, version, ` + committed + ` FROM effects ORDER BY seq`,
			func(r pgx.Rows) (v history.Value, err error) {
				var at *time.Time
				err = r.Scan(&v.Event, &v.Source, &v.Consumer, &v.Key, &v.Version, &at)
				v.CommitTime = sinceBase(at, base)
				return v, err
			}},
		{history.TableInbox, `SELECT event_id, source, consumer FROM inbox ORDER BY consumer, source, event_id`,
			func(r pgx.Rows) (v history.Value, err error) {
				err = r.Scan(&v.Event, &v.Source, &v.Consumer)
				return v, err
			}},
		{history.TableDLQ, `SELECT event_id, source, consumer, aggregateid, version, reason, attempts FROM dead_letters ORDER BY seq`,
			func(r pgx.Rows) (v history.Value, err error) {
				var attempts int32
				err = r.Scan(&v.Event, &v.Source, &v.Consumer, &v.Key, &v.Version, &v.Reason, &attempts)
				v.Attempt = int64(attempts)
				return v, err
			}},
	}
	for _, q := range queries {
		rows, err := tx.Query(ctx, q.sql)
		if err != nil {
			return fmt.Errorf("final read %s: %w", q.table, err)
		}
		for rows.Next() {
			v, err := q.scan(rows)
			if err != nil {
				rows.Close()
				return fmt.Errorf("final read %s: %w", q.table, err)
			}
			v.Table = q.table
			if _, err := rec.Record(history.OK, history.FinalRead, v); err != nil {
				rows.Close()
				return err
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("final read %s: %w", q.table, err)
		}
	}
	for _, q := range extra {
		if err := q.read(ctx, tx, rec, base); err != nil {
			return err
		}
	}
	if err := rec.RecordAll(brokerRows); err != nil {
		return err
	}
	if _, err := rec.Record(history.OK, history.FinalRead, history.Value{}); err != nil {
		return err
	}
	return nil
}

// sinceBase is t on the history's clock (ns since base), 0 for no time.
// A commit before base (a clock step) is clamped to 1, still a time.
func sinceBase(t *time.Time, base time.Time) int64 {
	if t == nil || t.IsZero() {
		return 0
	}
	return max(1, t.Sub(base).Nanoseconds())
}

// Query is a team's own SQL whose rows the final read records as rows of
// Table (history.TableEffects, history.TableInbox or history.TableDLQ).
// Columns are matched by name: event_id, consumer, aggregate_id, version,
// source, reason, committed_at (or its older name applied_at); the others
// are ignored. committed_at becomes the row's commit_time; rows are
// recorded in committed_at order when the query returns it (ties keep the
// query's order, and the checker orders neither before the other), else
// in the query's order.
type Query struct {
	Table string
	SQL   string
	// Source fills in the source of rows without a source column.
	Source string
}

func (q Query) read(ctx context.Context, tx pgx.Tx, rec *history.Recorder, base time.Time) error {
	rows, err := tx.Query(ctx, q.SQL)
	if err != nil {
		return fmt.Errorf("final read %s (team query): %w", q.Table, err)
	}
	defer rows.Close()
	names := make([]string, len(rows.FieldDescriptions()))
	for i, f := range rows.FieldDescriptions() {
		names[i] = f.Name
	}
	type row struct {
		v  history.Value
		at time.Time
	}
	var out []row
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return fmt.Errorf("final read %s (team query): %w", q.Table, err)
		}
		r := row{v: history.Value{Table: q.Table, Source: q.Source}}
		for i, n := range names {
			if vals[i] == nil {
				continue
			}
			switch n {
			case "event_id":
				r.v.Event = fmt.Sprint(vals[i])
			case "consumer":
				r.v.Consumer = fmt.Sprint(vals[i])
			case "aggregate_id":
				r.v.Key = fmt.Sprint(vals[i])
			case "source":
				r.v.Source = fmt.Sprint(vals[i])
			case "reason":
				r.v.Reason = fmt.Sprint(vals[i])
			case "version":
				n, err := strconv.ParseInt(fmt.Sprint(vals[i]), 10, 64)
				if err != nil {
					return fmt.Errorf("final read %s (team query): version %v is not an integer", q.Table, vals[i])
				}
				r.v.Version = n
			case "committed_at", "applied_at":
				t, ok := vals[i].(time.Time)
				if !ok {
					return fmt.Errorf("final read %s (team query): %s %v is not a timestamp", q.Table, n, vals[i])
				}
				r.at = t
				r.v.CommitTime = sinceBase(&t, base)
			}
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("final read %s (team query): %w", q.Table, err)
	}
	// Effects are recorded in commit order: by committed_at when the query
	// has it (ties keep the query's order), else in the query's order.
	slices.SortStableFunc(out, func(a, b row) int { return a.at.Compare(b.at) })
	for _, r := range out {
		if _, err := rec.Record(history.OK, history.FinalRead, r.v); err != nil {
			return err
		}
	}
	return nil
}
