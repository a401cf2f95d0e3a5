package scenarios

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// A rate timeline reads quoted and unquoted, writes back as it was
// written, and reaches the pipeline's config as written (the pipeline
// moves it onto the run's clock).
func TestRateTimeline(t *testing.T) {
	src := "broker: rabbitmq\nworkload:\n  rate: 20\n  consumer_batch: 1\n  rate_timeline:\n    - \"at 0.5s: 150/s for 2s\"\n    - at 4s: 80/s\n"
	s, err := Parse("bp.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := []RateStep{{At: 500 * time.Millisecond, Rate: 150, For: 2 * time.Second}, {At: 4 * time.Second, Rate: 80}}
	if !slices.Equal(s.Workload.RateTimeline, want) {
		t.Fatalf("steps %+v", s.Workload.RateTimeline)
	}
	b, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "at 500ms: 150/s for 2s") || !strings.Contains(string(b), "at 4s: 80/s") {
		t.Errorf("marshalled:\n%s", b)
	}
	back, err := Parse("bp.yaml", b)
	if err != nil || !slices.Equal(back.Workload.RateTimeline, want) {
		t.Fatalf("round trip: %v %+v", err, back.Workload.RateTimeline)
	}
	cfg := s.PipelineConfig()
	if len(cfg.RateSteps) != 2 || cfg.RateSteps[0].AtNS != int64(500*time.Millisecond) || cfg.RateSteps[0].Rate != 150 ||
		cfg.RateSteps[0].ForNS != int64(2*time.Second) || cfg.RateSteps[1].ForNS != 0 || cfg.ConsumerBatch != 1 {
		t.Errorf("pipeline config %+v batch %d", cfg.RateSteps, cfg.ConsumerBatch)
	}
}

// Each mistake names its file, line and step.
func TestRateTimelineErrors(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"not a step", "  rate_timeline: [\"at 1s: fast\"]\n",
			`my.yaml:3: workload.rate_timeline[0]: cannot read rate step "at 1s: fast" (want "at <time>: <ops>/s [for <duration>]", e.g. "at 0.5s: 150/s for 2s")`},
		{"zero rate", "  rate_timeline:\n    - \"at 1s: 0/s\"\n",
			`my.yaml:4: workload.rate_timeline[0]: rate step "at 1s: 0/s": want ops per second > 0 such as 150/s, got "0/s"`},
		{"bad window", "  rate_timeline:\n    - \"at 1s: 10/s for ever\"\n",
			`my.yaml:4: workload.rate_timeline[0]: rate step "at 1s: 10/s for ever": want a window > 0 such as 2s after for, got "ever"`},
		{"out of order", "  rate_timeline:\n    - \"at 2s: 10/s\"\n    - \"at 1s: 20/s\"\n",
			`my.yaml:5: workload.rate_timeline[1]: "at 1s: 20/s" must start after the step before it ("at 2s: 10/s"): steps are in time order`},
		{"overlapping", "  rate_timeline:\n    - \"at 1s: 10/s for 3s\"\n    - \"at 2s: 20/s\"\n",
			`my.yaml:5: workload.rate_timeline[1]: "at 2s: 20/s" starts before the step before it ("at 1s: 10/s for 3s") ends: steps must not overlap`},
		{"after the end", "  duration: 5s\n  rate_timeline:\n    - \"at 5s: 10/s\"\n",
			`my.yaml:5: workload.rate_timeline[0]: "at 5s: 10/s" starts at or after workload.duration (5s): it would never run`},
		{"a one-key mapping is read as its line", "  rate_timeline:\n    - {at: 1s}\n",
			`my.yaml:4: workload.rate_timeline[0]: cannot read rate step "at: 1s" (want "at <time>: <ops>/s [for <duration>]", e.g. "at 0.5s: 150/s for 2s")`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("my.yaml", []byte("broker: kafka\nworkload:\n"+tc.src))
			if got := errLines(err); !slices.Equal(got, []string{tc.want}) {
				t.Fatalf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), tc.want)
			}
		})
	}
}

// The backlog floor of the backpressure built-ins: a ceiling of 100
// events/s against 2 × 100/s for 1.5s leaves at least 150 events, 1.5s of
// work; a promise of 1s is known-bad as a setting (bad-backlog-age), one
// of 10s is not (rabbitmq-backpressure).
func TestBacklogAgeFloor(t *testing.T) {
	const src = "broker: rabbitmq\nworkload:\n  rate: 20\n  rate_timeline: [\"at 0.5s: 100/s for 1.5s\"]\n  consumer_work: 10ms\n  consumer_batch: 1\n"
	for age, bad := range map[string]bool{"10s": false, "1s": true} {
		s, err := Parse("bp.yaml", []byte(src+"guarantees: {preset: effectively-once, max-backlog-age: "+age+"}\n"))
		if err != nil {
			t.Fatal(err)
		}
		if got := s.backlogAgeFloor(); got != 1500*time.Millisecond {
			t.Errorf("max-backlog-age %s: floor %s, want 1.5s", age, got)
		}
		if s.KnownBad() != bad {
			t.Errorf("max-backlog-age %s: known-bad %v", age, s.KnownBad())
		}
		s.Workload.ConsumerBatch = 0 // 100 per transaction: no ceiling known
		if s.backlogAgeFloor() != 0 || s.KnownBad() {
			t.Errorf("batched: floor %s, known-bad %v", s.backlogAgeFloor(), s.KnownBad())
		}
	}
}

// --set takes a rate timeline as a list, like any list field: steps
// separated by commas or semicolons.
func TestSetRateTimeline(t *testing.T) {
	s, err := Parse("bp.yaml", []byte("broker: kafka\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Set("workload.rate_timeline", "at 1s: 150/s for 2s; at 5s: 80/s"); err != nil {
		t.Fatal(err)
	}
	want := []RateStep{{At: time.Second, Rate: 150, For: 2 * time.Second}, {At: 5 * time.Second, Rate: 80}}
	if !slices.Equal(s.Workload.RateTimeline, want) {
		t.Errorf("steps %+v", s.Workload.RateTimeline)
	}
	if err := s.Set("workload.rate_timeline", "at 1s: fast"); err == nil || !strings.Contains(err.Error(), "cannot read rate step") {
		t.Errorf("bad step: %v", err)
	}
}
