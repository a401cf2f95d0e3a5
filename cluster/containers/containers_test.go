package containers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDetectWithoutEngineFailsCleanly(t *testing.T) {
	// testcontainers panics when it finds no engine; Detect must say so
	// with an error naming where it looked.
	sock := filepath.Join(t.TempDir(), "nothing.sock")
	t.Setenv("DOCKER_HOST", "unix://"+sock)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := Detect(ctx)
	if !errors.Is(err, ErrNoEngine) {
		t.Fatalf("Detect: %v, want ErrNoEngine", err)
	}
	if !strings.Contains(err.Error(), sock) || !strings.Contains(err.Error(), "DOCKER_HOST") {
		t.Errorf("error %q does not say where it looked", err)
	}
}

func TestDetectDeadTCPEngine(t *testing.T) {
	t.Setenv("DOCKER_HOST", "tcp://127.0.0.1:1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := Detect(ctx); !errors.Is(err, ErrNoEngine) {
		t.Fatalf("Detect: %v, want ErrNoEngine", err)
	}
}

func TestDefaultImage(t *testing.T) {
	for _, tc := range []struct{ service, env, want string }{
		{"postgres", "", PostgresImage},
		{"kafka", "", KafkaImage},
		{"rabbitmq", "", RabbitMQImage},
		{"postgres", "localhost/pg:15", "localhost/pg:15"},
		{"rabbitmq", "my/rabbit:3.13", "my/rabbit:3.13"},
	} {
		t.Run(tc.service+"/"+tc.env, func(t *testing.T) {
			t.Setenv("DELIVERYCHECK_IMAGE_"+strings.ToUpper(tc.service), tc.env)
			if got := DefaultImage(tc.service); got != tc.want {
				t.Errorf("DefaultImage(%s) = %q, want %q", tc.service, got, tc.want)
			}
		})
	}
}

func TestKafkaVersion(t *testing.T) {
	for image, want := range map[string]string{
		"apache/kafka:4.1.1":                  "Apache Kafka 4.1.1",
		"localhost/deliverycheck/kafka:4.1.1": "Apache Kafka 4.1.1",
		"registry.local:5000/kafka":           "Apache Kafka unknown",
		"apache/kafka":                        "Apache Kafka unknown",
	} {
		if got := kafkaVersion(image); got != want {
			t.Errorf("kafkaVersion(%q) = %q, want %q", image, got, want)
		}
	}
}

func TestOwnerGone(t *testing.T) {
	host, _ := os.Hostname()
	me := owner(os.Getpid())
	if ownerGone(me) {
		t.Errorf("ownerGone(%q) for this very process", me)
	}
	// A pid that is alive but started at another time is someone else:
	// the owner that label named is gone.
	parts := strings.Split(me, "/")
	if reused := fmt.Sprintf("%s/%s/1", host, parts[1]); !ownerGone(reused) {
		t.Errorf("ownerGone(%q) = false for a reused pid", reused)
	}
	if dead := fmt.Sprintf("%s/%d/1", host, 1<<22+7); !ownerGone(dead) {
		t.Errorf("ownerGone(%q) = false for a pid that cannot exist", dead)
	}
	// Another machine's containers, or a label we cannot read, are left
	// alone.
	for _, l := range []string{"other-host/1/1", "garbage", host + "/x/1", ""} {
		if ownerGone(l) {
			t.Errorf("ownerGone(%q) = true, want false", l)
		}
	}
}
