package scenarios

// validateBackpressure checks the backpressure settings:
// workload.rate_timeline and workload.consumer_batch (issue 25).
func (s Scenario) validateBackpressure(fail func(path, format string, args ...any)) {
	if s.Workload.ConsumerBatch > 0 {
		fail("workload.consumer_batch", "not built yet (issue 25)")
	}
}
