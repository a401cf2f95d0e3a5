package scenarios

import (
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/failpoint"
	"github.com/deliverycheck/deliverycheck/nemesis"
	"github.com/deliverycheck/deliverycheck/pipeline"
	"github.com/deliverycheck/deliverycheck/pipeline/consumer"
	"github.com/deliverycheck/deliverycheck/pipeline/processor"
	"github.com/deliverycheck/deliverycheck/pipeline/producer"
	"github.com/deliverycheck/deliverycheck/pipeline/relay"
)

// validate checks ranges (again, for scenarios changed by hand) and the
// rules that tie fields together. loc says where a field came from.
func (s Scenario) validate(loc func(path string) (string, int)) []*Error {
	var errs []*Error
	fail := func(path, format string, args ...any) {
		file, line := loc(path)
		errs = append(errs, &Error{File: file, Line: line, Field: path, Msg: fmt.Sprintf(format, args...)})
	}

	if msg := checkName(s.Name); msg != "" {
		fail("name", "%s", msg)
	}
	if strings.ContainsAny(strings.TrimSpace(s.Description), "\r\n") {
		fail("description", "must be one line")
	}
	isKafka, isRabbit := s.Broker.Kind == "kafka", s.Broker.Kind == "rabbitmq"
	if !isKafka && !isRabbit {
		if s.Broker.Kind == "" {
			fail("broker", "missing: name one (valid: %s)", strings.Join(Brokers(), ", "))
		} else {
			fail("broker", "%s", unknownName("broker", s.Broker.Kind, Brokers()))
		}
	}

	if qt := s.Broker.QueueType; qt != "" && !slices.Contains(QueueTypes(), qt) {
		fail("broker.queue_type", "%s", unknownName("queue type", qt, QueueTypes()))
	}
	if sb := s.Postgres.Standby; sb != "" && !slices.Contains(Standbys(), sb) {
		fail("postgres.standby", "%s", unknownName("standby", sb, Standbys()))
	}

	// Ranges, for scenarios built or changed in code: what the decoder
	// checks of a file, from the same tags.
	checkRanges(reflect.ValueOf(s), "", func(path, msg string) { fail(path, "%s", msg) })
	w := s.Workload
	if w.ProducerProcesses > w.Producers {
		fail("workload.producer_processes", "must be ≤ workload.producers (%d), got %d", w.Producers, w.ProducerProcesses)
	}
	if !slices.Contains(producer.Variants(), s.Variants.Producer) {
		fail("variants.producer", "%s", unknownName("producer variant", string(s.Variants.Producer), strs(producer.Variants())))
	}
	if !slices.Contains(relay.Variants(), s.Variants.Relay) {
		fail("variants.relay", "%s", unknownName("relay variant", string(s.Variants.Relay), strs(relay.Variants())))
	}
	if !slices.Contains(consumer.Variants(), s.Variants.Consumer) {
		fail("variants.consumer", "%s", unknownName("consumer variant", string(s.Variants.Consumer), strs(consumer.Variants())))
	}

	// Subscriptions.
	if len(w.Subscriptions) == 0 {
		fail("workload.subscriptions", "name at least one subscription")
	}
	for i, sub := range w.Subscriptions {
		if slices.Contains(w.Subscriptions[:i], sub) {
			fail("workload.subscriptions", "%q is listed twice", sub)
		}
	}
	for _, sub := range s.Broker.Unbound {
		if !slices.Contains(w.Subscriptions, sub) {
			fail("broker.unbound", "%q is not a workload subscription (have %s)", sub, strings.Join(w.Subscriptions, ", "))
		}
	}
	for _, sub := range s.Guarantees.Subscriptions {
		if !slices.Contains(w.Subscriptions, sub) {
			fail("guarantees.subscriptions", "%q is not a workload subscription (have %s)", sub, strings.Join(w.Subscriptions, ", "))
		}
	}
	if err := s.Guarantees.Validate(); err != nil {
		fail("guarantees", "%s", strings.TrimPrefix(err.Error(), "checker: "))
	}

	// Broker-specific settings. Kafka routes every record to the topic, so
	// neither a missing binding nor the relay that ignores one exists there.
	if isKafka && len(s.Broker.Unbound) > 0 {
		fail("broker.unbound", "only RabbitMQ has bindings to leave out; Kafka delivers every record of the topic to every group")
	}
	if isRabbit && s.Variants.Relay == relay.Debezium {
		fail("variants.relay", "the debezium relay is Kafka Connect's; use broker: kafka")
	}
	if s.Variants.Relay == relay.Debezium && s.Variants.Producer != producer.Outbox {
		fail("variants.relay", "the debezium relay reads the outbox; variants.producer must be outbox, not %s", s.Variants.Producer)
	}
	if isKafka && s.Variants.Relay == relay.Unroutable {
		fail("variants.relay", "unroutable only exists on rabbitmq (Kafka has no routing to get wrong)")
	}
	if isRabbit && s.Stage != nil {
		fail("stage", "the transactional stage is Kafka's (transactions over its topics); use broker: kafka")
	}
	if st := s.Stage; st != nil && st.Processor != "" && !slices.Contains(processor.Variants(), st.Processor) {
		fail("stage.processor", "%s", unknownName("processor variant", string(st.Processor), strs(processor.Variants())))
	}
	if st := s.Stage; st != nil && st.Processor == processor.Idempotent && st.AbortRatio != 0 {
		fail("stage.abort_ratio", "the idempotent processor has no transaction to abort; leave abort_ratio out")
	}
	if st := s.Stage; st != nil && st.Reader != "" && !slices.Contains(IsolationLevels(), st.Reader) {
		fail("stage.reader", "%s", unknownName("isolation level", st.Reader, IsolationLevels()))
	}
	s.checkStageEffect(fail)
	if isKafka && s.Broker.QueueType != "" {
		fail("broker.queue_type", "queue types are RabbitMQ's; Kafka has a topic")
	}
	s.checkReplication(fail)
	if s.Broker.QueueType == "classic" && w.PoisonRatio > 0 {
		fail("workload.poison_ratio", "a classic queue has no delivery limit: a poison event would be redelivered for ever (use queue_type quorum)")
	}
	if isRabbit && s.Variants.Relay == relay.LeaderAck {
		fail("variants.relay", "leader-ack is Kafka's acks=1; use broker: kafka")
	}
	if isKafka && s.Variants.Relay == relay.Transient {
		fail("variants.relay", "transient is RabbitMQ's non-persistent delivery mode (Kafka keeps every record); use broker: rabbitmq")
	}
	if s.Variants.Relay == relay.Unroutable && len(s.Broker.Unbound) == 0 && s.Expect.Verdict == checker.Invalid {
		fail("broker.unbound", "the unroutable relay only loses events when a subscription is unbound; list one here")
	}
	s.checkIdentity(fail)
	// Operating the pipeline (issue 25).
	s.validateRedrive(fail)
	s.validateBackpressure(fail)
	s.validateGroups(fail)
	s.validateObservability(fail)

	// Producer variants. Only publish-then-commit aborts transactions, and
	// the direct-publishing producers must not get a relay (it would
	// publish their rows and hide the bug).
	if w.AbortRatio > 0 && s.Variants.Producer != producer.PublishThenCommit {
		fail("workload.abort_ratio", "only the publish-then-commit producer aborts transactions (variants.producer is %s)", s.Variants.Producer)
	}
	if w.Relays > 0 && s.Variants.Producer != producer.Outbox {
		fail("workload.relays", "the %s producer publishes directly; a relay would publish its outbox rows too and hide the bug (set 0)", s.Variants.Producer)
	}

	// Consumer variants that need competing consumers on one queue, which
	// Kafka does not have (one consumer per partition, in order).
	if isKafka && s.Expect.Verdict == checker.Invalid &&
		(s.Variants.Consumer == consumer.CheckThenAct || s.Variants.Consumer == consumer.NoVersionGuard) {
		fail("variants.consumer", "%s is only exposed by competing consumers on one queue, which Kafka does not have; use broker: rabbitmq", s.Variants.Consumer)
	}

	// Expectation.
	if s.Expect.Verdict != "" && s.Expect.Verdict != checker.Valid && s.Expect.Verdict != checker.Invalid {
		fail("expect.verdict", "%s", unknownName("verdict", string(s.Expect.Verdict), []string{"valid", "invalid"}))
	}
	if s.Expect.Anomaly != "" {
		switch {
		case !slices.Contains(anomalyKinds(), s.Expect.Anomaly):
			fail("expect.anomaly", "%s", unknownName("anomaly", string(s.Expect.Anomaly), strs(anomalyKinds())))
		case s.Stage == nil && slices.Contains(checker.TxnStageKinds(), s.Expect.Anomaly):
			fail("expect.anomaly", "%s is an anomaly of the transactional stage, and the scenario has no stage section", s.Expect.Anomaly)
		case s.Expect.Verdict == checker.Valid:
			fail("expect.anomaly", "a valid run has no fatal anomaly; drop it or expect verdict: invalid")
		case !s.CheckGuarantees().Fatal(s.Expect.Anomaly):
			fail("expect.anomaly", "%s is not fatal under these guarantees, so it cannot make the run invalid (%s)", s.Expect.Anomaly, fatalHint(s.Expect.Anomaly))
		}
	}
	if s.Expect.Verdict == checker.Invalid && s.Expect.Anomaly == "" {
		fail("expect.anomaly", "name the anomaly an invalid run must show (valid: %s)", strings.Join(strs(anomalyKinds()), ", "))
	}

	// A team's own components.
	sys := s.System
	for _, sub := range slices.Sorted(maps.Keys(sys.Consumers)) {
		if !slices.Contains(w.Subscriptions, sub) {
			fail("system.consumers."+sub, "%q is not a workload subscription (have %s)", sub, strings.Join(w.Subscriptions, ", "))
		}
	}
	cmds := map[string]*Command{"system.relay": sys.Relay, "system.consumer": sys.Consumer, "system.processor": sys.Processor}
	for sub, c := range sys.Consumers {
		cmds["system.consumers."+sub] = c
	}
	for _, path := range slices.Sorted(maps.Keys(cmds)) {
		if c := cmds[path]; c != nil && (len(c.Command) == 0 || c.Command[0] == "") {
			fail(path+".command", "missing: name the program to run, e.g. command: [./bin/consumer]")
		}
	}
	externalConsumers := sys.Consumer != nil || len(sys.Consumers) > 0
	if externalConsumers && strings.TrimSpace(sys.EffectsQuery) == "" {
		fail("system.effects_query", "missing: external consumers need a query returning one row per applied effect (event_id, consumer)")
	}
	if externalConsumers && w.PoisonRatio > 0 && strings.TrimSpace(sys.DeadLettersQuery) == "" {
		fail("system.dead_letters_query", "missing: with poison events (workload.poison_ratio) external consumers need a query returning what they dead-lettered (event_id, consumer)")
	}
	if !externalConsumers && strings.TrimSpace(sys.InboxQuery) != "" {
		fail("system.inbox_query", "only with external consumers (system.consumer or system.consumers): the built-in consumers' inbox is read anyway")
	}
	if sys.Relay == nil && strings.TrimSpace(sys.PendingQuery) != "" {
		fail("system.pending_query", "only with an external relay (system.relay): the built-in relay tells the drain when nothing is pending")
	}
	if len(sys.Transaction) > 0 && s.Variants.Producer != producer.Outbox {
		fail("system.transaction", "a team transaction replaces the outbox producer's insert; variants.producer must be outbox, not %s", s.Variants.Producer)
	}
	for i, t := range sys.Transaction {
		st, err := producer.Bind(t)
		if err == nil && (isKafka || isRabbit) {
			err = st.CheckBroker(s.Broker.Kind)
		}
		if err != nil {
			fail(fmt.Sprintf("system.transaction[%d]", i), "%s", err)
		}
	}
	if sys.Relay != nil && s.Variants.Relay != relay.Polling {
		fail("variants.relay", "system.relay replaces the relay; drop variants.relay (%s)", s.Variants.Relay)
	}
	if sys.Relay != nil && s.Variants.Producer != producer.Outbox {
		fail("system.relay", "the %s producer runs no relay", s.Variants.Producer)
	}
	s.checkTeamProcessor(fail)
	s.checkSecurity(fail)

	// Nemesis.
	workers := s.workers()
	for i, st := range s.Nemesis.Timeline {
		path := fmt.Sprintf("nemesis.timeline[%d]", i)
		if st.At >= w.Duration {
			fail(path, "%q starts at or after the workload ends (%s); faults only run while it does", st.String(), w.Duration)
		}
		if msg := s.checkStep(st, workers); msg != "" {
			fail(path, "%s", msg)
		}
	}
	if r := s.Nemesis.Random; r != nil {
		families := slices.Sorted(maps.Keys(nemesis.Families()))
		for _, f := range r.Families {
			if !slices.Contains(families, f) {
				fail("nemesis.random.families", "%s", unknownName("fault family", f, families))
			}
		}
		if len(r.Families) == 0 {
			fail("nemesis.random.families", "name at least one family (valid: %s)", strings.Join(families, ", "))
		}
		for _, t := range r.Targets {
			if msg := s.checkTarget(t, workers, true, true); msg != "" {
				fail("nemesis.random.targets", "%s", msg)
			}
		}
	}
	for _, wk := range slices.Sorted(maps.Keys(s.Nemesis.Failpoints)) {
		path := "nemesis.failpoints." + wk
		if !slices.Contains(workers, wk) {
			fail(path, "no worker %q in this scenario%s (workers: %s)", wk, suggest(wk, workers), strings.Join(workers, ", "))
			continue
		}
		for _, term := range s.Nemesis.Failpoints[wk] {
			if msg := s.checkTerm(term, []string{wk}); msg != "" {
				fail(path, "%s", msg)
			}
		}
	}
	return errs
}

