package local

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Check is one thing the local runtime needs, as `deliverycheck doctor`
// shows it.
type Check struct {
	Name    string // e.g. "postgresql"
	OK      bool
	Version string // exact version when found
	Detail  string // where it was found, or why not
	Install string // the one command that installs it when missing
}

const installDeps = "make deps   (or: apt-get install -y postgresql rabbitmq-server default-jre-headless maven && deliverycheck deps)"

// Doctor inspects this machine for everything the local runtime needs to
// run PostgreSQL, Kafka and RabbitMQ. It starts nothing and fetches nothing.
func Doctor(ctx context.Context, kafkaVersion string) []Check {
	var out []Check

	pg := Check{Name: "postgresql", Install: "apt-get install -y postgresql"}
	if dir, err := PostgresBinDir(""); err != nil {
		pg.Detail = err.Error()
	} else {
		pg.OK, pg.Detail = true, dir
		pg.Version = firstLine(run(ctx, filepath.Join(dir, "postgres"), "--version"))
	}
	out = append(out, pg)

	rmq := Check{Name: "rabbitmq", Install: "apt-get install -y rabbitmq-server"}
	if _, err := os.Stat("/usr/lib/rabbitmq/bin/rabbitmq-server"); err != nil {
		rmq.Detail = "rabbitmq-server not installed"
	} else {
		rmq.OK, rmq.Detail = true, "/usr/lib/rabbitmq/bin/rabbitmq-server"
		if v := run(ctx, "dpkg-query", "-W", "-f=${Version}", "rabbitmq-server"); v != "" {
			rmq.Version = "RabbitMQ " + v
		}
	}
	out = append(out, rmq)

	java := Check{Name: "java", Install: "apt-get install -y default-jre-headless"}
	if p, err := exec.LookPath("java"); err != nil {
		java.Detail = "java not on PATH (the Kafka broker is a JVM program)"
	} else {
		java.OK, java.Detail = true, p
		java.Version = firstLine(run(ctx, p, "-version"))
	}
	out = append(out, java)

	kafka := Check{Name: "kafka", Install: "deliverycheck deps   (fetches the broker jars from Maven Central; needs maven)"}
	if dir, ok := KafkaJarsStatus(kafkaVersion); ok {
		kafka.OK, kafka.Detail = true, dir
		v, err := kafkaJarVersion(dir)
		if err != nil {
			v = kafkaVersion
		}
		kafka.Version = "Apache Kafka " + v
	} else {
		kafka.Detail = fmt.Sprintf("no Kafka jars (KAFKA_HOME unset, nothing cached at %s)", dir)
		if _, err := exec.LookPath("mvn"); err != nil {
			kafka.Install = installDeps
		}
	}
	out = append(out, kafka)
	return out
}

func run(ctx context.Context, name string, args ...string) string {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
