package runner

import (
	"fmt"
	"time"

	"github.com/deliverycheck/deliverycheck/nemesis"
	"github.com/deliverycheck/deliverycheck/scenarios"
	"github.com/deliverycheck/deliverycheck/workloads/pipeline"
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
		targets := nemesis.DefaultTargets(workers)
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
		sched.Seed = random.Seed
	}
	d := s.Workload.Duration
	if d <= 0 {
		d = scenarios.DefaultDuration
	}
	if end := sched.End(); end >= d {
		// Every fault is healed before the drain; let the workload run
		// until the last one is over.
		d = end + time.Second
	}
	if s.Seed == 0 {
		return Spec{}, fmt.Errorf("runner: scenario %s has no seed", s.Name)
	}
	return Spec{
		Name:        s.Name,
		Description: s.Description,
		Pipeline:    cfg,
		Images:      s.Images.Map(),
		Schedule:    sched,
		Duration:    d,
		Guarantees:  s.CheckGuarantees(),
		Seed:        int64(s.Seed),
	}, nil
}
