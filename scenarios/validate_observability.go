package scenarios

// validateObservability checks the observability section (issue 25).
func (s Scenario) validateObservability(fail func(path, format string, args ...any)) {
	if s.Observability.LagAlert != nil {
		fail("observability.lag_alert", "not built yet (issue 25)")
	}
	if t := s.Observability.Traces; t != "" && t != "propagate" && t != "per-attempt" {
		fail("observability.traces", "%s", unknownName("trace mode", t, TraceModes()))
	}
}
