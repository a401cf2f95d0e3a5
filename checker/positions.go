package checker

import "github.com/deliverycheck/deliverycheck/history"

// SubscriptionPositions is how one subscription's Kafka consumers' positions
// were judged (docs/results.md, "Positions").
type SubscriptionPositions struct {
	Subscription string `json:"subscription"`
}

// positionsAcc keeps the assign ops, on shard 0.
type positionsAcc struct{}

func (p *positionsAcc) op(op *history.Op) {}

// positionsSection fills r.Positions and judges poll-skip and
// nonmonotonic-poll.
func (a *analyzer) positionsSection(v *view, r *Result, f facts) {}
