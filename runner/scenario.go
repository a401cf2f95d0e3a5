package runner

import (
	"fmt"
	"github.com/deliverycheck/deliverycheck/checker"
	"log/slog"
	"strings"
	"time"

	"github.com/deliverycheck/deliverycheck/cluster"
	"github.com/deliverycheck/deliverycheck/nemesis"
	"github.com/deliverycheck/deliverycheck/pipeline"
	"github.com/deliverycheck/deliverycheck/pipeline/debezium"
	"github.com/deliverycheck/deliverycheck/pipeline/relay"
	"github.com/deliverycheck/deliverycheck/reports"
	"github.com/deliverycheck/deliverycheck/scenarios"
	"github.com/deliverycheck/deliverycheck/verdict"
)

// FromScenario resolves a scenario into a Spec: its pipeline, its fixed
// timeline and (if it has one) its seeded random schedule over the same
// duration, its guarantees and its seed. Set the scenario's Seed first;
// the same seed always gives the same schedule.
func FromScenario(s scenarios.Scenario) (Spec, error) {
	cfg := s.PipelineConfig()
	steps := append([]nemesis.Step(nil), s.Nemesis.Timeline...)
	sched := nemesis.Fixed(steps...)
	if r := s.Nemesis.Random; r != nil {
		workers, err := pipeline.WorkerNames(cfg)
		if err != nil {
			return Spec{}, err
		}
		targets := nemesis.DefaultTargets(workers).WithNodes("broker", s.Broker.Nodes)
		if s.StandbyKind() != "" {
			targets = targets.WithStandby()
		}
		// A team's component has only the failpoints it declares.
		for w, names := range s.TeamFailpoints() {
			delete(targets.Failpoints, w)
			for _, n := range names {
				targets.Failpoints[w] = append(targets.Failpoints[w], n+"=kill(1)")
			}
		}
		targets = targets.Only(r.Targets...)
		random := nemesis.Random(int64(s.RandomSeed()), r.Families, r.Interval, s.Workload.Duration, targets)
		sched = nemesis.Fixed(append(steps, random.Steps...)...)
		sched.Seed, sched.Random = random.Seed, true
	}
	workload := s.Workload.Duration
	if workload <= 0 {
		workload = scenarios.DefaultDuration
	}
	d := runLength(workload, sched)
	if s.Seed == 0 {
		return Spec{}, fmt.Errorf("runner: scenario %s has no seed", s.Name)
	}
	return Spec{
		External:         external(s, cfg),
		Name:             s.Name,
		Description:      s.Description,
		Pipeline:         cfg,
		Images:           s.Images.Map(),
		Nodes:            nodes(s),
		Standby:          s.StandbyKind(),
		KafkaReplication: kafkaReplication(s),
		Schedule:         sched,
		Duration:         d,
		WorkloadDuration: workload,
		Guarantees:       s.CheckGuarantees(),
		Seed:             int64(s.Seed),
		Expect:           expectation(s),
		LagAlert:         lagAlert(s),
	}, nil
}

// lagAlert is the checker's view of the scenario's lag alert, nil for none.
func lagAlert(s scenarios.Scenario) *checker.LagAlert {
	a := s.Observability.LagAlert
	if a == nil {
		return nil
	}
	return &checker.LagAlert{Threshold: a.Threshold, For: a.For}
}

// nodes is the node count of the scenario's replicated servers, or nil.
func nodes(s scenarios.Scenario) map[string]int {
	if s.Broker.Nodes <= 1 {
		return nil
	}
	return map[string]int{s.Broker.Kind: s.Broker.Nodes}
}

// kafkaReplication is the replicated Kafka's settings the scenario asks
// for (validation has refused them anywhere else).
func kafkaReplication(s scenarios.Scenario) cluster.KafkaReplication {
	b := s.Broker
	return cluster.KafkaReplication{Factor: b.ReplicationFactor, MinInsync: b.MinInsyncReplicas, Unclean: b.UncleanLeaderElection}
}

// runLength is how long the workload runs: its own duration, or, when the
// schedule ends at or after it, until a second after the schedule's last
// fault heals, so every fault is healed before the drain.
func runLength(workload time.Duration, sched nemesis.Schedule) time.Duration {
	if end := sched.End(); end >= workload {
		return end + time.Second
	}
	return workload
}

// logLength says, at the start of a run, when the schedule made the
// workload run longer than its own duration (the scenario's, or
// --duration): nothing else would tell a `--duration 4s` run why it
// lasted 16s.
func logLength(log *slog.Logger, spec Spec) {
	if spec.WorkloadDuration <= 0 || spec.Duration <= spec.WorkloadDuration {
		return
	}
	end := spec.Schedule.End()
	when := fmt.Sprintf("after the workload's %s", spec.WorkloadDuration)
	if end == spec.WorkloadDuration {
		when = "as the workload does"
	}
	log.Warn(fmt.Sprintf("the nemesis schedule ends at %s, %s: the workload runs %s, until every fault has healed", end, when, spec.Duration),
		"schedule_end", end, "workload", spec.WorkloadDuration, "runs", spec.Duration)
}

// expectation is s's expectation; one that states nothing expects a
// valid run, as a team's own scenario does of its pipeline.
func expectation(s scenarios.Scenario) *verdict.Expectation {
	e := s.Expect
	e.Verdict = e.Want()
	return &e
}

// external lists what in s is not deliverycheck's own code.
func external(s scenarios.Scenario, cfg pipeline.Config) []reports.External {
	workers, err := pipeline.WorkerNames(cfg)
	if err != nil {
		return nil
	}
	team := s.TeamFailpoints()
	var out []reports.External
	add := func(prefix, command string, failpoints []string) {
		e := reports.External{Command: command, Failpoints: failpoints}
		for _, w := range workers {
			if strings.HasPrefix(w, prefix) {
				e.Workers = append(e.Workers, w)
			}
		}
		out = append(out, e)
	}
	if cfg.RelayVariant == relay.Debezium {
		add("relay-", "Kafka Connect "+debezium.ConnectVersion+" standalone, Debezium "+debezium.Version+" PostgreSQL connector with the outbox event router", nil)
	}
	if c := cfg.System.Relay; c != nil {
		add("relay-", strings.Join(c.Command, " "), team["relay-0"])
	}
	for _, sub := range cfg.Subscriptions {
		if c, ok := cfg.System.Consumers[sub]; ok {
			add("consumer-"+sub+"-", strings.Join(c.Command, " "), team["consumer-"+sub+"-0"])
		}
	}
	if c := cfg.System.Processor; c != nil {
		add("processor-", strings.Join(c.Command, " "), team["processor-0"])
	}
	return out
}
