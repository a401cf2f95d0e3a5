package checker

// SubscriptionRedrive is what the dead-letter redrive of one subscription
// did (docs/results.md, "Dead-letter redrive").
type SubscriptionRedrive struct {
	Subscription string `json:"subscription"`
}

// redriveSection fills r.Redrive from the redrive ops.
func (a *analyzer) redriveSection(v *view, r *Result, f facts) {}
