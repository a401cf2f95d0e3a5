package checker

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
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
// set, nor are stall and memory. unexpected, unauthorized-effect, dlq-unaccounted, wrongly-dead-lettered,
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
	// MaxStall is the longest a subscription may have committed events
	// pending and settle none (stall: stall.go); 0 promises nothing.
	MaxStall time.Duration `json:"max-stall,omitempty" yaml:"max-stall,omitempty"`
	// MaxRSS is the highest peak resident set, in bytes, any process the
	// harness runs may reach (memory: resources.go); 0 promises nothing.
	MaxRSS int64 `json:"max-rss,omitempty" yaml:"max-rss,omitempty"`
	// MaxRetrySync is the most the consumers' transient retries may be
	// synchronized, as the peak-to-mean figure retries.go measures
	// (retry-storm); 0 promises nothing.
	MaxRetrySync float64 `json:"max-retry-sync,omitempty" yaml:"max-retry-sync,omitempty"`
	// MaxBacklogAge is the longest a subscription's oldest unapplied
	// event may wait (backlog-age: backlog.go); 0 promises nothing.
	MaxBacklogAge time.Duration `json:"max-backlog-age,omitempty" yaml:"max-backlog-age,omitempty"`
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
	if g.MaxStall < 0 {
		return fmt.Errorf("checker: max-stall must be ≥ 0, not %s", g.MaxStall)
	}
	if g.MaxRSS < 0 {
		return fmt.Errorf("checker: max-rss must be ≥ 0, not %d", g.MaxRSS)
	}
	if g.MaxRetrySync != 0 && !(g.MaxRetrySync >= 1) {
		return fmt.Errorf("checker: max-retry-sync must be 0 (not promised) or ≥ 1, not %g", g.MaxRetrySync)
	}
	if g.MaxBacklogAge < 0 {
		return fmt.Errorf("checker: max-backlog-age must be ≥ 0, not %s", g.MaxBacklogAge)
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
		OutputDuplicate, OutputLost, AbortedVisible, TornTransaction, TransactionLeftOpen,
		Unrecovered, OverRetried, PollSkip, NonmonotonicPoll, RedriveRate:
		return true
	case OutputOrder:
		// Per-key order downstream rests on the stage keeping the
		// order of each input partition.
		return g.Order != Unordered
	case Stall:
		return g.MaxStall > 0
	case Memory:
		return g.MaxRSS > 0
	case RetryStorm:
		return g.MaxRetrySync > 0
	case BacklogAge:
		return g.MaxBacklogAge > 0
	}
	return false
}

// ParseGuarantees parses a comma-separated list of presets and settings,
// later items overriding earlier ones, e.g.
// "effectively-once,order=per-key,subscriptions=billing+inventory,max-stall=5s,max-rss=256MiB".
// Keys are loss, duplicate-effects, order, gaps, subscriptions (names
// joined by '+'), max-stall (a duration), max-rss (a size, see
// [ParseSize]), max-retry-sync (a number ≥ 1) and max-backlog-age (a
// duration); a preset keeps the subscriptions and those four limits.
// An empty string gives the zero Guarantees.
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
			g = p.Keep(g)
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
		case "max-stall":
			d, err := time.ParseDuration(strings.TrimSpace(v))
			if err != nil {
				return Guarantees{}, fmt.Errorf("checker: max-stall: want a duration such as 5s, got %q", v)
			}
			g.MaxStall = d
		case "max-rss":
			n, err := ParseSize(v)
			if err != nil {
				return Guarantees{}, fmt.Errorf("checker: max-rss: %w", err)
			}
			g.MaxRSS = n
		case "max-retry-sync":
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return Guarantees{}, fmt.Errorf("checker: max-retry-sync: want a number such as 4, got %q", v)
			}
			g.MaxRetrySync = f
		case "max-backlog-age":
			d, err := time.ParseDuration(strings.TrimSpace(v))
			if err != nil {
				return Guarantees{}, fmt.Errorf("checker: max-backlog-age: want a duration such as 30s, got %q", v)
			}
			g.MaxBacklogAge = d
		default:
			return Guarantees{}, fmt.Errorf("checker: unknown guarantee %q (have loss, duplicate-effects, order, gaps, subscriptions, max-stall, max-rss, max-retry-sync, max-backlog-age)", k)
		}
	}
	if err := g.Validate(); err != nil {
		return Guarantees{}, err
	}
	return g.Normalize(), nil
}

// Keep returns the preset p with what a preset does not set kept from g:
// the subscriptions and the limits (max-stall, max-rss, max-retry-sync,
// max-backlog-age). A preset named after them changes only the
// allowances and the order.
func (p Guarantees) Keep(g Guarantees) Guarantees {
	p.Subscriptions, p.MaxStall, p.MaxRSS = g.Subscriptions, g.MaxStall, g.MaxRSS
	p.MaxRetrySync, p.MaxBacklogAge = g.MaxRetrySync, g.MaxBacklogAge
	return p
}

// sizeUnits are the suffixes [ParseSize] reads, binary multiples.
var sizeUnits = []struct {
	suffix string
	shift  uint
}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}

// ParseSize reads a size in bytes as scenarios and --guarantees write
// it: plain bytes ("268435456"), or a whole number with a binary unit
// ("256MiB", "1GiB", "512KiB", "4096B").
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	num, shift := s, uint(0)
	for _, u := range sizeUnits {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, shift = strings.TrimSpace(n), u.shift
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64>>shift {
		return 0, fmt.Errorf("want a size such as 256MiB, 1GiB or plain bytes, got %q", s)
	}
	return n << shift, nil
}

// FormatSize writes n bytes the way [ParseSize] reads it back exactly,
// in the largest unit that divides it: "256MiB", "1GiB", "1000B"; 0 is
// "0".
func FormatSize(n int64) string {
	if n == 0 {
		return "0"
	}
	for _, u := range sizeUnits {
		if n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}
