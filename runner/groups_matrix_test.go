package runner

import (
	"slices"
	"testing"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/nemesis"
	"github.com/deliverycheck/deliverycheck/scenarios"
)

// checkGroups checks what TestDetectionMatrix promises of a Kafka
// scenario whose groups change (join or leave steps, late
// subscriptions; issue 25): every consumer's polls were judged, and in a
// valid run every group, a late one included, applied every committed
// event; a late group's first delivery came after its join.
func checkGroups(t *testing.T, s scenarios.Scenario, r *checker.Result) {
	t.Helper()
	if s.Broker.Kind != "kafka" {
		return
	}
	joins := map[string]int64{} // the first join step of each subscription
	groupSteps := false
	for _, st := range s.Nemesis.Timeline {
		switch st.Fault.Kind {
		case nemesis.Join:
			if at, ok := joins[st.Fault.Target]; !ok || int64(st.At) < at {
				joins[st.Fault.Target] = int64(st.At)
			}
			groupSteps = true
		case nemesis.Leave:
			groupSteps = true
		}
	}
	if !groupSteps {
		return
	}
	for _, sub := range s.Workload.Subscriptions {
		i := slices.IndexFunc(r.Positions, func(p checker.SubscriptionPositions) bool { return p.Subscription == sub })
		if i < 0 {
			t.Errorf("positions: %s missing", sub)
			continue
		}
		p := r.Positions[i]
		if !p.Judged || len(p.ProcessesWithoutAssign) > 0 {
			t.Errorf("positions of %s: judged %v, processes without assign ops %v: want every consumer judged", sub, p.Judged, p.ProcessesWithoutAssign)
		}
		t.Logf("positions of %s: %d sessions, %d deliveries, %d poll-skip, %d nonmonotonic-poll", sub, p.Sessions, p.Deliveries, p.PollSkip, p.NonmonotonicPoll)
	}
	for _, st := range r.Subscriptions {
		if r.Valid == checker.Valid && st.Applied != r.Counts.Committed {
			t.Errorf("%s applied %d of %d committed events", st.Name, st.Applied, r.Counts.Committed)
		}
		if at, ok := joins[st.Name]; ok && slices.Contains(s.Workload.LateSubscriptions, st.Name) && st.JoinedNS < at {
			t.Errorf("late subscription %s delivered at %dns, before its join at %dns", st.Name, st.JoinedNS, at)
		}
	}
}
