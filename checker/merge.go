package checker

import (
	"cmp"
	"slices"
)

// ref locates an event in its shard.
type ref struct {
	shard uint8
	local int32
}

// gsub is a subscription across shards.
type gsub struct {
	name     string
	declared bool
	parts    []*subscription // per shard, nil where the shard never saw it
	// settles are its settles, by the view's event index, in time order
	// (stall.go).
	settles []settleRec
}

// view is the merged state of all shards, events in order of first
// appearance.
type view struct {
	events   []event
	refs     []ref
	keyNames []string
	subs     []*gsub // sorted by name
	findings []finding
	// Per subscription: it has inbox rows, its consumers wrote apply ops,
	// its effect rows carry commit_time, it has effect rows, its
	// consumers record every delivery.
	subInbox, subApplied, subTimed, subEffects, subLineage []bool
	// maxApplied is the highest version each subscription applied, per
	// key: subscription*nk + key.
	maxApplied []int64
	nk         int
	// txnReasons say why the transactional stage's facts are not
	// established (transactions.go).
	txnReasons []string
	// aliases are the analyzer's (identity.go); byID is every event of
	// an id, built only when a lost event may have been deduplicated
	// against another source's (view.otherSource).
	aliases aliases
	byID    map[string][]int32
	// intrusions are the events the intruder sent, by event index;
	// intruderReasons say why the facts the verdict needs of the
	// intruder are not established (intruder.go).
	intrusions      map[int32]*intrusion
	intruderReasons []string
	// resourceReasons say why the facts max-stall and max-rss need are
	// not established (stall.go, resources.go).
	resourceReasons []string
	// opsReasons say why the facts a promise about operating the
	// pipeline needs (max-retry-sync, max-backlog-age) are not
	// established (retries.go, backlog.go).
	opsReasons []string
	// redriveTook names the subscriptions a redrive took effect on
	// (redrive.go).
	redriveTook map[string]bool
}

func (v *view) se(s *gsub, i int) subEvent {
	r := v.refs[i]
	p := s.parts[r.shard]
	if p == nil || int(r.local) >= len(p.ev) {
		return subEvent{}
	}
	return p.ev[r.local]
}

// facts returns what the judge may rely on for event i of subscription si
// (s), given what the run established (f).
func (v *view) facts(f facts, s *gsub, si, i int, e *event, se *subEvent) facts {
	f.inbox = f.final && v.subInbox[si]
	f.lineage = v.subLineage[si]
	if f.inbox && e.key >= 0 && e.version > 0 {
		f.newer = v.maxApplied[si*v.nk+int(e.key)] > e.version
	}
	if se.flags&sBrokerDLQ != 0 {
		f.brokerAttempt = v.brokerAttempt(s, i)
	}
	f.otherSource = v.otherSource(s, i, se)
	f.intruder = v.intruderState(i, e)
	if f.maxAttempts > 0 {
		f.refusedAt = v.refusedAt(s, i)
	}
	if f.redrive = v.redriveTook[s.name]; f.redrive {
		f.redriven = v.redriveAcc(s, i)
	}
	return f
}

// brokerAttempt returns how many deliveries event i had before the broker
// dead-lettered it in subscription s, 0 if unknown.
func (v *view) brokerAttempt(s *gsub, i int) int64 {
	r := v.refs[i]
	if p := s.parts[r.shard]; p != nil {
		return p.brokerDLQ[r.local]
	}
	return 0
}

