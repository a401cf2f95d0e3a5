package checker

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Allowance says whether an anomaly kind is tolerated: "none" makes it
// fatal, "allowed" only reports it.
type Allowance string

// The allowances.
const (
	None    Allowance = "none"
	Allowed Allowance = "allowed"
)

// Order is the ordering promise of a scenario.
type Order string

// The orders.
const (
	PerKey    Order = "per-key" // order-regression is fatal
	Unordered Order = "none"    // order-regression is only reported
)

// Guarantees are what a scenario promises, as allowed or fatal anomaly
// kinds (Jepsen's allowed error types). The zero value promises the most:
// no loss, no duplicate effects; order and gaps are not promised unless
// set. unexpected, unauthorized-effect, dlq-unaccounted, wrongly-dead-lettered,
// poison-applied, inbox-mismatch and the transactional stage's kinds but
// output-order are always fatal; output-order is fatal where order is.
type Guarantees struct {
	Loss             Allowance `json:"loss" yaml:"loss"`                           // lost: default none
	DuplicateEffects Allowance `json:"duplicate-effects" yaml:"duplicate-effects"` // duplicate-effect: default none
	Order            Order     `json:"order" yaml:"order"`                         // order-regression: default none (not promised)
	Gaps             Allowance `json:"gaps" yaml:"gaps"`                           // gap: default allowed
	// Subscriptions lists the subscriptions (consumer groups) that must
	// each apply every committed event. Subscriptions seen in the history
	// are checked too; a declared one that applied nothing shows every
	// committed event as lost.
	Subscriptions []string `json:"subscriptions,omitempty" yaml:"subscriptions,omitempty"`
}

// presets are the common guarantee sets, by name. A function rather than
// a package map, so no caller can change what a name means for another.
func presets() map[string]Guarantees {
	return map[string]Guarantees{
		"at-least-once":            {Loss: None, DuplicateEffects: Allowed, Order: Unordered, Gaps: Allowed},
		"effectively-once":         {Loss: None, DuplicateEffects: None, Order: Unordered, Gaps: Allowed},
		"ordered-effectively-once": {Loss: None, DuplicateEffects: None, Order: PerKey, Gaps: None},
		"at-most-once":             {Loss: Allowed, DuplicateEffects: None, Order: Unordered, Gaps: Allowed},
	}
}

// Preset returns the common guarantee set called name (see [PresetNames]),
// as scenarios and [ParseGuarantees] name them, and whether there is one.
func Preset(name string) (Guarantees, bool) {
	g, ok := presets()[name]
	return g, ok
}

// PresetNames lists the names [Preset] knows, sorted.
func PresetNames() []string {
	return slices.Sorted(maps.Keys(presets()))
}

// Normalize fills in defaults and sorts and dedupes Subscriptions.
func (g Guarantees) Normalize() Guarantees {
	if g.Loss == "" {
		g.Loss = None
	}
	if g.DuplicateEffects == "" {
		g.DuplicateEffects = None
	}
	if g.Order == "" {
		g.Order = Unordered
	}
	if g.Gaps == "" {
		g.Gaps = Allowed
	}
	g.Subscriptions = slices.Compact(slices.Sorted(slices.Values(g.Subscriptions)))
	return g
}

// Validate reports an unknown allowance or order.
func (g Guarantees) Validate() error {
	g = g.Normalize()
	for name, a := range map[string]Allowance{"loss": g.Loss, "duplicate-effects": g.DuplicateEffects, "gaps": g.Gaps} {
		if a != None && a != Allowed {
			return fmt.Errorf("checker: %s must be none or allowed, not %q", name, a)
		}
	}
	if g.Order != PerKey && g.Order != Unordered {
		return fmt.Errorf("checker: order must be per-key or none, not %q", g.Order)
	}
	return nil
}

// Fatal reports whether an anomaly of kind k makes a run invalid. An
// unrecognised setting counts as the stricter one.
func (g Guarantees) Fatal(k Kind) bool {
	g = g.Normalize()
	switch k {
	case Lost:
		return g.Loss != Allowed
	case DuplicateEffect:
		return g.DuplicateEffects != Allowed
	case OrderRegression:
		return g.Order != Unordered
	case Gap:
		return g.Gaps != Allowed
	case Unexpected, UnauthorizedEffect, DLQUnaccounted, WronglyDeadLettered, PoisonApplied, InboxMismatch,
		OutputDuplicate, OutputLost, AbortedVisible, TornTransaction, TransactionLeftOpen:
		return true
	case OutputOrder:
		// Per-key order downstream rests on the stage keeping the
		// order of each input partition.
		return g.Order != Unordered
	}
	return false
}

// ParseGuarantees parses a comma-separated list of presets and settings,
// later items overriding earlier ones, e.g.
// "effectively-once,order=per-key,subscriptions=billing+inventory".
// Keys are loss, duplicate-effects, order, gaps and subscriptions
// (names joined by '+'). An empty string gives the zero Guarantees.
func ParseGuarantees(s string) (Guarantees, error) {
	var g Guarantees
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		if !ok {
			p, ok := Preset(item)
			if !ok {
				return Guarantees{}, fmt.Errorf("checker: unknown guarantee preset %q (have %s)", item, strings.Join(PresetNames(), ", "))
			}
			subs := g.Subscriptions
			g = p
			g.Subscriptions = subs
			continue
		}
		switch strings.TrimSpace(k) {
		case "loss":
			g.Loss = Allowance(v)
		case "duplicate-effects", "duplicates":
			g.DuplicateEffects = Allowance(v)
		case "order":
			g.Order = Order(v)
		case "gaps":
			g.Gaps = Allowance(v)
		case "subscriptions":
			for sub := range strings.SplitSeq(v, "+") {
				if sub = strings.TrimSpace(sub); sub != "" {
					g.Subscriptions = append(g.Subscriptions, sub)
				}
			}
		default:
			return Guarantees{}, fmt.Errorf("checker: unknown guarantee %q (have loss, duplicate-effects, order, gaps, subscriptions)", k)
		}
	}
	if err := g.Validate(); err != nil {
		return Guarantees{}, err
	}
	return g.Normalize(), nil
}
