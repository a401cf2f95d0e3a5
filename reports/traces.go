package reports

import "github.com/deliverycheck/deliverycheck/checker"

// traceView is the report's row of checker.Traces.
type traceView struct {
	Events, Propagated, Broken, Dropped, Untraced int64
	Examples                                      []string
}

func newTraceView(t *checker.Traces) *traceView {
	if t == nil {
		return nil
	}
	return &traceView{Events: t.Events, Propagated: t.Propagated, Broken: t.Broken, Dropped: t.Dropped, Untraced: t.Untraced, Examples: t.Examples}
}
