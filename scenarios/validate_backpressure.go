package scenarios

import "fmt"

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
