package scenarios

import (
	"fmt"
	"time"
)

// validateBackpressure checks the backpressure settings:
// workload.rate_timeline and workload.consumer_batch (issue 25). A file's
// steps were parsed already (rateTimeline); these are the rules across
// them, and a Go caller's steps.
func (s Scenario) validateBackpressure(fail func(path, format string, args ...any)) {
	w := s.Workload
	for i, st := range w.RateTimeline {
		p := fmt.Sprintf("workload.rate_timeline[%d]", i)
		switch {
		case st.At < 0 || st.For < 0:
			fail(p, "times must be ≥ 0 in %q", st)
		case !(st.Rate > 0):
			fail(p, "want ops per second > 0 in %q (workload.rate 0 is as fast as possible; a step cannot ask for that)", st)
		case w.Duration > 0 && st.At >= w.Duration:
			fail(p, "%q starts at or after workload.duration (%s): it would never run", st, w.Duration)
		case i > 0 && st.At <= w.RateTimeline[i-1].At:
			fail(p, "%q must start after the step before it (%q): steps are in time order", st, w.RateTimeline[i-1])
		case i > 0 && w.RateTimeline[i-1].For > 0 && st.At < w.RateTimeline[i-1].At+w.RateTimeline[i-1].For:
			fail(p, "%q starts before the step before it (%q) ends: steps must not overlap", st, w.RateTimeline[i-1])
		}
	}
}

// backlogAgeFloor is an age the oldest unapplied event must reach under
// the rate timeline, from the consumers' ceiling, 0 when the workload
// does not bound it: with consumer_work w spent in a transaction of one
// delivery (consumer_batch 1), a subscription's built-in consumers apply
// at most consumers × workers / w events per second. A step that commits
// more for d leaves a backlog of at least the excess × d at its end, and
// the consumers need backlog / ceiling to apply it: whatever the order,
// some event committed by the step's end is still pending that long
// after. A promised max-backlog-age below it cannot be kept
// (bad-backlog-age), which makes the scenario known-bad as a setting.
func (s Scenario) backlogAgeFloor() time.Duration {
	w := s.Workload
	if w.ConsumerWork <= 0 || w.ConsumerBatch != 1 || len(s.System.Consumers) > 0 {
		return 0
	}
	workers := w.ConsumerWorkers
	if workers <= 0 {
		workers = 1
		if s.Broker.Kind == "kafka" {
			workers = int(max(s.Broker.Partitions, 1))
		}
	}
	ceiling := float64(max(w.Consumers, 1)*workers) / w.ConsumerWork.Seconds()
	var worst float64
	for i, st := range w.RateTimeline {
		d := st.For
		if d <= 0 {
			end := w.Duration
			if i+1 < len(w.RateTimeline) {
				end = w.RateTimeline[i+1].At
			}
			d = end - st.At
		}
		if excess := st.Rate*float64(max(w.Producers, 1)) - ceiling; excess > 0 && d > 0 {
			worst = max(worst, excess*d.Seconds()/ceiling)
		}
	}
	return time.Duration(worst * float64(time.Second))
}
