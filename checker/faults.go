package checker

import "github.com/deliverycheck/deliverycheck/history"

// faultKey pairs a fault's invoke with its completion: the same process,
// fault, target and step.
type faultKey struct{ process, fault, target, detail string }

// fault pairs fault invokes with their completions into s.faults, the
// fault windows; the completion says whether the fault took effect.
func (s *shard) fault(op *history.Op) {
	v := &op.Value
	if v.Fault == "schedule" && op.Type != history.Invoke {
		return // the schedule itself, not a fault
	}
	k := faultKey{op.Process, v.Fault, v.Target, v.Detail}
	if op.Type == history.Invoke {
		if s.openFaults == nil {
			s.openFaults = map[faultKey]int{}
		}
		s.openFaults[k] = len(s.faults)
		s.faults = append(s.faults, Fault{Kind: v.Fault, Target: v.Target, Detail: v.Detail,
			StartNS: op.Time, EndNS: -1, Outcome: FaultCut, Random: v.Reason == history.ReasonRandom})
		return
	}
	i, ok := s.openFaults[k]
	if !ok {
		// A heal that does not repeat the step's detail still heals the
		// fault its process opened on that target: the earliest one.
		for ok2, j := range s.openFaults {
			if ok2.process == k.process && ok2.fault == k.fault && ok2.target == k.target && (!ok || j < i) {
				k, i, ok = ok2, j, true
			}
		}
	}
	if ok {
		delete(s.openFaults, k)
	} else {
		// A completion without its invoke: a window of no length.
		i = len(s.faults)
		s.faults = append(s.faults, Fault{Kind: v.Fault, Target: v.Target, Detail: v.Detail, StartNS: op.Time})
	}
	f := &s.faults[i]
	f.EndNS = op.Time
	f.Random = f.Random || v.Reason == history.ReasonRandom
	f.Evidence, f.Error = v.Evidence, v.Error
	switch op.Type {
	case history.OK:
		f.Outcome, f.TookEffect = FaultTookEffect, true
	case history.Info:
		f.Outcome, f.TookEffect = FaultHealFailed, true
	default:
		f.Outcome = FaultNoEffect
	}
}
