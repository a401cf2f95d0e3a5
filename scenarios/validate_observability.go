package scenarios

// validateObservability checks the observability section (issue 25):
// a lag alert that could fire within the run, and a known trace mode.
func (s Scenario) validateObservability(fail func(path, format string, args ...any)) {
	if a := s.Observability.LagAlert; a != nil {
		// The lag is sampled until the drain ends: an alert that needs
		// longer can never fire, and would read as "the lag was fine".
		if longest := s.Workload.Duration + s.Drain.Timeout; a.For >= longest {
			fail("observability.lag_alert.for", "%s is at least the whole run (workload.duration %s + drain.timeout %s): the alert could never fire", a.For, s.Workload.Duration, s.Drain.Timeout)
		}
	}
	if t := s.Observability.Traces; t != "" && t != "propagate" && t != "per-attempt" {
		fail("observability.traces", "%s", unknownName("trace mode", t, TraceModes()))
	}
}