// checkRanges checks each number of v, a section's struct at path, and of
// the sections in it, against its field's range tag, as the decoder checks
// a file's numbers (a zero=default field may be 0 here), and calls fail for
// each that breaks it.
func checkRanges(v reflect.Value, path string, fail func(path, msg string)) {
	for _, f := range fieldsOf(v.Type()) {
		fv, p := v.FieldByIndex(f.index), join(path, f.key)
		if msg := f.checkNumber(fv); msg != "" {
			fail(p, msg)
			continue
		}
		switch {
		case f.typ.Kind() == reflect.Map && sectionOf(f.typ.Elem()) != nil:
			keys := fv.MapKeys()
			slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
			for _, k := range keys {
				if sec, ok := asSection(fv.MapIndex(k)); ok {
					checkRanges(sec, join(p, k.String()), fail)
				}
			}
		case sectionOf(f.typ) != nil:
			if sec, ok := asSection(fv); ok {
				checkRanges(sec, p, fail)
			}
		}
	}
}

// checkNumber is what is wrong with v, field f's value set in Go, if f is
// a number: out of its range, or not finite (which no file can write).
func (f field) checkNumber(v reflect.Value) string {
	if f.zeroDefault && v.IsZero() {
		return ""
	}
	switch v.Kind() {
	case reflect.Int, reflect.Int32, reflect.Int64:
		if v.Type() == reflect.TypeFor[time.Duration]() {
			return f.outOfRange(float64(v.Int()), time.Duration(v.Int()).String())
		}
		return f.outOfRange(float64(v.Int()), strconv.FormatInt(v.Int(), 10))
	case reflect.Float64:
		x := v.Float()
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Sprintf("want a number, got %g", x)
		}
		return f.outOfRange(x, strconv.FormatFloat(x, 'g', -1, 64))
	}
	return ""
}