// merge stops the shards and builds the view.
func (a *analyzer) merge() *view {
	a.stop()
	for _, s := range a.shards {
		s.byID, s.bySource, s.keys, s.pending = nil, nil, nil, nil
	}
	a.foldEvents()
	v := &view{aliases: a.aliases}
	// Events: each shard's are in first-appearance order; merge them.
	total := 0
	for _, s := range a.shards {
		total += len(s.events)
	}
	v.events = make([]event, 0, total)
	v.refs = make([]ref, 0, total)
	next := make([]int, len(a.shards))
	globalKey := map[string]int32{}
	keyMap := make([][]int32, len(a.shards))
	for si, s := range a.shards {
		keyMap[si] = make([]int32, len(s.keyNames))
		for k, name := range s.keyNames {
			g, ok := globalKey[name]
			if !ok {
				g = int32(len(v.keyNames))
				globalKey[name] = g
				v.keyNames = append(v.keyNames, name)
			}
			keyMap[si][k] = g
		}
	}
	localToGlobal := make([][]int32, len(a.shards))
	for si, s := range a.shards {
		localToGlobal[si] = make([]int32, len(s.events))
	}
	for len(v.events) < total {
		best := -1
		for si, s := range a.shards {
			if next[si] < len(s.events) && (best < 0 || s.events[next[si]].firstPos < a.shards[best].events[next[best]].firstPos) {
				best = si
			}
		}
		e := a.shards[best].events[next[best]]
		if e.key >= 0 {
			e.key = keyMap[best][e.key]
		}
		localToGlobal[best][next[best]] = int32(len(v.events))
		v.events = append(v.events, e)
		v.refs = append(v.refs, ref{shard: uint8(best), local: int32(next[best])})
		next[best]++
	}
	// Subscriptions by name.
	byName := map[string]*gsub{}
	add := func(name string) *gsub {
		g, ok := byName[name]
		if !ok {
			g = &gsub{name: name, parts: make([]*subscription, len(a.shards))}
			byName[name] = g
			v.subs = append(v.subs, g)
		}
		return g
	}
	for _, name := range a.opts.Guarantees.Subscriptions {
		add(name).declared = true
	}
	for si, s := range a.shards {
		for _, sub := range s.subs {
			g := add(sub.name)
			g.parts[si] = sub
			g.declared = g.declared || sub.declared
		}
	}
	slices.SortFunc(v.subs, func(x, y *gsub) int { return cmp.Compare(x.name, y.name) })
	subIndex := map[string]int32{}
	for i, g := range v.subs {
		subIndex[g.name] = int32(i)
	}
	subIndexOf := make([][]int32, len(a.shards))
	for si, s := range a.shards {
		subIndexOf[si] = make([]int32, len(s.subs))
		for i, sub := range s.subs {
			subIndexOf[si][i] = subIndex[sub.name]
		}
	}
	v.nk = len(v.keyNames)
	v.intrusions = a.intrusions(localToGlobal)
	a.fold(v, keyMap, subIndexOf)
	a.sweep(v, keyMap, subIndexOf, localToGlobal)
	a.gatherSettles(v, localToGlobal)
	return v
}

// rowsCount reports whether final-read rows of attempt stamp count: those
// of the last attempt, when it completed (or of a history without
// brackets).
func (a *analyzer) rowsCount(stamp uint8) bool {
	return a.shards[0].fr.counts(stamp)
}

// foldEvents folds each event's final-read flags of the attempt that
// counts into its flags.
func (a *analyzer) foldEvents() {
	for _, s := range a.shards {
		for i := range s.events {
			if e := &s.events[i]; a.rowsCount(e.frAttempt) {
				e.settle()
			}
		}
	}
}

// fold settles the final read: only the rows of the attempt that counts
// (the last, if it completed) stay, folded into each event's flags; and
// it gathers what the judge needs across events: which subscriptions have
// an inbox, which are timed, the highest version each applied per key,
// and the order records (an effect row's commit_time wins over its apply
// ops' times).
func (a *analyzer) fold(v *view, keyMap, subIndexOf [][]int32) {
	v.subInbox = make([]bool, len(v.subs))
	v.subApplied = make([]bool, len(v.subs))
	v.subTimed = make([]bool, len(v.subs))
	v.subEffects = make([]bool, len(v.subs))
	v.subLineage = make([]bool, len(v.subs))
	for si, s := range a.shards {
		for li, sub := range s.subs {
			g := subIndexOf[si][li]
			v.subApplied[g] = v.subApplied[g] || sub.applyOps
			v.subLineage[g] = v.subLineage[g] || sub.lineage
			var any uint8
			effects := false
			for j := range sub.ev {
				se := &sub.ev[j]
				if se.frFlags == 0 && se.effects == 0 {
					continue
				}
				counts := a.rowsCount(se.frAttempt)
				se.settle(counts)
				if !counts {
					continue
				}
				any |= se.frFlags
				effects = effects || se.effects > 0
			}
			v.subInbox[g] = v.subInbox[g] || any&sInbox != 0
			v.subTimed[g] = v.subTimed[g] || any&sTimed != 0
			v.subEffects[g] = v.subEffects[g] || effects
		}
	}
	// The highest version applied per key, for subscriptions with an inbox
	// (an inbox mark without an effect under a later version is a skip).
	for si, s := range a.shards {
		for li, sub := range s.subs {
			g := subIndexOf[si][li]
			if !v.subInbox[g] {
				continue
			}
			if v.maxApplied == nil {
				v.maxApplied = make([]int64, len(v.subs)*v.nk)
			}
			for j := range sub.ev {
				se := &sub.ev[j]
				if se.effects == 0 && se.applies == 0 {
					continue
				}
				if e := &s.events[j]; e.key >= 0 && e.version > 0 {
					m := &v.maxApplied[int(g)*v.nk+int(keyMap[si][e.key])]
					*m = max(*m, e.version)
				}
			}
		}
	}
	for _, s := range a.shards {
		s.settleOrder(a.rowsCount(s.fr.attempt))
	}
}
