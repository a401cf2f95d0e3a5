package runner

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/scenarios"
)

// buildExample builds examples/consumer (with tags, if any) into a temp
// dir, as its Makefile would into bin/.
func buildExample(t *testing.T, tags string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "consumer")
	args := []string{"build", "-o", bin}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, ".")...)
	cmd.Dir = filepath.Join("..", "examples", "consumer")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the example consumer: %v\n%s", err, out)
	}
	return bin
}

// TestExampleConsumer runs the example team consumer end to end through
// its own scenario files, on each broker (the files say kafka; --set
// broker=rabbitmq is how a team would switch): the correct build comes out
// valid although its failpoints crashed it, the buggy build (no inbox
// check) is caught applying a redelivered event twice.
func TestExampleConsumer(t *testing.T) {
	shared.Get(t)
	bins := map[string]string{"": buildExample(t, ""), "buggy": buildExample(t, "buggy")}
	for _, br := range []string{"kafka", "rabbitmq"} {
		for _, tc := range []struct{ file, tags string }{{"scenario.yaml", ""}, {"scenario-buggy.yaml", "buggy"}} {
			t.Run(br+"/"+tc.file, func(t *testing.T) {
				s, err := scenarios.Load(filepath.Join("..", "examples", "consumer", tc.file))
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Set("broker", br); err != nil {
					t.Fatal(err)
				}
				s.System.Consumer.Command = []string{bins[tc.tags]}
				if err := s.Validate(); err != nil {
					t.Fatal(err)
				}
				out := t.TempDir()
				if os.Getenv("DELIVERYCHECK_KEEP") != "" {
					out = filepath.Join(os.TempDir(), "deliverycheck-example", br)
				}
				o := runScenario(t, s, 1, out)
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
				if s.Expect.Verdict == checker.Valid && r.Valid != checker.Valid {
					t.Errorf("correct build: %s", r.Valid)
				}
			})
		}
	}
}