func fatalHint(k checker.Kind) string {
	switch k {
	case checker.Lost:
		return "set guarantees.loss: none"
	case checker.DuplicateEffect:
		return "set guarantees.duplicate-effects: none"
	case checker.OrderRegression:
		return "set guarantees.order: per-key"
	case checker.Gap:
		return "set guarantees.gaps: none"
	case checker.Stall:
		return "set guarantees.max-stall"
	case checker.Memory:
		return "set guarantees.max-rss"
	case checker.RetryStorm:
		return "set guarantees.max-retry-sync"
	case checker.BacklogAge:
		return "set guarantees.max-backlog-age"
	}
	return "check the guarantees"
}

// workers lists the worker processes the scenario starts, named as the
// pipeline names them.
func (s Scenario) workers() []string {
	out := pipeline.ProducerProcessNames(s.Workload.Producers, s.Workload.ProducerProcesses)
	relays := s.Workload.Relays
	if relays == 0 && s.Variants.Producer == producer.Outbox {
		relays = 1
	}
	for i := range relays {
		out = append(out, "relay-"+strconv.Itoa(i))
	}
	for _, sub := range s.Workload.Subscriptions {
		for i := range s.consumersAtStart(sub) {
			out = append(out, fmt.Sprintf("consumer-%s-%d", sub, i))
		}
	}
	if s.Stage != nil {
		for i := range max(s.Stage.Processors, 1) {
			out = append(out, "processor-"+strconv.Itoa(i))
		}
	}
	out = append(out, s.joinedWorkers()...)
	out = append(out, s.redriveWorkers()...)
	return out
}

