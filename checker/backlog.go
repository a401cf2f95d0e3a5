package checker

// SubscriptionBacklog is one subscription's backlog over the run
// (docs/results.md, "Backlog").
type SubscriptionBacklog struct {
	Subscription string `json:"subscription"`
}

// ConsumerBacklog is the most deliveries one consumer process held at
// once.
type ConsumerBacklog struct {
	Process string `json:"process"`
}

// backlogSection fills r.Backlog and r.BacklogConsumers and judges
// backlog-age.
func (a *analyzer) backlogSection(v *view, r *Result, faults []Fault, drainEnd int64) {}
