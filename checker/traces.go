package checker

// Traces is how the events' trace context travelled (docs/results.md,
// "Traces").
type Traces struct{}

// tracesSection fills r.Traces.
func (a *analyzer) tracesSection(v *view, r *Result) {}