// externalWorkers lists the workers that are a team's commands.
func (s Scenario) externalWorkers() []string {
	var out []string
	for _, w := range s.workers() {
		if s.commandOf(w) != nil {
			out = append(out, w)
		}
	}
	return out
}

// checkStep checks a timeline step against what the scenario runs.
func (s Scenario) checkStep(st nemesis.Step, workers []string) string {
	f := st.Fault
	switch f.Kind {
	case nemesis.Failpoint:
		matched := matchTargets(f.Target, workers)
		if len(matched) == 0 {
			return fmt.Sprintf("no worker matches %q%s (workers: %s)", f.Target, suggest(f.Target, workers), strings.Join(workers, ", "))
		}
		return s.checkTerm(f.Term, matched)
	case nemesis.Kill, nemesis.Pause, nemesis.Restart:
		return s.checkTarget(f.Target, workers, true, true)
	case nemesis.Isolate, nemesis.Split, nemesis.CutReplication, nemesis.Wipe:
		return s.checkNodesStep(f)
	case nemesis.Roll:
		if s.Broker.Nodes < 2 {
			return "roll restarts the nodes of a replicated broker one by one; set broker.nodes (e.g. 3)"
		}
		if f.Target != "broker" && f.Target != s.Broker.Kind {
			return fmt.Sprintf("roll acts on the whole broker, node by node: target broker, not %q", f.Target)
		}
		return ""
	case nemesis.Zombie:
		return s.checkZombie(f.Target, workers)
	case nemesis.Redrive, nemesis.DeployFix, nemesis.PurgeDLQ:
		return s.checkRedriveStep(f)
	case nemesis.Join, nemesis.Leave:
		return s.checkGroupStep(f, workers)
	case nemesis.Intrude:
		if !s.Security.Enabled() {
			return "intrude needs a security section: what the intruder sends and as whom (security: {intruder: {permissions: publish}}), and what the consumers check"
		}
		return ""
	case nemesis.Failover:
		if !s.hasStandby() {
			return "failover needs a standby to promote: set postgres.standby (async or sync)"
		}
		if f.Target != "postgres" {
			return fmt.Sprintf("failover acts on postgres, not %q", f.Target)
		}
		return ""
	default: // network
		if f.Kind == nemesis.Latency && f.Latency <= 0 {
			return fmt.Sprintf("%s needs a delay, e.g. \"latency %s 100ms ±20ms\"", f.Kind, f.Target)
		}
		if f.Kind == nemesis.Bandwidth && f.Rate <= 0 {
			return fmt.Sprintf("%s needs a rate, e.g. \"bandwidth %s 64KB/s\"", f.Kind, f.Target)
		}
		if f.Kind == nemesis.LimitData && f.Bytes <= 0 {
			return fmt.Sprintf("%s needs a size, e.g. \"limit-data %s 1024B\"", f.Kind, f.Target)
		}
		return s.checkTarget(f.Target, workers, false, true)
	}
}

