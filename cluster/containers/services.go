package containers

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/modules/rabbitmq"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/deliverycheck/deliverycheck/cluster/probe"
)

// Default images: the official ones. DefaultImage reads the
// DELIVERYCHECK_IMAGE_<SERVICE> environment variables first, so a machine
// with its own images (images/ in this repository) points every run at
// them once.
const (
	PostgresImage = "postgres:17"
	KafkaImage    = "apache/kafka:4.1.1"
	RabbitMQImage = "rabbitmq:4.1-management"
)

// DefaultImage is the image a service runs unless a scenario or flag
// names another: $DELIVERYCHECK_IMAGE_<NAME> if set, else the official one.
func DefaultImage(service string) string {
	if v := os.Getenv("DELIVERYCHECK_IMAGE_" + strings.ToUpper(service)); v != "" {
		return v
	}
	switch service {
	case "postgres":
		return PostgresImage
	case "kafka":
		return KafkaImage
	case "rabbitmq":
		return RabbitMQImage
	}
	return ""
}

// Credentials the containers are created with. They only guard servers
// bound to 127.0.0.1 for the length of a run.
const (
	PostgresPassword = "deliverycheck"
	RabbitMQUser     = "deliverycheck"
	RabbitMQPassword = "deliverycheck"
)

// PostgresService is PostgreSQL in a container.
type PostgresService struct{ *Service }

// NewPostgres creates (not starts) PostgreSQL from image ("" for the
// default). The testcontainers module starts PostgreSQL with fsync=off;
// crash tests need what a committed transaction promises, so the command
// line is replaced with fsync and synchronous_commit on, and the same
// settings as the local runtime (logical WAL for CDC, room for clients,
// commit timestamps).
func (r *Runtime) NewPostgres(image string) (*PostgresService, error) {
	if image == "" {
		image = DefaultImage("postgres")
	}
	p := &PostgresService{}
	s, err := r.newService(spec{
		name: "postgres", image: image, port: "5432/tcp",
		run: func(ctx context.Context, img string, opts ...testcontainers.ContainerCustomizer) (testcontainers.Container, error) {
			opts = append([]testcontainers.ContainerCustomizer{
				postgres.WithUsername("postgres"),
				postgres.WithPassword(PostgresPassword),
				postgres.WithDatabase("postgres"),
				testcontainers.WithCmd("postgres",
					"-c", "fsync=on",
					"-c", "synchronous_commit=on",
					"-c", "full_page_writes=on",
					"-c", "wal_level=logical",
					"-c", "max_wal_senders=10",
					"-c", "max_replication_slots=10",
					"-c", "max_connections=200",
					"-c", "shared_buffers=128MB",
					// Each row's commit time, for judging order by
					// when effects committed (pg_xact_commit_timestamp).
					"-c", "track_commit_timestamp=on"),
			}, opts...)
			c, err := postgres.Run(ctx, img, opts...)
			if c == nil {
				return nil, err
			}
			return c, err
		},
		ready: func(ctx context.Context, ep string) (string, error) {
			return probe.Postgres(ctx, p.DSN(ep))
		},
		stopTimeout:  30 * time.Second,
		startTimeout: 3 * time.Minute,
	})
	if err != nil {
		return nil, err
	}
	p.Service = s
	return p, nil
}

// DSN is the connection string for a client that reaches the server at
// addr (its endpoint, or a proxy in front of it).
func (p *PostgresService) DSN(addr string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword("postgres", PostgresPassword), Host: addr, Path: "/postgres",
		RawQuery: "sslmode=disable&connect_timeout=5"}
	return u.String()
}

// KafkaService is a single-node KRaft Kafka in a container.
type KafkaService struct {
	*Service
	advertise string
}

// kafkaNode is the broker's node id.
const kafkaNode = 1

// NewKafka creates (not starts) Kafka from image ("" for the default),
// advertising advertise to clients ("" for its own endpoint). The
// broker is configured through the official apache/kafka image's
// environment contract (KAFKA_* properties).
//
// testcontainers' kafka module is not used: it rewrites the advertised
// listener to the container's mapped port after start, and here every
// client must be sent to the proxy link in front of the broker instead.
// A second listener (BROKER, inside the container) carries the broker's
// own traffic, so only clients go through the proxy.
func (r *Runtime) NewKafka(image, advertise string) (*KafkaService, error) {
	if image == "" {
		image = DefaultImage("kafka")
	}
	k := &KafkaService{}
	s, err := r.newService(spec{
		name: "kafka", image: image, port: "9092/tcp",
		run: func(ctx context.Context, img string, opts ...testcontainers.ContainerCustomizer) (testcontainers.Container, error) {
			opts = append([]testcontainers.ContainerCustomizer{testcontainers.WithEnv(k.env())}, opts...)
			c, err := testcontainers.Run(ctx, img, opts...)
			if c == nil {
				return nil, err
			}
			return c, err
		},
		ready: func(ctx context.Context, ep string) (string, error) {
			cl, err := kgo.NewClient(kgo.SeedBrokers(ep), kgo.DialTimeout(time.Second))
			if err != nil {
				return "", err
			}
			defer cl.Close()
			if err := probe.Kafka(ctx, cl, kafkaNode); err != nil {
				return "", err
			}
			return kafkaVersion(k.image), nil
		},
		stopTimeout:  30 * time.Second,
		startTimeout: 3 * time.Minute,
	})
	if err != nil {
		return nil, err
	}
	k.Service = s
	k.advertise = advertise
	if k.advertise == "" {
		k.advertise = s.Endpoint()
	}
	return k, nil
}

