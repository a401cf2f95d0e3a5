package runner

import (
	"bytes"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/nemesis"
	"github.com/deliverycheck/deliverycheck/scenarios"
)

func scenarioWith(t *testing.T, workload time.Duration, timeline ...string) scenarios.Scenario {
	t.Helper()
	s := scenarios.Default()
	s.Name, s.Seed, s.Broker.Kind = "console", 1, "kafka"
	s.Workload.Duration = workload
	for _, line := range timeline {
		st, err := nemesis.ParseStep(line)
		if err != nil {
			t.Fatal(err)
		}
		s.Nemesis.Timeline = append(s.Nemesis.Timeline, st)
	}
	return s
}

// TestIssue21ScheduleSeed: a `--seed 1` run of a timeline printed
// "nemesis: seed=0: ..."; a timeline is printed as fixed, and a random
// schedule added to it with the seed it was really drawn from.
func TestIssue21ScheduleSeed(t *testing.T) {
	s := scenarioWith(t, 4*time.Second, "at 3s: kill relay-0")
	spec, err := FromScenario(s)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := spec.Schedule.String(), "fixed: at 3s: kill relay-0"; got != want {
		t.Errorf("timeline: schedule %q, want %q", got, want)
	}

	s.Nemesis.Random = &scenarios.Random{Families: []string{"process"}, Interval: time.Second, SeedOffset: 6}
	spec, err = FromScenario(s)
	if err != nil {
		t.Fatal(err)
	}
	got := spec.Schedule.String()
	if want := fmt.Sprintf("fixed: at 3s: kill relay-0; seed=%d: at 1s: ", s.RandomSeed()); !strings.HasPrefix(got, want) {
		t.Errorf("timeline and random: schedule %q, want it to start %q", got, want)
	}
}

// TestIssue21LongTimelineSaidAtStart: `--duration 4s` silently ran 15s
// because the timeline was longer; the run now says so at its start.
func TestIssue21LongTimelineSaidAtStart(t *testing.T) {
	for _, tc := range []struct {
		name     string
		timeline string
		runs     time.Duration
		want     string
	}{
		{"outlasts", "at 3s: pause relay-0 for 12s", 16 * time.Second,
			"the nemesis schedule ends at 15s, after the workload's 4s: the workload runs 16s, until every fault has healed"},
		{"ends with it", "at 3s: pause relay-0 for 1s", 5 * time.Second,
			"the nemesis schedule ends at 4s, as the workload does: the workload runs 5s, until every fault has healed"},
		{"fits", "at 1s: pause relay-0 for 1s", 4 * time.Second, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := FromScenario(scenarioWith(t, 4*time.Second, tc.timeline))
			if err != nil {
				t.Fatal(err)
			}
			if spec.Duration != tc.runs || spec.WorkloadDuration != 4*time.Second {
				t.Errorf("Duration %s, WorkloadDuration %s; want %s, 4s", spec.Duration, spec.WorkloadDuration, tc.runs)
			}
			var buf bytes.Buffer
			logLength(slog.New(slog.NewTextHandler(&buf, nil)), spec)
			got := buf.String()
			if tc.want == "" {
				if got != "" {
					t.Errorf("logged %q, want nothing", got)
				}
				return
			}
			if !strings.Contains(got, "level=WARN") || !strings.Contains(got, fmt.Sprintf("msg=%q", tc.want)) {
				t.Errorf("logged %q, want a warning %q", got, tc.want)
			}
		})
	}
}

// broker.nodes reaches the cluster as the broker's node count; one node
// asks for nothing replicated.
func TestFromScenarioNodes(t *testing.T) {
	for _, tc := range []struct {
		kind  string
		nodes int
		want  map[string]int
	}{
		{"kafka", 0, nil},
		{"kafka", 1, nil},
		{"kafka", 3, map[string]int{"kafka": 3}},
		{"rabbitmq", 3, map[string]int{"rabbitmq": 3}},
	} {
		s := scenarioWith(t, 4*time.Second)
		s.Broker.Kind, s.Broker.Nodes = tc.kind, tc.nodes
		spec, err := FromScenario(s)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(spec.Nodes, tc.want) || (tc.want == nil) != (spec.Nodes == nil) {
			t.Errorf("%s with nodes %d: Nodes = %v, want %v", tc.kind, tc.nodes, spec.Nodes, tc.want)
		}
	}
}

// postgres.standby reaches the cluster as its standby; none asks for the
// single server.
func TestFromScenarioStandby(t *testing.T) {
	for _, tc := range []struct{ standby, want string }{
		{"", ""},
		{"none", ""},
		{"async", "async"},
		{"sync", "sync"},
	} {
		s := scenarioWith(t, 4*time.Second)
		s.Postgres.Standby = tc.standby
		spec, err := FromScenario(s)
		if err != nil {
			t.Fatal(err)
		}
		if spec.Standby != tc.want {
			t.Errorf("standby %q: Spec.Standby = %q, want %q", tc.standby, spec.Standby, tc.want)
		}
	}
}

// broker.replication_factor, min_insync_replicas and
// unclean_leader_election reach the cluster as stated.
func TestFromScenarioKafkaReplication(t *testing.T) {
	s := scenarioWith(t, 4*time.Second)
	s.Broker.Kind, s.Broker.Nodes = "kafka", 3
	spec, err := FromScenario(s)
	if err != nil {
		t.Fatal(err)
	}
	if spec.KafkaReplication != (cluster.KafkaReplication{}) {
		t.Errorf("defaults: KafkaReplication = %+v, want zero", spec.KafkaReplication)
	}
	s.Broker.ReplicationFactor, s.Broker.MinInsyncReplicas, s.Broker.UncleanLeaderElection = 2, 1, true
	if spec, err = FromScenario(s); err != nil {
		t.Fatal(err)
	}
	if want := (cluster.KafkaReplication{Factor: 2, MinInsync: 1, Unclean: true}); spec.KafkaReplication != want {
		t.Errorf("KafkaReplication = %+v, want %+v", spec.KafkaReplication, want)
	}
}