// checkZombie checks a zombie step's target: one built-in processor of
// the stage (the fault pauses it at its own failpoint and starts a
// replacement from its spec).
func (s Scenario) checkZombie(t string, workers []string) string {
	if s.Stage == nil {
		return "zombie acts on a processor of the transactional stage; add a stage section (stage: {processors: 1})"
	}
	procs := slices.DeleteFunc(slices.Clone(workers), func(w string) bool { return !strings.HasPrefix(w, "processor-") })
	if !slices.Contains(procs, t) {
		return fmt.Sprintf("zombie takes one processor, not %q%s (valid: %s)", t, suggest(t, procs), strings.Join(procs, ", "))
	}
	if slices.Contains(s.externalWorkers(), t) {
		return fmt.Sprintf("zombie needs a built-in processor: %s is a team's command, which cannot pause itself at the harness's word", t)
	}
	return ""
}

// checkTarget checks a fault target: a worker (pattern) if workersOK, a
// service if servicesOK. Network links exist per service only.
func (s Scenario) checkTarget(t string, workers []string, workersOK, servicesOK bool) string {
	svcs := s.serviceTargets()
	if servicesOK && slices.Contains(svcs, t) {
		return ""
	}
	if t == "kafka" || t == "rabbitmq" {
		return fmt.Sprintf("%s is not this scenario's broker (%s); say broker to target whichever it is", t, s.Broker.Kind)
	}
	if workersOK && len(matchTargets(t, workers)) > 0 {
		return ""
	}
	var valid []string
	if servicesOK {
		valid = append(valid, svcs...)
	}
	if workersOK {
		valid = append(valid, workers...)
	} else if len(matchTargets(t, workers)) > 0 {
		return fmt.Sprintf("%s is a worker; network faults act on a service's link (valid: %s)", t, strings.Join(valid, ", "))
	}
	return fmt.Sprintf("unknown target %q%s (valid: %s; a trailing * matches several workers)", t, suggest(t, valid), strings.Join(valid, ", "))
}

