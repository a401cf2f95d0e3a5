package cluster

import (
	"slices"
	"strings"
	"testing"
)

// A replicated service the cluster cannot run is refused before anything
// starts, saying why.
func TestCheckNodes(t *testing.T) {
	all := Names()
	for _, tc := range []struct {
		name    string
		cfg     Config
		names   []string
		want    []string // node names
		wantErr string
	}{
		{"single nodes", Config{Runtime: Local, Nodes: map[string]int{Kafka: 1}}, all, nil, ""},
		{"unknown service", Config{Runtime: Local, Nodes: map[string]int{"redis": 3}}, all, nil, `unknown service "redis"`},
		{"negative", Config{Runtime: Local, Nodes: map[string]int{Kafka: -1}}, all, nil, "-1 nodes"},
		{"not run", Config{Runtime: Local, Nodes: map[string]int{Kafka: 3}}, []string{Postgres}, nil, "3 nodes of kafka, which the cluster does not run"},
		{"postgres", Config{Runtime: Local, Nodes: map[string]int{Postgres: 2}}, all, nil, "a standby is its own setting"},
		{"standby of no kind", Config{Runtime: Local, Standby: "hot"}, all, nil, `standby "hot" (want async or sync)`},
		{"standby without postgres", Config{Runtime: Local, Standby: StandbySync}, []string{Kafka}, nil, "a sync standby of postgres, which the cluster does not run"},
		{"replication of a single kafka", Config{Runtime: Local, KafkaReplication: KafkaReplication{MinInsync: 1}}, all, nil, "kafka is not replicated"},
		{"standby on containers", Config{Runtime: Containers, Standby: StandbyAsync}, all, nil, "the containers runtime runs a single postgres"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := checkNodes(tc.cfg, tc.names)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("checkNodes = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// "auto" means the local runtime for what the containers runtime cannot
// run; a Kafka cluster it can.
func TestContainersCannot(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, ""},
		{Config{Nodes: map[string]int{Kafka: 3}}, ""},
		{Config{Nodes: map[string]int{RabbitMQ: 1}}, ""},
		{Config{Nodes: map[string]int{RabbitMQ: 3}}, ""},
		{Config{Nodes: map[string]int{Postgres: 2}}, "2 nodes of postgres"},
		{Config{Standby: StandbySync}, "a postgres standby"},
	} {
		got := containersCannot(tc.cfg)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("containersCannot(%+v) = %q, want %q", tc.cfg, got, tc.want)
		}
	}
}
