package scenarios

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/deliverycheck/deliverycheck/pipeline/intruder"
	"github.com/deliverycheck/deliverycheck/pipeline/producer"
	"github.com/deliverycheck/deliverycheck/pipeline/relay"
)

// checkSecurity checks the security section: its intruder's names (for a
// scenario built in Go; the decoder checks a file's), its authority's
// sources, a freshness window that outlasts the run but not the
// intruder's replay, and that every publisher of events is one that
// stamps them (the built-in relay or a team's).
func (s Scenario) checkSecurity(fail func(path, format string, args ...any)) {
	sec := s.Security
	if !sec.Enabled() {
		return
	}
	in := sec.Intruder
	if p := in.Permissions; p != "" && p != intruder.Publish && p != intruder.None {
		fail("security.intruder.permissions", "%s", unknownName("intruder permissions", string(p), enumValues("intruder permissions")))
	}
	for i, k := range in.Kinds {
		if _, err := intruder.ParseKind(string(k)); err != nil {
			fail(fmt.Sprintf("security.intruder.kinds[%d]", i), "%s", strings.TrimPrefix(err.Error(), "intruder: "))
		} else if slices.Contains(in.Kinds[:i], k) {
			fail(fmt.Sprintf("security.intruder.kinds[%d]", i), "%q is listed twice", k)
		}
	}
	kinds := in.WithDefaults().Kinds

	sources := s.Workload.Sources
	if len(sources) == 0 {
		sources = []string{producer.DefaultSource}
	}
	for _, src := range slices.Sorted(maps.Keys(sec.Authority)) {
		path := "security.authority." + src
		if !slices.Contains(sources, src) {
			fail(path, "%q is not a workload source (have %s)", src, strings.Join(sources, ", "))
		}
		if len(sec.Authority[src]) == 0 {
			fail(path, "name at least one event type it may emit, e.g. [%s]", producer.EventType)
		}
		for i, typ := range sec.Authority[src] {
			if msg := checkEventType(typ); msg != "" {
				fail(fmt.Sprintf("%s[%d]", path, i), "%s", msg)
			}
		}
	}

	if f := sec.Freshness; f > 0 {
		run := s.Workload.Duration + s.Drain.Timeout
		if f <= run {
			fail("security.freshness", "%s does not outlast the run (workload.duration %s + drain.timeout %s = %s): a real event taken at the end of the drain would be rejected as stale", f, s.Workload.Duration, s.Drain.Timeout, run)
		}
		if slices.Contains(kinds, intruder.Replay) && f >= intruder.ReplayAge {
			fail("security.freshness", "%s lets the intruder's replay (an event from %s before the run) through; make it shorter, or leave replay out of security.intruder.kinds", f, intruder.ReplayAge)
		}
	}
	if m := sec.MaxVersionAhead; m >= intruder.VersionAheadVersion && slices.Contains(kinds, intruder.VersionAhead) {
		fail("security.max_version_ahead", "%d lets the intruder's version-ahead event (version %d) through; make it smaller, or leave version-ahead out of security.intruder.kinds", m, intruder.VersionAheadVersion)
	}

	externalConsumers := s.System.Consumer != nil || len(s.System.Consumers) > 0
	if externalConsumers && strings.TrimSpace(s.System.DeadLettersQuery) == "" && s.Workload.PoisonRatio == 0 {
		fail("system.dead_letters_query", "missing: with a security section external consumers need a query returning what they turned away (event_id, consumer, reason; docs/contract.md)")
	}

	// Every event must come from a publisher that stamps it.
	if s.Variants.Producer != producer.Outbox {
		fail("security", "the %s producer publishes its events itself, unstamped and unsigned; only the outbox's relay stamps them (use variants.producer: outbox)", s.Variants.Producer)
	}
	if s.Variants.Relay == relay.Debezium {
		fail("security", "the debezium relay (Kafka Connect's outbox event router) sends no tenant, time or signature header; use variants.relay: polling or a team relay (system.relay)")
	}
	if s.Stage != nil {
		fail("security", "the transactional stage's processors read the events topic without checking events' authority; a scenario has a stage or a security section, not both")
	}
}
