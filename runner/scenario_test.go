package runner

import (
	"fmt"
	"strings"
	"testing"
	"time"

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
