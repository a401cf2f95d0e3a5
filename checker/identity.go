package checker

// This file is what identifies an event (issue 24, "Identity"): CloudEvents'
// source + id, never an id alone, a trace id or an id minted per publish
// attempt. Two things follow for the checker:
//
//   - An id a relay minted for one publish attempt is not an event: a
//     publish op that names it in published_as says which committed event
//     it carried, and every op and row naming it (under the same source) is
//     judged as that event's (aliases). Two effects under two such ids are
//     one event applied twice: a duplicate effect. A relay that mints ids
//     and does not say so leaves effects for events nobody committed
//     (unexpected), and the committed event lost.
//   - Two sources may share an id: events are keyed by (source, id)
//     everywhere, and an event a subscription turned away as a duplicate
//     while it had applied only another source's event with that id was
//     deduplicated against that event, not against itself (otherSource):
//     its inbox leaves the source out of the key.

import (
	"strings"

	"github.com/deliverycheck/deliverycheck/history"
)

// aliases maps an id a relay put on the wire, with its source, to the id
// of the committed event it carried, from the publish ops' published_as.
// The analyzer fills it before handing a batch to the shards, which only
// read it while they fold the batch.
type aliases map[[2]string]string

// learn records the published_as of the publish and redrive ops among
// ops (a redrive that republishes a dead letter under a new id).
func (a aliases) learn(ops []history.Op) {
	for i := range ops {
		v := &ops[i].Value
		if (ops[i].F == history.Publish || ops[i].F == history.Redrive) && v.PublishedAs != "" && v.PublishedAs != v.Event && v.Event != "" {
			a[[2]string{v.Source, v.PublishedAs}] = v.Event
		}
	}
}

// resolve returns op as the checker judges it: naming the committed event
// when it names an id a relay published it as, else op itself.
func (a aliases) resolve(op *history.Op) *history.Op {
	if len(a) == 0 || op.Value.Event == "" || op.F == history.Publish || op.F == history.Redrive {
		return op
	}
	id, ok := a[[2]string{op.Value.Source, op.Value.Event}]
	if !ok {
		return op
	}
	o := *op
	o.Value.Event = id
	return &o
}

// duplicateReason reports whether an apply fail's reason says the inbox
// turned the delivery away as a duplicate (docs/history.md: reason
// "duplicate", as the pipeline's consumers write "duplicate: already in
// the inbox").
func duplicateReason(reason string) bool { return strings.HasPrefix(reason, "duplicate") }

// otherSource returns the source of another event with event i's id that
// subscription s applied, when s turned event i away as a duplicate and
// never applied it: i was deduplicated against that event. "" if none.
func (v *view) otherSource(s *gsub, i int, se *subEvent) string {
	if se.flags&sDupRefused == 0 || se.applies > 0 || se.effects > 0 {
		return ""
	}
	if v.byID == nil {
		v.byID = make(map[string][]int32)
		for j := range v.events {
			v.byID[v.events[j].id] = append(v.byID[v.events[j].id], int32(j))
		}
	}
	e := &v.events[i]
	for _, j := range v.byID[e.id] {
		o := &v.events[j]
		if int(j) == i || o.source == e.source {
			continue
		}
		if ose := v.se(s, int(j)); ose.applies > 0 || ose.effects > 0 {
			return o.source
		}
	}
	return ""
}
