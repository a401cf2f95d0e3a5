package scenarios

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/deliverycheck/deliverycheck/checker"
)

// The example's scenarios are real files a team would write: they must
// load, and resolve the command's directory against the file's.
func TestExampleScenariosLoad(t *testing.T) {
	for _, f := range []string{"scenario.yaml", "scenario-buggy.yaml"} {
		path := filepath.Join("..", "examples", "consumer", f)
		s, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		cfg := s.PipelineConfig()
		c, ok := cfg.System.Consumers["inventory"]
		if !ok || len(cfg.System.Transaction) != 2 || cfg.System.EffectsQuery == "" {
			t.Fatalf("%s: system = %+v", f, cfg.System)
		}
		want, _ := filepath.Abs(filepath.Join("..", "examples", "consumer"))
		if c.Dir != want {
			t.Errorf("%s: dir = %q, want %q", f, c.Dir, want)
		}
		if got := cfg.System.Transaction[1].Args; !slices.Equal(got, []string{"event_id", "aggregate_id", "type", "payload", "source", "version"}) {
			t.Errorf("%s: args = %q", f, got)
		}
		if fps := s.TeamFailpoints()["consumer-inventory-0"]; len(fps) != 2 {
			t.Errorf("%s: team failpoints = %q", f, fps)
		}
	}
	bad, err := Load(filepath.Join("..", "examples", "consumer", "scenario-buggy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if bad.Expect.Verdict != checker.Invalid || bad.Expect.Anomaly != checker.DuplicateEffect {
		t.Errorf("buggy expect = %+v", bad.Expect)
	}
}

func TestSystemErrors(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{
			name: "external consumer without effects query",
			yaml: "broker: kafka\nsystem:\n  consumer:\n    command: [./c]\n",
			want: []string{"my.yaml:3: system.effects_query: missing"},
		},
		{
			name: "unknown placeholder, on its item's line",
			yaml: "broker: kafka\nsystem:\n  transaction:\n    - INSERT INTO t VALUES (:event_id)\n    - INSERT INTO t VALUES (:evnt)\n",
			want: []string{"my.yaml:5: system.transaction[1]: unknown placeholder :evnt"},
		},
		{
			name: "consumer of an unknown subscription",
			yaml: "broker: kafka\nsystem:\n  consumers:\n    billing:\n      command: [./c]\n  effects_query: SELECT 1\n",
			want: []string{"system.consumers.billing: \"billing\" is not a workload subscription"},
		},
		{
			name: "command missing",
			yaml: "broker: kafka\nsystem:\n  relay:\n    dir: x\n",
			want: []string{"system.relay.command: missing"},
		},
		{
			name: "unknown key under a command",
			yaml: "broker: kafka\nsystem:\n  relay:\n    comand: [x]\n",
			want: []string{"my.yaml:4: system.relay.comand: unknown field; did you mean command?"},
		},
		{
			name: "team failpoint not declared",
			yaml: "broker: kafka\nworkload: {subscriptions: [inv]}\nsystem:\n  consumer:\n    command: [./c]\n    failpoints: [after-commit]\n  effects_query: SELECT 1\nnemesis:\n  failpoints:\n    consumer-inv-0: after-comit=kill(1)\n",
			want: []string{"nemesis.failpoints.consumer-inv-0: consumer-inv-0 declares no failpoint \"after-comit\"; did you mean after-commit?"},
		},
		{
			name: "built-in failpoint name on a built-in worker still checked",
			yaml: "broker: kafka\nnemesis:\n  failpoints:\n    relay-0: after-commit=kill(1)\n",
			want: []string{"nemesis.failpoints.relay-0: unknown failpoint \"after-commit\""},
		},
		{
			name: "inbox query without team consumers",
			yaml: "broker: kafka\nsystem:\n  inbox_query: SELECT 1\n",
			want: []string{"my.yaml", "system.inbox_query: only with external consumers"},
		},
		{
			name: "pending query without a team relay",
			yaml: "broker: kafka\nsystem:\n  pending_query: SELECT 0\n",
			want: []string{"system.pending_query: only with an external relay"},
		},
		{
			name: "destination placeholder of the other broker, on its item's line",
			yaml: "broker: kafka\nsystem:\n  transaction:\n    - INSERT INTO t VALUES (:topic)\n    - INSERT INTO t VALUES (:exchange)\n",
			want: []string{"my.yaml:5: system.transaction[1]: :exchange only exists on rabbitmq runs, and this run's broker is kafka: use :topic"},
		},
		{
			name: "poison events need a dead-letters query",
			yaml: "broker: kafka\nworkload: {poison_ratio: 0.1}\nsystem:\n  consumer:\n    command: [./c]\n  effects_query: SELECT 1\n",
			want: []string{"system.dead_letters_query: missing"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("my.yaml", []byte(tt.yaml))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%v\nwant it to contain\n%s", err, w)
				}
			}
		})
	}
}