// Advertised is the address the broker tells clients to use.
func (k *KafkaService) Advertised() string { return k.advertise }

// env is the broker's configuration, mirroring the local runtime's
// server.properties (see cluster/local/kafka.go for why each is set).
func (k *KafkaService) env() map[string]string {
	return map[string]string{
		"KAFKA_NODE_ID":                                          fmt.Sprint(kafkaNode),
		"KAFKA_PROCESS_ROLES":                                    "broker,controller",
		"KAFKA_CONTROLLER_QUORUM_VOTERS":                         fmt.Sprintf("%d@127.0.0.1:9093", kafkaNode),
		"KAFKA_CONTROLLER_LISTENER_NAMES":                        "CONTROLLER",
		"KAFKA_LISTENERS":                                        "PLAINTEXT://0.0.0.0:9092,BROKER://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093",
		"KAFKA_ADVERTISED_LISTENERS":                             "PLAINTEXT://" + k.advertise + ",BROKER://127.0.0.1:9094",
		"KAFKA_LISTENER_SECURITY_PROTOCOL_MAP":                   "PLAINTEXT:PLAINTEXT,BROKER:PLAINTEXT,CONTROLLER:PLAINTEXT",
		"KAFKA_INTER_BROKER_LISTENER_NAME":                       "BROKER",
		"KAFKA_LOG_DIRS":                                         "/var/lib/kafka/data",
		"KAFKA_NUM_PARTITIONS":                                   "3",
		"KAFKA_DEFAULT_REPLICATION_FACTOR":                       "1",
		"KAFKA_MIN_INSYNC_REPLICAS":                              "1",
		"KAFKA_AUTO_CREATE_TOPICS_ENABLE":                        "true",
		"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR":                 "1",
		"KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS":                     "5",
		"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR":         "1",
		"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR":                    "1",
		"KAFKA_TRANSACTION_STATE_LOG_NUM_PARTITIONS":             "5",
		"KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "1",
		"KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR":            "1",
		"KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS":                 "0",
		"KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS":                     "1000",
		"KAFKA_BROKER_SESSION_TIMEOUT_MS":                        "2000",
		"KAFKA_BROKER_HEARTBEAT_INTERVAL_MS":                     "500",
		"KAFKA_HEAP_OPTS":                                        "-Xmx512m -Xms512m",
	}
}

// kafkaVersion names the broker from its image tag ("apache/kafka:4.1.1"
// → "Apache Kafka 4.1.1"): Kafka's protocol does not carry the server's
// release version.
func kafkaVersion(image string) string {
	tag := "unknown"
	if i := strings.LastIndexByte(image, ':'); i >= 0 && !strings.Contains(image[i:], "/") {
		tag = image[i+1:]
	}
	return "Apache Kafka " + tag
}

// RabbitMQService is RabbitMQ in a container.
type RabbitMQService struct{ *Service }

// NewRabbitMQ creates (not starts) RabbitMQ from image ("" for the
// default). The container's hostname, and so the node name and its data
// directory, stay the same across restarts of the container.
func (r *Runtime) NewRabbitMQ(image string) (*RabbitMQService, error) {
	if image == "" {
		image = DefaultImage("rabbitmq")
	}
	q := &RabbitMQService{}
	s, err := r.newService(spec{
		name: "rabbitmq", image: image, port: "5672/tcp",
		run: func(ctx context.Context, img string, opts ...testcontainers.ContainerCustomizer) (testcontainers.Container, error) {
			opts = append([]testcontainers.ContainerCustomizer{
				rabbitmq.WithAdminUsername(RabbitMQUser),
				rabbitmq.WithAdminPassword(RabbitMQPassword),
			}, opts...)
			c, err := rabbitmq.Run(ctx, img, opts...)
			if c == nil {
				return nil, err
			}
			return c, err
		},
		ready: func(ctx context.Context, ep string) (string, error) {
			return probe.RabbitMQ(ctx, q.URL(ep))
		},
		stopTimeout:  30 * time.Second,
		startTimeout: 3 * time.Minute,
	})
	if err != nil {
		return nil, err
	}
	q.Service = s
	return q, nil
}

// URL is the AMQP URL for a client that reaches the broker at addr.
func (q *RabbitMQService) URL(addr string) string {
	u := url.URL{Scheme: "amqp", User: url.UserPassword(RabbitMQUser, RabbitMQPassword), Host: addr}
	return u.String()
}

// WaitQuorumQueueDurable waits until the node has saved the Raft
// registration of quorum queue name (see the local runtime's method of
// the same name for the RabbitMQ 3.10 bug this guards against). It reads
// the registration table inside the container; an image whose RabbitMQ
// keeps no such table (4.x stores it elsewhere) is waited on for one
// save period instead.
func (q *RabbitMQService) WaitQuorumQueueDurable(ctx context.Context, vhost, name string) error {
	ra := vhost + "_" + name
	if vhost == "/" {
		ra = "%2F_" + name
	}
	id, err := q.containerID()
	if err != nil {
		return err
	}
	script := `f=$(find /var/lib/rabbitmq -path '*quorum*' -name names.dets 2>/dev/null | head -n1); [ -z "$f" ] && exit 2; grep -qF "$1" "$f"`
	for {
		code, err := q.exec(ctx, id, []string{"sh", "-c", script, "sh", ra})
		switch {
		case err != nil:
			return fmt.Errorf("rabbitmq: wait for quorum queue %s: %w", ra, err)
		case code == 0:
			return nil
		case code == 2:
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rabbitmq: quorum queue %s not saved: %w", ra, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
