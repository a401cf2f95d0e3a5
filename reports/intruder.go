package reports

import (
	"strings"

	"github.com/deliverycheck/deliverycheck/checker"
)

// intruderView is the report's Intruder section (docs/security.md): per
// kind of forged message, what the broker did with it, and what each
// subscription did with those the broker accepted. Every string in it
// (kinds, refusals, reasons, subscription names) comes from the history
// and goes through the template's escaping.
type intruderView struct {
	Sent, Refused, Accepted, Unanswered int64
	Kinds                               []intruderKindRow
	Subscriptions                       []intruderSubRow
}

// intruderKindRow is what the broker did with one kind's messages.
type intruderKindRow struct {
	Kind                                string
	Sent, Refused, Accepted, Unanswered int64
	Refusals                            string
}

// intruderSubRow is what one subscription did with one kind's accepted
// messages. Class is bad when it applied one (an unauthorized effect),
// info when it left one unaccounted, empty otherwise.
type intruderSubRow struct {
	Kind, Subscription                      string
	Rejected, Applied, Skipped, Unaccounted int64
	Reasons, Unaccounted0, Class            string
}

// newIntruderView lays out in's section, nil without one.
func newIntruderView(in *checker.Intruder) *intruderView {
	if in == nil {
		return nil
	}
	v := &intruderView{Sent: in.Sent, Refused: in.Refused, Accepted: in.Accepted, Unanswered: in.Unanswered}
	for _, k := range in.Kinds {
		v.Kinds = append(v.Kinds, intruderKindRow{Kind: k.Kind, Sent: k.Sent, Refused: k.Refused, Accepted: k.Accepted, Unanswered: k.Unanswered,
			Refusals: strings.Join(k.Refusals, "; ")})
		if k.Accepted == 0 {
			continue
		}
		for _, s := range k.Subscriptions {
			row := intruderSubRow{Kind: k.Kind, Subscription: s.Subscription, Rejected: s.Rejected, Applied: s.Applied, Skipped: s.Skipped,
				Unaccounted: s.Unaccounted, Reasons: strings.Join(s.Reasons, "; "), Unaccounted0: strings.Join(s.UnaccountedEvents, ", ")}
			switch {
			case s.Applied > 0:
				row.Class = "bad"
			case s.Unaccounted > 0:
				row.Class = "info"
			}
			v.Subscriptions = append(v.Subscriptions, row)
		}
	}
	return v
}
