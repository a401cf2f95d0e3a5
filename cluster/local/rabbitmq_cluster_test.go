package local

import (
	"slices"
	"strings"
	"testing"
)

// The nodes' configuration: every node lists every peer, and the
// settings the cluster's behaviour depends on are there.
func TestRabbitMQClusterConfig(t *testing.T) {
	conf := rabbitMQClusterConfig([]string{"rabbitmq-0", "rabbitmq-1", "rabbitmq-2"})
	for _, want := range []string{
		"default_user = " + RabbitMQUser + "\n",
		"cluster_partition_handling = autoheal\n",
		"net_ticktime = 10\n",
		"cluster_formation.peer_discovery_backend = classic_config\n",
		"cluster_formation.classic_config.nodes.1 = rabbit@rabbitmq-0\n",
		"cluster_formation.classic_config.nodes.2 = rabbit@rabbitmq-1\n",
		"cluster_formation.classic_config.nodes.3 = rabbit@rabbitmq-2\n",
		"cluster_formation.discovery_retry_limit = 1\n",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("rabbitmq.conf lacks %q:\n%s", want, conf)
		}
	}
	if got, want := rabbitMQClusterAdvanced(5), "[{rabbit, [{quorum_cluster_size, 5}]}].\n"; got != want {
		t.Errorf("advanced.config %q, want %q", got, want)
	}
}

func TestErlBinary(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"dc.q", `<<"dc.q"/utf8>>`},
		{"/", `<<"/"/utf8>>`},
		{`a"b\c`, `<<"a\"b\\c"/utf8>>`},
		{"é\n", `<<"\x{e9}\x{a}"/utf8>>`},
	} {
		if got := erlBinary(tc.in); got != tc.want {
			t.Errorf("erlBinary(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// What erl_call -e prints, as seen from 3.10.8 on OTP 25.
func TestErlCallResult(t *testing.T) {
	for _, tc := range []struct {
		out, want, wantErr string
	}{
		{`{ok, "rabbit@rabbitmq-0,rabbit@rabbitmq-1|"}`, "rabbit@rabbitmq-0,rabbit@rabbitmq-1|", ""},
		{`{ok,"x"}`, "x", ""},
		{`{ok, []}`, "", ""},
		{`{error, "Incomplete form (missing .<cr>)??"}`, "", "Incomplete form"},
		{`{ok, "}`, "", "erl_call"},
		{`{ok, 42}`, "", "erl_call"},
	} {
		got, err := erlCallResult(tc.out)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("erlCallResult(%s) = %q, %v; want an error saying %q", tc.out, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("erlCallResult(%s) = %q, %v; want %q", tc.out, got, err, tc.want)
		}
	}
}

func TestNodeNames(t *testing.T) {
	if got := nodeNames(""); got != nil {
		t.Errorf("nodeNames(\"\") = %v", got)
	}
	if got, want := nodeNames("rabbit@rabbitmq-0,rabbit@rabbitmq-2"), []string{"rabbitmq-0", "rabbitmq-2"}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// Bad options are refused before anything is made.
func TestNewRabbitMQClusterBadOptions(t *testing.T) {
	for _, o := range []RabbitMQClusterOptions{
		{},
		{ReplicatedOptions: ReplicatedOptions{Nodes: []string{"a", "b"}, Advertise: []string{"x", "y"}}},
	} {
		if c, err := NewRabbitMQCluster(o); err == nil {
			c.Close()
			t.Errorf("NewRabbitMQCluster(%+v) succeeded", o)
		}
	}
}
