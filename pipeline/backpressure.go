package pipeline

import (
	"slices"
	"time"

	"github.com/deliverycheck/deliverycheck/pipeline/producer"
)

// loadSteps are Config.RateSteps, timed from the workload's start, moved
// onto the run's clock (ns since r.base) as the producers start: the
// workload starts with them, and the nemesis schedule, timed from the
// workload's start too, right after Start returns.
func (r *Deployment) loadSteps() []producer.RateStep {
	if len(r.cfg.RateSteps) == 0 {
		return nil
	}
	shift := time.Since(r.base).Nanoseconds()
	out := slices.Clone(r.cfg.RateSteps)
	for i := range out {
		out[i].AtNS += shift
	}
	return out
}

// RateSteps are the rate timeline each producer follows, on the run's
// clock (the history's), for the report; nil without one.
func (r *Deployment) RateSteps() []producer.RateStep { return slices.Clone(r.load) }
