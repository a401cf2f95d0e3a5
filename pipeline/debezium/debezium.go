// Package debezium runs Debezium's outbox event router as the pipeline's
// relay.
//
// It is a Kafka Connect standalone worker with the PostgreSQL connector,
// reading the outbox table from the WAL (logical replication, pgoutput)
// and publishing each row to the run's topic with the same headers the
// built-in relay writes. It is a relay nobody here wrote, run through the
// same contract as a team's: a supervised command, behind the proxies, so
// kill -9, pause and network faults reach it.
//
// Debezium is at-least-once: its position (the LSN) is flushed to the
// offsets file and confirmed to the replication slot every
// Config.FlushInterval, so a crash republishes what it read since.
//
// Read [Jars], then [Config.Command].
package debezium

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliverycheck/deliverycheck/internal/maven"
)

// Versions of what the relay runs.
const (
	Version        = "3.6.1.Final" // Debezium
	ConnectVersion = "4.1.1"       // Kafka Connect, the broker's release
)

//go:embed pom.xml
var pom []byte

// Jars returns the directory of Connect's and Debezium's jars, fetched
// from Maven Central on first use into the per-user cache (see
// maven.Jars).
func Jars(ctx context.Context) (string, error) {
	return maven.Jars(ctx, "debezium-"+Version+"-connect-"+ConnectVersion, pom)
}

// JarsStatus says where the jars are or would be cached and whether they
// are there; it never fetches (for `deliverycheck doctor`).
func JarsStatus() (dir string, ok bool) {
	return maven.JarsStatus("debezium-" + Version + "-connect-" + ConnectVersion)
}

// Config is one relay's connection to the run.
type Config struct {
	// Dir holds the worker's properties and its offsets file; it must
	// outlive the process, so a restarted relay resumes where the last
	// one flushed.
	Dir string
	// PostgresDSN is the run's database (behind its proxy).
	PostgresDSN string
	// Bootstrap is the Kafka seed list (behind its proxy).
	Bootstrap string
	// Topic receives every event.
	Topic string
	// Name makes the replication slot, publication and connector unique
	// on a shared PostgreSQL: lowercase letters, digits and '_'.
	Name string
	// FlushInterval is how often offsets are flushed (the window a crash
	// republishes), overriding the default 1s.
	FlushInterval time.Duration
}

// Slot is the replication slot the relay reads from.
func (c Config) Slot() string { return c.Name + "_outbox" }

// Publication is the publication of the outbox table.
func (c Config) Publication() string { return c.Name + "_outbox" }

