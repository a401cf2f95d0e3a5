package checker

// Retries is how the consumers retried transient failures
// (docs/results.md, "Retries").
type Retries struct{}

// retriesSection fills r.Retries and judges retry-storm.
func (a *analyzer) retriesSection(v *view, r *Result) {}
