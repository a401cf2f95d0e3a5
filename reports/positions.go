package reports

import (
	"strings"

	"github.com/deliverycheck/deliverycheck/checker"
)

// positionRow is one subscription's positions in the report
// (docs/results.md, Positions). Class is bad when a consumer skipped or
// went back.
type positionRow struct {
	Subscription, Joined, Unjudged, Without, Class string
	Sessions, Deliveries, PollSkip, Nonmonotonic   int64
	Judged                                         bool
}

// newPositionRows lays out how each subscription's Kafka consumers'
// polls were judged, with when each subscription's first delivery came.
func newPositionRows(res *checker.Result) []positionRow {
	joined := map[string]int64{}
	for _, s := range res.Subscriptions {
		joined[s.Name] = s.JoinedNS
	}
	var out []positionRow
	for _, p := range res.Positions {
		row := positionRow{
			Subscription: p.Subscription, Judged: p.Judged, Without: strings.Join(p.ProcessesWithoutAssign, ", "),
			Sessions: p.Sessions, Deliveries: p.Deliveries, PollSkip: p.PollSkip, Nonmonotonic: p.NonmonotonicPoll,
		}
		if ns := joined[p.Subscription]; ns > 0 {
			row.Joined = fmtNs(ns)
		}
		switch {
		case p.Sessions == 0:
			row.Unjudged = "not judged: its consumers record no assign op"
		case res.Facts.BrokerRead != "complete":
			row.Unjudged = "not judged: the broker's log was not read whole (" + res.Facts.BrokerRead + ")"
		}
		if p.PollSkip+p.NonmonotonicPoll > 0 {
			row.Class = "bad"
		}
		out = append(out, row)
	}
	return out
}
