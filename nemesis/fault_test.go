package nemesis

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseStepRoundTrip(t *testing.T) {
	for _, s := range []string{
		"at 10s: partition kafka for 5s",
		"at 2s: partition rabbitmq upstream for 3s",
		"at 5s: latency postgres 100ms ±20ms for 10s",
		"at 1s: kill relay-0",
		"at 3s: kill broker for 2s",
		"at 4s: pause consumer-* for 1s",
		"at 1s: failpoint consumer-inventory-0 consumer.after-commit-before-ack=kill(once)",
		"at 6s: bandwidth kafka downstream 64KB/s for 5s",
		"at 1s: limit-data postgres 1000B for 2s",
		"at 2s: kill broker:leader for 3s",
		"at 3s: isolate kafka-1 for 5s",
		"at 3s: wipe broker:leader for 2s",
		"at 1s: wipe rabbitmq-0",
		"at 3s: split broker for 5s",
		"at 3s: split rabbitmq ring for 5s",
		"at 3s: split kafka bridge for 5s",
		"at 1s: partition kafka-2 upstream for 1s",
		"at 1s: roll broker for 1m0s",
		"at 2s: zombie processor-0 for 6s",
		"at 2s: intrude",
		"at 4s: deploy-fix email",
		"at 5s: redrive email at 50/s",
		"at 5s: purge-dlq email",
		"at 1s: join analytics",
		"at 2.5s: leave consumer-analytics-1",
	} {
		st, err := ParseStep(s)
		if err != nil {
			t.Fatalf("ParseStep(%q): %v", s, err)
		}
		if st.String() != s {
			t.Errorf("ParseStep(%q).String() = %q", s, st.String())
		}
	}
	st, err := ParseStep("at 10s: partition relay→kafka for 5s")
	if err != nil || st.Fault.Target != "kafka" {
		t.Errorf("arrow target: %+v %v", st, err)
	}
}

func TestParseStepErrors(t *testing.T) {
	for _, s := range []string{"", "partition kafka", "at x: kill relay-0", "at 1s: explode kafka", "at 1s: kill", "at 1s: latency kafka soon", "at 1s: failpoint relay-0",
		// An argument the kind has no use for would vanish from the
		// step's text and change the fault after a round trip.
		"at 0s: kill relay-0 1s", "at 0s: pause kafka upstream for 1s", "at 0s: partition kafka ±5ms for 1s",
		"at 0s: restart kafka 64KB/s", "at 0s: partition kafka 100ms for 1s",
		"at 0s: isolate kafka-1 ring for 1s", "at 0s: split kafka square for 1s", "at 0s: isolate kafka-1 upstream for 1s",
		// A rolling restart needs its window, and takes no argument.
		"at 1s: roll broker", "at 1s: roll broker 5s for 1m", "at 1s: roll broker upstream for 1m",
		"at 0s: wipe broker-1 ring for 1s", "at 0s: wipe broker-1 2s",
		// A zombie needs its window (how long it stays paused), one
		// processor, and takes no argument.
		"at 2s: zombie processor-0", "at 2s: zombie processor-* for 6s", "at 2s: zombie processor-0 5s for 6s",
		"at 2s: zombie processor-0 upstream for 6s", "at 2s: zombie processor-0 ring for 6s",
		// The intruder publishes to the run's broker until every
		// message has its answer: no target, no window.
		"at 2s: intrude broker", "at 2s: intrude for 3s", "at 2s: intrude upstream",
		// Operations take no window; a redrive needs its whole-number
		// rate.
		"at 5s: redrive email", "at 5s: redrive email at 0/s", "at 5s: redrive email at 2.5/s", "at 5s: redrive email 50/s",
		"at 5s: redrive email at 50/s for 3s", "at 4s: deploy-fix email for 2s", "at 4s: deploy-fix email now",
		"at 4s: purge-dlq", "at 1s: join analytics upstream", "at 2s: leave consumer-analytics-1 for 1s"} {
		if _, err := ParseStep(s); err == nil {
			t.Errorf("ParseStep(%q) succeeded", s)
		}
	}
}

func FuzzParseStep(f *testing.F) {
	f.Add("at 10s: partition kafka for 5s")
	f.Add("at 5s: latency postgres 100ms ±20ms for 10s")
	f.Add("at 3s: split broker ring for 5s")
	f.Fuzz(func(t *testing.T, s string) {
		st, err := ParseStep(s)
		if err != nil {
			return
		}
		again, err := ParseStep(st.String())
		if err != nil || again != st {
			t.Fatalf("%q → %q → %v %v", s, st.String(), again, err)
		}
	})
}

// "split ... halves" is the default shape, written as nothing.
func TestParseSplitHalves(t *testing.T) {
	st, err := ParseStep("at 1s: split kafka halves for 2s")
	if err != nil || st.Fault.Shape != "" || st.String() != "at 1s: split kafka for 2s" {
		t.Fatalf("%+v %v", st, err)
	}
}

// A zombie step says what it lacks: its window, or one processor.
func TestParseZombie(t *testing.T) {
	for _, tc := range []struct{ step, want string }{
		{"at 2s: zombie processor-0 for 6s", ""},
		{"at 2s: zombie processor-0", "zombie needs a window, how long the zombie stays paused"},
		{"at 2s: zombie processor-* for 6s", "zombie takes one processor, not a pattern"},
		{"at 2s: zombie processor-0 5s for 6s", "zombie takes no duration"},
		{"at 2s: zombie processor-0 upstream for 6s", "zombie takes no direction"},
	} {
		st, err := ParseStep(tc.step)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("ParseStep(%q): %v", tc.step, err)
		case tc.want == "" && (st.Fault.Kind != Zombie || st.Fault.Target != "processor-0" || st.For != 6*time.Second):
			t.Errorf("ParseStep(%q) = %+v", tc.step, st)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("ParseStep(%q) = %v, want an error saying %q", tc.step, err, tc.want)
		}
	}
	if slices.ContainsFunc(slices.Collect(maps.Values(Families())), func(ks []Kind) bool { return slices.Contains(ks, Zombie) }) {
		t.Error("a random schedule may draw zombie; it needs a stage")
	}
}
