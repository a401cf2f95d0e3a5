package checker

// This file is the intruder (issue 24, "An intruder on the broker";
// docs/security.md): a process with its own broker credentials that
// publishes well-formed events straight to the broker, bypassing the
// outbox. Each message is an intrude op (history.Intrude): invoke before
// the publish, ok once the broker accepted it, fail when the broker
// refused it, info when the answer was lost; value.detail its kind. What
// follows for the checker, and where:
//
//   - An effect for an event no commit op names and an intrude op (ok,
//     info, or never completed) names is an unauthorized effect: no
//     authorized producer committed it, and the consumer took it for one
//     that had (judge, facts.intruder). An effect for an event the broker
//     refused stays unexpected, as one for an event named by neither.
//   - The intruder's events are owed to no one: judge never finds one
//     lost or unseen, and a dead letter of one (a dlq op or row) is a
//     rejection, never wrongly-dead-lettered nor dlq-unaccounted. It
//     judges only committed events for those.
//   - [Intruder]: per kind, what the broker and each subscription did
//     with the messages, and the two facts the verdict needs
//     (intruderSection): the fault bit, and every accepted message was
//     rejected, skipped or applied by every subscription.

import (
	"fmt"
	"slices"
	"strings"

	"github.com/deliverycheck/deliverycheck/history"
)

// FaultIntrude is the fault kind of the intruder (the nemesis's
// "intrude"): while its window lasts the intruder publishes its messages.
const FaultIntrude = "intrude"

// Intruder is what became of the messages the intruder published, when
// the history has an intrude op or an intrude fault. A message is
// accepted when the broker said so (intrude ok) or a subscription got it;
// refused when the broker refused it (intrude fail) and none did; and
// unanswered when the answer was lost (info, or no completion) and none
// did: the broker may or may not have it.
type Intruder struct {
	Sent       int64 `json:"sent"`
	Refused    int64 `json:"refused"`
	Accepted   int64 `json:"accepted"`
	Unanswered int64 `json:"unanswered"`
	// Kinds has one entry per kind of message, in the order the history
	// first names each.
	Kinds []IntruderKind `json:"kinds"`
}

// IntruderKind is what became of the intruder's messages of one kind
// (an intruder.Kind: "type", "tenant", "signature-missing", ...).
type IntruderKind struct {
	Kind       string `json:"kind"`
	Sent       int64  `json:"sent"`
	Refused    int64  `json:"refused"`
	Accepted   int64  `json:"accepted"`
	Unanswered int64  `json:"unanswered"`
	// Refusals are the broker's distinct refusals (intrude fail's
	// error), sorted, at most maxIntruderReasons.
	Refusals []string `json:"refusals,omitempty"`
	// Subscriptions says, per subscription in name order, what it did
	// with the accepted messages of this kind.
	Subscriptions []IntruderSubscription `json:"subscriptions"`
}

// IntruderSubscription is what one subscription did with the accepted
// messages of one kind. Each is counted once: applied (it has an effect:
// an unauthorized effect), else rejected (dead-lettered), else skipped
// (its version guard turned it away: a skip-stale op or an inbox mark
// without an effect), else unaccounted (none of these once the final
// read is complete).
type IntruderSubscription struct {
	Subscription string `json:"subscription"`
	Rejected     int64  `json:"rejected"`
	// Reasons are the distinct reasons its rejections gave (a dlq op's,
	// else its dead-letter row's), sorted, at most maxIntruderReasons.
	Reasons     []string `json:"reasons,omitempty"`
	Applied     int64    `json:"applied"`
	Skipped     int64    `json:"skipped"`
	Unaccounted int64    `json:"unaccounted"`
	// UnaccountedEvents lists up to maxIntruderEvents of them.
	UnaccountedEvents []string `json:"unaccounted_events,omitempty"`
}

const (
	maxIntruderReasons   = 5
	maxIntruderEvents    = 10
	maxIntruderReasonLen = 300
)

// intrusionState is what the intruder's ops say of an event no commit op
// names, for judge.
type intrusionState uint8

const (
	intrusionNone intrusionState = iota
	// intrusionForged: an intrude ok or info names it, or an invoke
	// never completed: the broker accepted it or may have.
	intrusionForged
	// intrusionRefused: only intrude fails name it: the broker refused it.
	intrusionRefused
)

// Intrude op flags of an intrusion.
const (
	iInvoke uint8 = 1 << iota
	iOK
	iFail
	iInfo
)