// serviceTargets are the server targets of process and network faults:
// postgres and the broker, or, when the broker is replicated, each of its
// nodes (by its own name or as broker-<i>) and its current leader, since
// a cluster has no one server or link to hit.
func (s Scenario) serviceTargets() []string {
	out := []string{"postgres"}
	if s.hasStandby() {
		// "postgres" is whichever node is the primary now.
		out = append(out, "postgres-0", "postgres-1")
	}
	if s.Broker.Nodes <= 1 {
		return append(out, services(s.Broker.Kind)[1:]...)
	}
	for _, name := range []string{"broker", s.Broker.Kind} {
		if name == "" {
			continue
		}
		for i := range s.Broker.Nodes {
			out = append(out, fmt.Sprintf("%s-%d", name, i))
		}
		out = append(out, name+nemesis.LeaderSuffix)
	}
	return out
}

// hasStandby reports whether the database has a standby.
func (s Scenario) hasStandby() bool { return s.StandbyKind() != "" }

// checkNodesStep checks a fault between the nodes of the replicated
// broker: isolate one node (or the leader) or cut off its replication,
// split the broker, or replace one node with an empty one (wipe).
func (s Scenario) checkNodesStep(f nemesis.Fault) string {
	if f.Kind == nemesis.Isolate && s.hasStandby() && (f.Target == "postgres-0" || f.Target == "postgres-1") {
		return "" // the primary cut off from its standby
	}
	if f.Kind == nemesis.CutReplication && s.Broker.Kind != "kafka" {
		return "cut-replication cuts Kafka's inter-broker listener; RabbitMQ's nodes replicate over the one link that also keeps them a cluster (isolate the node instead)"
	}
	if f.Kind == nemesis.Wipe && s.Broker.Nodes < 2 {
		return "wipe replaces one node of a replicated broker with an empty one that rejoins its cluster; set broker.nodes (e.g. 3)"
	}
	if s.Broker.Nodes < 2 {
		return fmt.Sprintf("%s acts between the nodes of a replicated broker; set broker.nodes (e.g. 3)", f.Kind)
	}
	if f.Kind == nemesis.Split {
		if s.Broker.Nodes < 3 {
			return fmt.Sprintf("split needs 3 or more broker nodes (broker.nodes is %d); isolate one instead", s.Broker.Nodes)
		}
		if f.Target == "broker" || f.Target == s.Broker.Kind {
			return ""
		}
		return fmt.Sprintf("split acts on the broker's nodes: target broker, not %q", f.Target)
	}
	nodes := slices.DeleteFunc(s.serviceTargets(), func(t string) bool {
		// A standby replicates over the port its clients use: only
		// isolate cuts it off. A wipe replaces a broker node: a
		// database node has no cluster to rejoin empty.
		return t == "postgres" || (f.Kind == nemesis.CutReplication || f.Kind == nemesis.Wipe) && strings.HasPrefix(t, "postgres-")
	})
	if slices.Contains(nodes, f.Target) {
		return ""
	}
	return fmt.Sprintf("%s takes a broker node, not %q%s (valid: %s)", f.Kind, f.Target, suggest(f.Target, nodes), strings.Join(nodes, ", "))
}

