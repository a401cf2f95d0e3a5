package reports

import (
	"strconv"

	"github.com/deliverycheck/deliverycheck/checker"
)

// redriveRow is one subscription's dead-letter redrive in the report
// (checker/redrive.go): its limit against its busiest second, the
// canary's outcome, and what became of what it redrove. Class is bad
// when it left something unrecovered or purged, or went over its rate.
type redriveRow struct {
	Subscription, Limit, Canary, Class                     string
	MaxRate, Redriven, Redrives                            int64
	Recovered, Superseded, AlreadyApplied                  int64
	ReFailed, Rejected, Pending, Unrecovered, Purged, Kept int64
	OverRate                                               bool
}

// newRedriveRows lays out each redriven subscription.
func newRedriveRows(res *checker.Result) []redriveRow {
	var out []redriveRow
	for _, rd := range res.Redrive {
		row := redriveRow{Subscription: rd.Subscription, Limit: "none", MaxRate: rd.MaxRate, Redriven: rd.Redriven, Redrives: rd.Redrives,
			Recovered: rd.Recovered, Superseded: rd.Superseded, AlreadyApplied: rd.AlreadyApplied, ReFailed: rd.ReFailed,
			Rejected: rd.Rejected, Pending: rd.Pending, Unrecovered: rd.Unrecovered, Purged: rd.Purged, Kept: rd.Kept,
			OverRate: rd.Rate > 0 && rd.MaxRate > rd.Rate+1}
		if rd.Rate > 0 {
			row.Limit = strconv.FormatInt(rd.Rate, 10) + "/s"
		}
		if rd.Canary != "" {
			row.Canary = rd.Canary + ": " + rd.CanaryOutcome
		}
		if row.OverRate || rd.Unrecovered > 0 || rd.Purged > 0 {
			row.Class = "bad"
		}
		out = append(out, row)
	}
	return out
}

// eventless reports whether findings of kind k are about no one event (a
// stall, a peak of memory, a redrive's busiest second, the retries'
// synchronization): their examples' details say them, with no lineage to
// trace.
func eventless(k checker.Kind) bool {
	switch k {
	case checker.Stall, checker.Memory, checker.RedriveRate, checker.RetryStorm, checker.BacklogAge:
		return true
	}
	return false
}
