package failpoint

import (
	"fmt"
	"testing"
)

func TestParseRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Term
		out  string
	}{
		{"relay.before-publish", Term{RelayBeforePublish, 1, 1}, "relay.before-publish=kill(once)"},
		{"relay.before-publish=kill(once)", Term{RelayBeforePublish, 1, 1}, "relay.before-publish=kill(once)"},
		{"consumer.after-commit-before-ack=kill(3)", Term{ConsumerAfterCommitBeforeAck, 3, 1}, "consumer.after-commit-before-ack=kill(3)"},
		{"producer.after-commit=kill(0.25)", Term{ProducerAfterCommit, -1, 0.25}, "producer.after-commit=kill(0.25)"},
		{"producer.after-commit=kill(always)", Term{ProducerAfterCommit, -1, 1}, "producer.after-commit=kill(always)"},
		{"producer.after-commit=off", Term{ProducerAfterCommit, 0, 1}, "producer.after-commit=off"},
	} {
		got, err := Parse(tc.in)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.in, err)
		}
		if got != tc.want {
			t.Errorf("Parse(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
		if got.String() != tc.out {
			t.Errorf("Parse(%q).String() = %q, want %q", tc.in, got.String(), tc.out)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, in := range []string{"", "relay.nope", "relay.before-publish=panic", "relay.before-publish=kill(0)", "relay.before-publish=kill(1.5)", "relay.before-publish=kill(x"} {
		if _, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) succeeded", in)
		}
	}
}

func TestHitFiresAsArmed(t *testing.T) {
	var fired []any
	s := NewSet(1, func(n Name, ctx any) { fired = append(fired, ctx) })
	s.Hit(RelayBeforePublish, "not armed")
	s.Arm(Term{Name: RelayBeforePublish, Count: 2, Prob: 1})
	for i := range 5 {
		s.Hit(RelayBeforePublish, i)
	}
	if len(fired) != 2 || fired[0] != 0 || fired[1] != 1 {
		t.Fatalf("fired %v, want [0 1]", fired)
	}
	if len(s.Armed()) != 0 {
		t.Fatalf("still armed after count ran out: %v", s.Armed())
	}
}

func TestProbabilityIsSeeded(t *testing.T) {
	count := func() int {
		n := 0
		s := NewSet(7, func(Name, any) { n++ })
		s.Arm(Term{Name: ProducerAfterCommit, Count: -1, Prob: 0.3})
		for range 1000 {
			s.Hit(ProducerAfterCommit, nil)
		}
		return n
	}
	a, b := count(), count()
	if a != b {
		t.Fatalf("same seed, different firings: %d vs %d", a, b)
	}
	if a < 200 || a > 400 {
		t.Fatalf("p=0.3 fired %d/1000", a)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"relay.before-publish=kill(once)", "producer.after-commit=kill(0.5)", "x=kill(3)", "after-commit_2=kill(always)", "a b=off"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		// Both parsers round-trip what they accept; a built-in term is
		// also a term for any name.
		for _, parse := range []func(string) (Term, error){Parse, ParseAny} {
			term, err := parse(s)
			if err != nil {
				continue
			}
			again, err := parse(term.String())
			if err != nil || again != term {
				t.Fatalf("%q → %+v → %q → %+v, %v", s, term, term.String(), again, err)
			}
		}
		if term, err := Parse(s); err == nil {
			if anyTerm, err := ParseAny(s); err != nil || anyTerm != term {
				t.Fatalf("%q: Parse gives %+v, ParseAny %+v, %v", s, term, anyTerm, err)
			}
		}
	})
}

// A zombie pause fires once, at its failpoint only, before any kill term
// there, and leaves the set a zombie; disarmed, it never fires.
func TestZombiePause(t *testing.T) {
	for _, tc := range []struct {
		name   string
		arm    Name
		paused []any
	}{
		{"armed", ProcessorAfterProduceBeforeCommit, []any{1}},
		{"disarmed", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var paused, crashed []any
			s := NewSet(1, func(n Name, ctx any) { crashed = append(crashed, ctx) })
			s.ArmZombie(tc.arm, func(n Name, ctx any) {
				if !s.Zombie() {
					t.Error("not a zombie while paused")
				}
				paused = append(paused, ctx)
			})
			s.Hit(ProcessorAfterCommitBeforePoll, 0)
			for i := 1; i <= 3; i++ {
				s.Hit(ProcessorAfterProduceBeforeCommit, i)
			}
			if fmt.Sprint(paused) != fmt.Sprint(tc.paused) || len(crashed) != 0 {
				t.Errorf("paused %v, crashed %v; want paused %v", paused, crashed, tc.paused)
			}
			if s.Zombie() != (tc.paused != nil) {
				t.Errorf("Zombie() = %v", s.Zombie())
			}
		})
	}
	var nilSet *Set
	nilSet.Hit(ProcessorAfterProduceBeforeCommit, nil)
	if nilSet.Zombie() {
		t.Error("a nil set is a zombie")
	}
}