// intrusion is what the history says of one event the intruder sent
// (rare, so kept beside the event, not in it).
type intrusion struct {
	kind    string // value.detail of its first intrude op naming one
	flags   uint8
	refusal string // the first intrude fail's error
	// reasons is, per subscription name, the reason it gave when it
	// dead-lettered the event: its dlq op's, else its dead-letter row's.
	reasons map[string]string
}

func (in *intrusion) state() intrusionState {
	if in.flags&iFail != 0 && in.flags&(iOK|iInfo) == 0 {
		return intrusionRefused
	}
	return intrusionForged
}

// intrude folds an intrude op of event ei into the shard.
func (s *shard) intrude(op *history.Op, ei int32, e *event) {
	e.flags |= cIntrude
	if s.intrusions == nil {
		s.intrusions = map[int32]*intrusion{}
	}
	in := s.intrusions[ei]
	if in == nil {
		in = &intrusion{}
		s.intrusions[ei] = in
	}
	if in.kind == "" {
		in.kind = op.Value.Detail
	}
	switch op.Type {
	case history.Invoke:
		in.flags |= iInvoke
	case history.OK:
		in.flags |= iOK
	case history.Fail:
		in.flags |= iFail
		if in.refusal == "" {
			in.refusal = op.Value.Error
		}
	case history.Info:
		in.flags |= iInfo
	}
}

// rejected records the reason subscription sub gave when it dead-lettered
// event ei, if the intruder sent it: a dlq op's (ok) reason wins over a
// dead-letter row's.
func (s *shard) rejected(ei int32, e *event, sub string, op *history.Op) {
	in := s.intrusions[ei]
	if e.flags&cIntrude == 0 || in == nil || op.Type != history.OK || op.Value.Reason == "" {
		return
	}
	if in.reasons == nil {
		in.reasons = map[string]string{}
	}
	if _, ok := in.reasons[sub]; !ok || op.F == history.DLQ {
		in.reasons[sub] = op.Value.Reason
	}
}

// intrusions gathers the shards' intrusions by the view's event index.
func (a *analyzer) intrusions(localToGlobal [][]int32) map[int32]*intrusion {
	var out map[int32]*intrusion
	for si, s := range a.shards {
		for li, in := range s.intrusions {
			if out == nil {
				out = map[int32]*intrusion{}
			}
			out[localToGlobal[si][li]] = in
		}
		s.intrusions = nil
	}
	return out
}

// intruderState is what the intruder's ops say of event i (e), which
// judge reads: none for an event a commit op names (it is judged as the
// committed event it is) or no intrude op names.
func (v *view) intruderState(i int, e *event) intrusionState {
	if e.flags&cIntrude == 0 || e.flags&cCommitSeen != 0 {
		return intrusionNone
	}
	if in := v.intrusions[int32(i)]; in != nil {
		return in.state()
	}
	return intrusionNone
}