// checkTerm checks that a failpoint term can fire in every matched worker.
// A team's component names its own failpoints, so any name goes there.
func (s Scenario) checkTerm(term string, matched []string) string {
	if external := s.externalWorkers(); slices.ContainsFunc(matched, func(w string) bool { return slices.Contains(external, w) }) {
		for _, w := range matched {
			if !slices.Contains(external, w) {
				return fmt.Sprintf("%s matches both team components and built-in ones (%s); name them apart", term, w)
			}
		}
		t, err := failpoint.ParseAny(term)
		if err != nil {
			return strings.TrimPrefix(err.Error(), "failpoint: ")
		}
		for _, w := range matched {
			declared := s.commandOf(w).Failpoints
			if len(declared) > 0 && !slices.Contains(declared, string(t.Name)) {
				return fmt.Sprintf("%s declares no failpoint %q%s (its command's failpoints: %s)", w, t.Name, suggest(string(t.Name), declared), strings.Join(declared, ", "))
			}
		}
		return ""
	}
	t, err := failpoint.Parse(term)
	if err != nil {
		return strings.TrimPrefix(err.Error(), "failpoint: ")
	}
	comp := t.Name.Component()
	for _, w := range matched {
		if !strings.HasPrefix(w, comp+"-") {
			return fmt.Sprintf("%s is a %s failpoint; %s is not a %s", t.Name, comp, w, comp)
		}
	}
	if t.Name == failpoint.ConsumerAfterAckBeforeCommit && s.Variants.Consumer != consumer.AckFirst {
		return fmt.Sprintf("%s is only reached by the ack-first consumer (variants.consumer is %s)", t.Name, s.Variants.Consumer)
	}
	if comp == "relay" && s.Variants.Producer != producer.Outbox && s.Workload.Relays == 0 {
		return fmt.Sprintf("%s needs a relay, and the %s producer runs none", t.Name, s.Variants.Producer)
	}
	return ""
}

// matchTargets lists the workers a target names; a trailing * is a prefix.
func matchTargets(t string, workers []string) []string {
	if prefix, ok := strings.CutSuffix(t, "*"); ok {
		var out []string
		for _, w := range workers {
			if strings.HasPrefix(w, prefix) {
				out = append(out, w)
			}
		}
		return out
	}
	if slices.Contains(workers, t) {
		return []string{t}
	}
	return nil
}

// End is when the last timeline fault heals, for callers sizing a run.
func (s Scenario) End() time.Duration {
	end := s.Workload.Duration
	for _, st := range s.Nemesis.Timeline {
		end = max(end, st.At+st.For)
	}
	return end
}

// checkReplication checks the replicated Kafka's topic settings: they
// exist only on Kafka with more than one node, and a min ISR above the
// replication factor would refuse every acks=all write.
// checkStageEffect checks stage.effect: a known effect, whose
// subscription (the stage's, pipeline.StageConsumer) no workload
// subscription shares, in a workload without poison events (the
// processor applies every input and dead-letters none).
func (s Scenario) checkStageEffect(fail func(path, format string, args ...any)) {
	st := s.Stage
	if st == nil || st.Effect == "" {
		return
	}
	if !slices.Contains(processor.Effects(), st.Effect) {
		fail("stage.effect", "%s", unknownName("processor effect", string(st.Effect), strs(processor.Effects())))
		return
	}
	if !st.Effect.Writes() {
		return
	}
	if slices.Contains(s.Workload.Subscriptions, pipeline.StageConsumer) {
		fail("stage.effect", "the effect is subscription %q's, and workload.subscriptions has one of that name", pipeline.StageConsumer)
	}
	if s.Workload.PoisonRatio > 0 {
		fail("stage.effect", "the processor applies every input and dead-letters none: leave workload.poison_ratio out")
	}
}

