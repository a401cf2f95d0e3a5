package debezium

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCommand(t *testing.T) {
	dir := t.TempDir()
	c := Config{Dir: dir, PostgresDSN: "postgres://app:s3cr=t@127.0.0.1:5433/run1?sslmode=disable",
		Bootstrap: "127.0.0.1:9093", Topic: "run1.events", Name: "dc_run1", FlushInterval: 5 * time.Second}
	argv, err := c.Command("/jars")
	if err != nil {
		t.Fatal(err)
	}
	if argv[0] != "java" || argv[len(argv)-3] != "org.apache.kafka.connect.cli.ConnectStandalone" {
		t.Fatalf("argv = %q", argv)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	worker, conn := read("worker.properties"), read("connector.properties")
	for _, want := range []string{
		"bootstrap.servers=127.0.0.1:9093\n",
		"offset.flush.interval.ms=5000\n",
		"offset.storage.file.filename=" + filepath.Join(dir, "offsets") + "\n",
	} {
		if !strings.Contains(worker, want) {
			t.Errorf("worker.properties lacks %q:\n%s", want, worker)
		}
	}
	for _, want := range []string{
		"database.port=5433\n", "database.user=app\n", "database.password=s3cr=t\n", "database.dbname=run1\n",
		"slot.name=dc_run1_outbox\n", "table.include.list=public.outbox\n",
		"transforms.outbox.route.topic.replacement=run1.events\n",
		// The headers the built-in consumers read.
		"transforms.outbox.table.fields.additional.placement=id:header:event-id,source:header:source,version:header:version,type:header:type,aggregateid:header:aggregate-id\n",
	} {
		if !strings.Contains(conn, want) {
			t.Errorf("connector.properties lacks %q:\n%s", want, conn)
		}
	}
	for _, bad := range []string{"Run-1", "", "a;b"} {
		c.Name = bad
		if _, err := c.Command("/jars"); err == nil {
			t.Errorf("name %q accepted", bad)
		}
	}
}

func TestEscapeProp(t *testing.T) {
	for in, want := range map[string]string{`a\b`: `a\\b`, "x\ny": `x\ny`, " lead": `\ lead`, "plain": "plain"} {
		if got := escapeProp(in); got != want {
			t.Errorf("escapeProp(%q) = %q, want %q", in, got, want)
		}
	}
}