// Command writes the worker's properties into Dir and returns the command
// that runs it, with libs (from [Jars]) as its classpath.
func (c Config) Command(libs string) ([]string, error) {
	pg, err := pgx.ParseConfig(c.PostgresDSN)
	if err != nil {
		return nil, fmt.Errorf("debezium: postgres dsn: %w", err)
	}
	if c.Name == "" || strings.Trim(c.Name, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" {
		return nil, fmt.Errorf("debezium: name %q: want lowercase letters, digits and '_'", c.Name)
	}
	flush := c.FlushInterval
	if flush <= 0 {
		flush = time.Second
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("debezium: %w", err)
	}
	worker := props{
		"bootstrap.servers":            c.Bootstrap,
		"key.converter":                "org.apache.kafka.connect.storage.StringConverter",
		"value.converter":              "org.apache.kafka.connect.storage.StringConverter",
		"header.converter":             "org.apache.kafka.connect.storage.SimpleHeaderConverter",
		"offset.storage.file.filename": filepath.Join(c.Dir, "offsets"),
		"offset.flush.interval.ms":     strconv.FormatInt(flush.Milliseconds(), 10),
		// Connect always serves its REST API; the harness does not use
		// it, so any free port on loopback will do.
		"listeners":                         "http://127.0.0.1:0",
		"task.shutdown.graceful.timeout.ms": "2000",
		// acks=all and idempotence, as the built-in relay publishes.
		"producer.acks":               "all",
		"producer.enable.idempotence": "true",
	}
	connector := props{
		"name":                        c.Name,
		"connector.class":             "io.debezium.connector.postgresql.PostgresConnector",
		"tasks.max":                   "1",
		"plugin.name":                 "pgoutput",
		"database.hostname":           pg.Host,
		"database.port":               strconv.Itoa(int(pg.Port)),
		"database.user":               pg.User,
		"database.password":           pg.Password,
		"database.dbname":             pg.Database,
		"topic.prefix":                c.Name,
		"table.include.list":          "public.outbox",
		"slot.name":                   c.Slot(),
		"publication.name":            c.Publication(),
		"publication.autocreate.mode": "filtered",
		"snapshot.mode":               "no_data", // the harness starts producers only once the slot is there
		"tombstones.on.delete":        "false",
		"errors.retry.timeout":        "-1",
		"transforms":                  "outbox",
		"transforms.outbox.type":      "io.debezium.transforms.outbox.EventRouter",
		"transforms.outbox.route.topic.replacement":           c.Topic,
		"transforms.outbox.table.field.event.key":             "aggregateid",
		"transforms.outbox.table.expand.json.payload":         "false",
		"transforms.outbox.table.fields.additional.placement": "id:header:event-id,source:header:source,version:header:version,type:header:type,aggregateid:header:aggregate-id",
	}
	log4j := "status = warn\n" +
		"appender.out.type = Console\nappender.out.name = out\nappender.out.layout.type = PatternLayout\n" +
		"appender.out.layout.pattern = %d{ISO8601} %p %c{1} %m%n\n" +
		"rootLogger.level = info\nrootLogger.appenderRef.out.ref = out\n" +
		"logger.kafka.name = org.apache.kafka\nlogger.kafka.level = warn\n" +
		"logger.connect.name = org.apache.kafka.connect.runtime\nlogger.connect.level = info\n"
	files := map[string]string{"worker.properties": worker.String(), "connector.properties": connector.String(), "log4j2.properties": log4j}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(c.Dir, name), []byte(body), 0o600); err != nil {
			return nil, fmt.Errorf("debezium: %w", err)
		}
	}
	return []string{
		"java", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
		"-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
		"-Dlog4j2.configurationFile=" + filepath.Join(c.Dir, "log4j2.properties"),
		"-cp", filepath.Join(libs, "*"),
		"org.apache.kafka.connect.cli.ConnectStandalone",
		filepath.Join(c.Dir, "worker.properties"), filepath.Join(c.Dir, "connector.properties"),
	}, nil
}

// props is a Java properties file.
type props map[string]string

func (p props) String() string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + "=" + escapeProp(p[k]) + "\n")
	}
	return b.String()
}

// escapeProp escapes a value for a properties file.
func escapeProp(v string) string {
	r := strings.NewReplacer(`\`, `\\`, "\n", `\n`, "\r", `\r`, "\t", `\t`)
	v = r.Replace(v)
	if strings.HasPrefix(v, " ") {
		v = `\` + v
	}
	return v
}

// WaitReady waits until the relay streams: its replication slot exists
// and is active. Events committed before that would not be read (the
// connector takes no snapshot), so producers start only after it.
func WaitReady(ctx context.Context, db *pgxpool.Pool, c Config) error {
	for {
		var active bool
		err := db.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, c.Slot()).Scan(&active)
		if err == nil && active {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("debezium: slot %s not streaming: %w", c.Slot(), ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Drop removes the relay's replication slot and publication once it has
// stopped, so a shared PostgreSQL does not keep WAL for it forever. The
// slot stays active for a moment after Connect exits (until its WAL sender
// notices); Drop waits for that, within ctx.
func Drop(ctx context.Context, db *pgxpool.Pool, c Config) error {
	for {
		var n int64
		err := db.QueryRow(ctx, `SELECT count(pg_drop_replication_slot(slot_name)) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active`, c.Slot()).Scan(&n)
		if err != nil {
			return fmt.Errorf("debezium: drop slot %s: %w", c.Slot(), err)
		}
		var left bool
		if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`, c.Slot()).Scan(&left); err != nil {
			return fmt.Errorf("debezium: drop slot %s: %w", c.Slot(), err)
		}
		if !left {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("debezium: slot %s still in use: %w", c.Slot(), ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if _, err := db.Exec(ctx, `DROP PUBLICATION IF EXISTS `+pgx.Identifier{c.Publication()}.Sanitize()); err != nil {
		return fmt.Errorf("debezium: drop publication %s: %w", c.Publication(), err)
	}
	return nil
}