// The pipeline learns where each part of system: was written, so the
// mistakes only the database finds name their line like the decoder's;
// what --set replaced is named as --set.
func TestSystemWhere(t *testing.T) {
	yaml := `broker: kafka
system:
  setup: |
    CREATE TABLE t (id text);
  transaction:
    - INSERT INTO t VALUES (:event_id)
    - >-
      INSERT INTO t
      VALUES (:aggregate_id)
  pending_query: SELECT 0
  relay:
    command: [./r]
`
	s, err := Parse("shop.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"system.setup": "shop.yaml:3", "system.transaction": "shop.yaml:6",
		"system.transaction[0]": "shop.yaml:6", "system.transaction[1]": "shop.yaml:7",
		"system.pending_query": "shop.yaml:10", "system.relay": "shop.yaml:12", "system.relay.command": "shop.yaml:12",
		"system.relay.command[0]": "shop.yaml:12",
	}
	if got := s.PipelineConfig().System.Where; !maps.Equal(got, want) {
		t.Errorf("Where = %v\nwant    %v", got, want)
	}
	if err := s.Set("system.transaction", "INSERT INTO t VALUES (:version)"); err != nil {
		t.Fatal(err)
	}
	got := s.PipelineConfig().System.Where
	if got["system.transaction"] != "--set" || got["system.transaction[0]"] != "--set" || got["system.setup"] != "shop.yaml:3" {
		t.Errorf("after --set: Where = %v", got)
	}
	if _, ok := got["system.transaction[1]"]; ok {
		t.Errorf("after --set: the file's second statement is still placed: %v", got)
	}
	// A broker changed by --set checks the file's statements again.
	s, err = Parse("shop.yaml", []byte("broker: kafka\nsystem:\n  transaction: [\"INSERT INTO t VALUES (:topic)\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Set("broker", "rabbitmq"); err == nil || !strings.Contains(err.Error(), "shop.yaml:3: system.transaction[0]: :topic only exists on kafka runs, and this run's broker is rabbitmq: use :exchange") {
		t.Errorf("--set broker=rabbitmq: %v", err)
	}
}

// --set reaches every part of system:, e.g. to run another build.
func TestSetSystem(t *testing.T) {
	s, err := Load(filepath.Join("..", "examples", "consumer", "scenario.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range [][2]string{
		{"system.consumer.command", "./bin/consumer-buggy"},
		{"system.consumer.env.LOG_LEVEL", "debug"},
		{"system.consumers.inventory", "{command: [./bin/other], failpoints: [after-commit-before-ack, after-effect-before-commit, before-fetch]}"},
		{"system.effects_query", "SELECT event_id, consumer FROM moves"},
	} {
		if err := s.Set(kv[0], kv[1]); err != nil {
			t.Fatalf("--set %s=%s: %v", kv[0], kv[1], err)
		}
	}
	if got := s.System.Consumer.Command; !slices.Equal(got, []string{"./bin/consumer-buggy"}) {
		t.Errorf("consumer command = %q", got)
	}
	if s.System.Consumer.Env["LOG_LEVEL"] != "debug" {
		t.Errorf("consumer env = %v", s.System.Consumer.Env)
	}
	if c := s.System.Consumers["inventory"]; c == nil || c.Command[0] != "./bin/other" {
		t.Errorf("consumers.inventory = %+v", c)
	}
	// The per-subscription command wins, and its failpoints are what the
	// random schedule may arm.
	if fps := s.TeamFailpoints()["consumer-inventory-0"]; len(fps) != 3 || fps[2] != "before-fetch" {
		t.Errorf("team failpoints = %q", fps)
	}
	err = s.Set("system.consumers.billing", "{command: [./x]}")
	if err == nil || !strings.Contains(err.Error(), `"billing" is not a workload subscription`) {
		t.Errorf("unknown subscription: %v", err)
	}
	if !slices.Contains(Paths(), "system.consumers.<subscription>") || !slices.Contains(Paths(), "system.relay.env.<name>") {
		t.Errorf("Paths() = %q", Paths())
	}
}