// intruderSection builds the Intruder section from the intrusions and the
// subscriptions, when the history has an intrude op or faults holds an
// intrude fault, and sets v.intruderReasons: why the facts the verdict
// needs of the intruder are not established. final says the final read
// completed, so a subscription's rows are all it did.
func (v *view) intruderSection(faults []Fault, final bool) *Intruder {
	fault := slices.ContainsFunc(faults, func(f Fault) bool { return f.Kind == FaultIntrude })
	if len(v.intrusions) == 0 && !fault {
		return nil
	}
	idx := make([]int32, 0, len(v.intrusions))
	for i := range v.intrusions {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	sec := &Intruder{Kinds: []IntruderKind{}}
	byKind := map[string]int{}
	reasons := map[[2]int][]string{} // kind, subscription → reasons
	refusals := map[int][]string{}
	bit := false
	unaccounted := make([]int64, len(v.subs))
	examples := make([][]string, len(v.subs))
	for _, i := range idx {
		in, e := v.intrusions[i], &v.events[i]
		if e.flags&cCommitSeen != 0 {
			continue // a commit names it: judged as the committed event it is
		}
		ki, ok := byKind[in.kind]
		if !ok {
			ki = len(sec.Kinds)
			byKind[in.kind] = ki
			k := IntruderKind{Kind: in.kind, Subscriptions: make([]IntruderSubscription, len(v.subs))}
			for si, s := range v.subs {
				k.Subscriptions[si].Subscription = s.name
			}
			sec.Kinds = append(sec.Kinds, k)
		}
		k := &sec.Kinds[ki]
		k.Sent++
		seen := slices.ContainsFunc(v.subs, func(s *gsub) bool { se := v.se(s, int(i)); return handled(&se) })
		switch {
		case in.flags&iOK != 0 || seen:
			k.Accepted++
		case in.flags&iFail != 0:
			k.Refused++
			bit = true
			if in.refusal != "" {
				refusals[ki] = append(refusals[ki], in.refusal)
			}
			continue
		default:
			k.Unanswered++
			continue
		}
		all := true
		for si, s := range v.subs {
			se := v.se(s, int(i))
			row := &k.Subscriptions[si]
			effects := se.effects
			if !final {
				effects = max(se.applies, se.effects)
			}
			switch {
			case effects > 0:
				row.Applied++
			case se.flags&sDLQ != 0:
				row.Rejected++
				if why := in.reasons[s.name]; why != "" {
					reasons[[2]int{ki, si}] = append(reasons[[2]int{ki, si}], why)
				}
			case se.flags&(sSkipped|sInbox) != 0:
				row.Skipped++
			default:
				all = false
				if final {
					row.Unaccounted++
					unaccounted[si]++
					if len(row.UnaccountedEvents) < maxIntruderEvents {
						row.UnaccountedEvents = append(row.UnaccountedEvents, e.id)
					}
					if len(examples[si]) < 3 {
						examples[si] = append(examples[si], e.id)
					}
				}
			}
		}
		bit = bit || all
	}
	for ki := range sec.Kinds {
		k := &sec.Kinds[ki]
		sec.Sent += k.Sent
		sec.Refused += k.Refused
		sec.Accepted += k.Accepted
		sec.Unanswered += k.Unanswered
		k.Refusals = distinct(refusals[ki])
		for si := range k.Subscriptions {
			k.Subscriptions[si].Reasons = distinct(reasons[[2]int{ki, si}])
		}
	}
	switch {
	case sec.Sent == 0:
		v.intruderReasons = append(v.intruderReasons, "intruder: an intrude fault, and no intruder message was sent: the fault did not bite")
	case !bit:
		v.intruderReasons = append(v.intruderReasons, fmt.Sprintf("intruder: the fault did not bite: of %d intruder messages none was refused by the broker, nor accepted and then rejected, skipped or applied by every subscription", sec.Sent))
	}
	for si, n := range unaccounted {
		if n > 0 {
			v.intruderReasons = append(v.intruderReasons, fmt.Sprintf("intruder: %d accepted intruder messages neither rejected, skipped nor applied by %s (e.g. %s): what it did with them is not established",
				n, v.subs[si].name, strings.Join(examples[si], ", ")))
		}
	}
	return sec
}

// handled reports whether a subscription did anything with an event: an
// op of its consumers names it, or a row of its tables.
func handled(se *subEvent) bool {
	return se.flags&(sSeen|sDLQ|sInbox|sBrokerDLQ|sSkipped) != 0 || se.effects > 0 || se.applies > 0
}

// distinct returns the distinct strings of xs, each cut to
// maxIntruderReasonLen bytes, sorted, at most maxIntruderReasons; nil for
// none.
func distinct(xs []string) []string {
	if len(xs) == 0 {
		return nil
	}
	out := make([]string, 0, len(xs))
	for _, x := range xs {
		if len(x) > maxIntruderReasonLen {
			x = strings.ToValidUTF8(x[:maxIntruderReasonLen], "") + "…"
		}
		out = append(out, x)
	}
	slices.Sort(out)
	out = slices.Compact(out)
	return out[:min(len(out), maxIntruderReasons)]
}

// Summary says in one line what became of the intruder's messages, over
// all kinds: "12 sent: 0 refused by the broker, 12 accepted, 0
// unanswered; email rejected 12, applied 0, skipped 0, unaccounted 0;
// ...", the wording the command line uses.
func (in *Intruder) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d sent: %d refused by the broker, %d accepted, %d unanswered", in.Sent, in.Refused, in.Accepted, in.Unanswered)
	if len(in.Kinds) == 0 {
		return b.String()
	}
	for si, s := range in.Kinds[0].Subscriptions {
		var sum IntruderSubscription
		for _, k := range in.Kinds {
			x := k.Subscriptions[si]
			sum.Rejected += x.Rejected
			sum.Applied += x.Applied
			sum.Skipped += x.Skipped
			sum.Unaccounted += x.Unaccounted
		}
		fmt.Fprintf(&b, "; %s rejected %d, applied %d, skipped %d, unaccounted %d", s.Subscription, sum.Rejected, sum.Applied, sum.Skipped, sum.Unaccounted)
	}
	return b.String()
}