func (s Scenario) checkReplication(fail func(path, format string, args ...any)) {
	b := s.Broker
	for _, f := range []struct {
		path string
		set  bool
	}{
		{"broker.replication_factor", b.ReplicationFactor != 0},
		{"broker.min_insync_replicas", b.MinInsyncReplicas != 0},
		{"broker.unclean_leader_election", b.UncleanLeaderElection},
	} {
		switch {
		case !f.set:
		case b.Kind != "kafka":
			fail(f.path, "a Kafka replication setting; RabbitMQ's quorum queues have a member on every node (use broker: kafka)")
		case b.Nodes <= 1:
			fail(f.path, "a single Kafka node replicates nothing; set broker.nodes (e.g. 3)")
		}
	}
	if b.Kind != "kafka" || b.Nodes <= 1 {
		return
	}
	rf := b.ReplicationFactor
	if rf > b.Nodes {
		fail("broker.replication_factor", "must be ≤ broker.nodes (%d), got %d", b.Nodes, rf)
	}
	if rf == 0 {
		rf = min(3, b.Nodes)
	}
	if b.MinInsyncReplicas > rf {
		fail("broker.min_insync_replicas", "must be ≤ the replication factor (%d), got %d: every acks=all write would be refused", rf, b.MinInsyncReplicas)
	}
}

// anomalyKinds are the anomalies a scenario may expect: the
// subscriptions', then the transactional stage's.
func anomalyKinds() []checker.Kind {
	return slices.Concat(checker.AnomalyKinds(), checker.TxnStageKinds(), checker.ResourceKinds(), checker.OperationKinds())
}

// checkTeamProcessor checks system.processor: it replaces the processors
// of the transactional stage, so it needs one (and so Kafka), and the
// built-in processor's variant has nothing to pick among.
func (s Scenario) checkTeamProcessor(fail func(path, format string, args ...any)) {
	if s.System.Processor == nil {
		return
	}
	switch {
	case s.Broker.Kind == "rabbitmq":
		fail("system.processor", "a processor is the transactional stage's, and the stage is Kafka's (transactions over its topics); use broker: kafka")
	case s.Stage == nil:
		fail("system.processor", "replaces the processors of the transactional stage, and the scenario has no stage section; add one, e.g. stage: {processors: 1}")
	case s.Stage.Processor != "":
		fail("stage.processor", "system.processor replaces the built-in processor; drop stage.processor (%s)", s.Stage.Processor)
	case s.Stage.Effect != "" && s.Stage.Effect != processor.NoEffect:
		fail("stage.effect", "the database effect is the built-in processor's (a team's processor cannot be told to write it): drop stage.effect (%s)", s.Stage.Effect)
	}
}

// checkIdentity checks the workload's sources and the variants that get
// an event's identity wrong (issue 24): they need what exposes them.
func (s Scenario) checkIdentity(fail func(field, format string, args ...any)) {
	seen := map[string]bool{}
	for _, src := range s.Workload.Sources {
		if seen[src] {
			fail("workload.sources", "source %q is listed twice; each round of sources shares one event id, so a source twice would commit one event twice", src)
		}
		seen[src] = true
	}
	if s.Variants.Consumer == consumer.InboxByID && len(s.Workload.Sources) < 2 && s.Expect.Verdict == checker.Invalid {
		fail("workload.sources", "the inbox-by-id consumer only loses events when two sources share an id; list two sources here")
	}
	if s.Variants.Consumer == consumer.InboxByTrace && s.Variants.Relay == relay.Debezium {
		fail("variants.consumer", "inbox-by-trace keys its inbox by the traceparent header, which the debezium relay does not send; use the polling relay")
	}
	if s.Variants.Consumer == consumer.InboxByTrace && s.Expect.Verdict == checker.Invalid && s.Observability.Traces != relay.TracesPerAttempt {
		fail("observability.traces", "the inbox-by-trace consumer only applies a republished event twice when the relay starts a new trace per publish attempt; with the trace propagated, a republish keeps its trace id (set traces: per-attempt)")
	}
}
