package runner

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/internal/testenv"
	"github.com/deliverycheck/deliverycheck/pipeline/hostile"
	"github.com/deliverycheck/deliverycheck/pipeline/pipelinetest"
	"github.com/deliverycheck/deliverycheck/scenarios"
)

// buildExample builds examples/consumer (with tags, if any) into a temp
// dir, as its Makefile would into bin/.
func buildExample(t *testing.T, tags string) string {
	t.Helper()
	return buildExampleIn(t, "consumer", tags)
}

// buildExampleIn builds examples/<dir> (with tags, if any) into a temp
// dir, as its Makefile would into bin/.
func buildExampleIn(t *testing.T, dir, tags string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), dir)
	args := []string{"build", "-o", bin}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, ".")...)
	cmd.Dir = filepath.Join("..", "examples", dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build examples/%s: %v\n%s", dir, err, out)
	}
	return bin
}

// installNodeExample makes sure examples/consumer-node has its packages
// (`make test` runs npm ci before the tests; a bare go test installs them
// here when node_modules is missing or older than the lock file).
func installNodeExample(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		_, err := exec.LookPath(tool)
		testenv.MustHaveServer(t, tool, err)
	}
	dir := filepath.Join("..", "examples", "consumer-node")
	lock, err := os.Stat(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	if inst, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json")); err == nil && !inst.ModTime().Before(lock.ModTime()) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}
}

// TestExampleConsumer runs the example team consumers end to end through
// their own scenario files, on each broker (the files say kafka; --set
// broker=rabbitmq is how a team would switch): each correct build comes
// out valid although its failpoints crashed it, each buggy build is
// caught with the anomaly its scenario expects. examples/consumer (Go):
// the buggy build has no inbox check, a redelivered event is applied
// twice; against the intruder's hostile messages (scenario-hostile.yaml)
// the correct build turns each away by its limits with the contract's
// reason, within max-rss (checkHostile). examples/consumer-node (Node.js,
// failpoints and lineage through DELIVERYCHECK_ENDPOINT): the buggy build
// acks or commits the offset before its transaction, and a crash in
// between loses the event.
func TestExampleConsumer(t *testing.T) {
	shared.Get(t)
	type run struct {
		dir, file, broker string
		command           []string // nil: the scenario's own
	}
	var runs []run
	good, buggy := buildExample(t, ""), buildExample(t, "buggy")
	// The Node.js example's Kafka runs first: they wait on the session
	// timeout of each crashed member (kafkajs has no static membership),
	// 23 s each, the others 5 to 10 s.
	installNodeExample(t)
	for _, br := range []string{"kafka", "rabbitmq"} {
		runs = append(runs, run{"consumer-node", "scenario.yaml", br, nil}, run{"consumer-node", "scenario-buggy.yaml", br, nil})
	}
	for _, br := range []string{"kafka", "rabbitmq"} {
		runs = append(runs,
			run{"consumer", "scenario.yaml", br, []string{good}},
			run{"consumer", "scenario-buggy.yaml", br, []string{buggy}},
			run{"consumer", "scenario-hostile.yaml", br, []string{good}})
	}
	// The redrive of its dead letters after a deploy-fix: RabbitMQ only
	// (on Kafka the example turns an unknown schema away into its own
	// table, and produces nothing to the dead-letter topic to redrive).
	runs = append(runs, run{"consumer", "scenario-redrive.yaml", "rabbitmq", []string{good}})
	// In lanes, on the sets of servers (the runs crash their consumers,
	// not the servers, but each drain reads its broker whole): a run
	// mostly waits.
	inLanes(len(runs), func(servers *pipelinetest.Servers, i int) {
		r := runs[i]
		t.Run(r.dir+"/"+r.broker+"/"+r.file, func(t *testing.T) {
			runExample(t, servers, r.dir, r.file, r.broker, r.command)
		})
	})
}

