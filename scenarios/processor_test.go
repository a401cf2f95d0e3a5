package scenarios

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/deliverycheck/deliverycheck/checker"
)

// examples/processor's scenarios load, run the team's processor as
// processor-0 with the failpoints it declares, and resolve its directory
// against the file's.
func TestExampleProcessorScenariosLoad(t *testing.T) {
	for _, f := range []string{"processor/scenario.yaml", "processor/scenario-buggy.yaml", "consumer-node/scenario-processor.yaml", "consumer-node/scenario-processor-buggy.yaml"} {
		s, err := Load(filepath.Join("..", "examples", f))
		if err != nil {
			t.Fatal(err)
		}
		cfg := s.PipelineConfig()
		p := cfg.System.Processor
		if p == nil || cfg.Stage == nil {
			t.Fatalf("%s: system = %+v, stage = %+v", f, cfg.System, cfg.Stage)
		}
		want, _ := filepath.Abs(filepath.Join("..", "examples", filepath.Dir(f)))
		if p.Dir != want {
			t.Errorf("%s: dir = %q, want %q", f, p.Dir, want)
		}
		if fps := s.TeamFailpoints()["processor-0"]; len(fps) != 2 {
			t.Errorf("%s: team failpoints = %q", f, fps)
		}
	}
	for _, f := range []string{"processor/scenario-buggy.yaml", "consumer-node/scenario-processor-buggy.yaml"} {
		bad, err := Load(filepath.Join("..", "examples", f))
		if err != nil {
			t.Fatal(err)
		}
		if bad.Expect.Verdict != checker.Invalid || bad.Expect.Anomaly != checker.OutputDuplicate {
			t.Errorf("%s: expect = %+v", f, bad.Expect)
		}
	}
}

func TestProcessorErrors(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{
			name: "a processor without a stage",
			yaml: "broker: kafka\nsystem:\n  processor:\n    command: [./p]\n",
			want: []string{"my.yaml:4: system.processor: replaces the processors of the transactional stage, and the scenario has no stage section"},
		},
		{
			name: "a processor on RabbitMQ",
			yaml: "broker: rabbitmq\nsystem:\n  processor:\n    command: [./p]\n",
			want: []string{"my.yaml:4: system.processor: a processor is the transactional stage's, and the stage is Kafka's"},
		},
		{
			name: "a processor and a built-in processor variant",
			yaml: "broker: kafka\nstage:\n  processor: offsets-after\nsystem:\n  processor:\n    command: [./p]\n",
			want: []string{"my.yaml:3: stage.processor: system.processor replaces the built-in processor; drop stage.processor (offsets-after)"},
		},
		{
			name: "a processor and the built-in processor's database effect",
			yaml: "broker: kafka\nstage:\n  effect: plain\nsystem:\n  processor:\n    command: [./p]\n",
			want: []string{"my.yaml:3: stage.effect: the database effect is the built-in processor's (a team's processor cannot be told to write it): drop stage.effect (plain)"},
		},
		{
			name: "a processor without its command",
			yaml: "broker: kafka\nstage: {processors: 1}\nsystem:\n  processor:\n    failpoints: [x]\n",
			want: []string{"system.processor.command: missing"},
		},
		{
			name: "a team processor's undeclared failpoint",
			yaml: "broker: kafka\nstage: {processors: 1}\nsystem:\n  processor:\n    command: [./p]\n    failpoints: [processor.after-commit-before-poll]\nnemesis:\n  failpoints:\n    processor-0: processor.after-comit-before-poll=kill(1)\n",
			want: []string{"nemesis.failpoints.processor-0: processor-0 declares no failpoint \"processor.after-comit-before-poll\"; did you mean processor.after-commit-before-poll?"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("my.yaml", []byte(tt.yaml))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%v\nwant it to contain\n%s", err, w)
				}
			}
		})
	}
}

// A team's processor may mark any failpoint it declares, and the
// timeline and the random schedule act on processor-N as on the built-in.
func TestProcessorTeamFailpoints(t *testing.T) {
	s, err := Parse("my.yaml", []byte("broker: kafka\nstage: {processors: 2}\nsystem:\n  processor:\n    command: [./p]\n    failpoints: [before-commit]\nnemesis:\n  timeline: [\"at 1s: failpoint processor-* before-commit=kill(1)\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := s.TeamFailpoints()
	if !slices.Equal(got["processor-0"], []string{"before-commit"}) || !slices.Equal(got["processor-1"], []string{"before-commit"}) {
		t.Errorf("team failpoints = %v", got)
	}
}