func runExample(t *testing.T, servers *pipelinetest.Servers, dir, file, br string, command []string) {
	s, err := scenarios.Load(filepath.Join("..", "examples", dir, file))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Set("broker", br); err != nil {
		t.Fatal(err)
	}
	if command != nil {
		s.System.Consumer.Command = command
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if os.Getenv("DELIVERYCHECK_KEEP") != "" {
		out = filepath.Join(os.TempDir(), "deliverycheck-example", dir, br)
	}
	o := runScenarioOn(t, servers, s, 1, out)
	r := o.Result
	t.Logf("%s on %s: %s %v; committed %d, crashes %d (%s)", s.Name, br, r.Valid, r.Reasons, r.Counts.Committed, r.Counts.Crashes, o.Dir)
	if ok, why := met(o); !ok {
		t.Fatalf("expectation not met: %s", why)
	}
	if r.Counts.Committed == 0 {
		t.Fatal("nothing was committed")
	}
	if r.Counts.Crashes == 0 {
		t.Error("the consumer's failpoints never crashed it")
	}
	var sub *checker.SubscriptionStats
	for i := range r.Subscriptions {
		if r.Subscriptions[i].Name == "inventory" {
			sub = &r.Subscriptions[i]
		}
	}
	if sub == nil {
		t.Fatalf("no inventory subscription in %+v", r.Subscriptions)
	}
	// Both examples write lineage: the report must have their deliveries
	// and acks, not "not observed".
	if sub.Deliveries == 0 || sub.Acked == 0 {
		t.Errorf("lineage missing: %d deliver ops, %d acked", sub.Deliveries, sub.Acked)
	}
	if s.Expect.Verdict == checker.Valid {
		if r.Valid != checker.Valid {
			t.Errorf("correct build: %s", r.Valid)
		}
		// after-commit-before-ack crashed it with an applied event unacked:
		// that event came back, and the inbox turned it away.
		if sub.Redelivered == 0 {
			t.Error("no event was redelivered although the consumer crashed between its commit and its ack")
		}
	}
	if len(s.Security.Intruder.Kinds) > 0 {
		checkHostile(t, s, r)
	}
}

// hostileReasons are the contract's reasons (docs/contract.md, "Hostile
// messages"), by prefix, a team's consumer gives for each hostile kind:
// the example's limits.go. The header count depends on the event's own
// headers, which the run decides.
var hostileReasons = map[hostile.Kind]string{
	hostile.Oversize:        "payload too large: 921600 bytes",
	hostile.CompressionBomb: "decompressed payload over 65536 bytes",
	hostile.DeepJSON:        "JSON nested deeper than 32",
	hostile.InvalidUTF8:     `header "event-id" is not valid UTF-8`,
	hostile.UnknownType:     `unknown type "Sabotage"`,
	hostile.ManyHeaders:     "too many headers: 50",
}

// checkHostile: every hostile message the intruder got into the broker was
// rejected by the inventory subscription with its kind's reason, none
// applied or left unaccounted, and every consumer process's memory was
// measured and stayed under max-rss (the verdict says so too; the peaks
// are logged, so a run's margin can be read).
func checkHostile(t *testing.T, s scenarios.Scenario, r *checker.Result) {
	t.Helper()
	in := r.Intruder
	if in == nil || in.Accepted == 0 {
		t.Fatalf("no hostile message reached the broker: %+v", in)
	}
	for _, kind := range s.Security.Intruder.Kinds {
		want, ok := hostileReasons[hostile.Kind(kind)]
		if !ok {
			t.Fatalf("kind %s: no reason known (is it a hostile kind?)", kind)
		}
		i := slices.IndexFunc(in.Kinds, func(k checker.IntruderKind) bool { return k.Kind == string(kind) })
		if i < 0 || in.Kinds[i].Accepted == 0 {
			t.Errorf("kind %s: none accepted by the broker (%+v)", kind, in.Kinds)
			continue
		}
		k := in.Kinds[i]
		for _, sub := range k.Subscriptions {
			if sub.Rejected != k.Accepted || sub.Applied+sub.Skipped+sub.Unaccounted != 0 ||
				len(sub.Reasons) != 1 || !strings.HasPrefix(sub.Reasons[0], want) {
				t.Errorf("kind %s, %s: %d of %d rejected (%q), %d applied, %d skipped, %d unaccounted; want every one rejected with %q",
					kind, sub.Subscription, sub.Rejected, k.Accepted, sub.Reasons, sub.Applied, sub.Skipped, sub.Unaccounted, want)
			}
		}
	}
	consumers := 0
	for _, p := range r.Resources {
		t.Logf("%s peaked at %.1f MiB (max-rss %.0f MiB)", p.Process, float64(p.PeakRSS)/(1<<20), float64(s.Guarantees.MaxRSS)/(1<<20))
		if strings.HasPrefix(p.Process, "consumer-") {
			consumers++
		}
	}
	if consumers == 0 || s.Guarantees.MaxRSS == 0 {
		t.Errorf("no consumer's memory measured, or no max-rss promised (%d MiB)", s.Guarantees.MaxRSS>>20)
	}
}
