// Package failpoint names the crash windows of the pipeline and lets a
// harness arm one in a running worker, which then kills itself exactly
// there.
//
// A failpoint is a named place in the code (see the Name constants): the
// worker calls [Set.Hit] there, and when an armed [Term] fires the worker's
// crash function runs (it records what was in flight, then SIGKILLs the
// process, so the kernel closes its sockets and its memory is gone). Terms
// are written gofail-style: "consumer.after-commit-before-ack=kill(once)",
// "=kill(3)" (the next 3 hits), "=kill(0.2)" (each hit with probability
// 0.2), "=kill(always)", or "=off".
//
// A team's own component, in Go, calls [Inject] instead: a client of the
// endpoint the harness serves it ([EnvEndpoint]), where the harness keeps
// its armed terms and does the killing. docs/contract.md gives the same
// client in Java, Node.js and Python.
package failpoint

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/deliverycheck/deliverycheck/internal/choice"
)

// Name is a failpoint: <component>.<window>.
type Name string

// Every failpoint the pipeline has, as DESIGN.md names them.
const (
	// ProducerAfterCommit: the client never learns its commit happened
	// (an indeterminate op).
	ProducerAfterCommit Name = "producer.after-commit"
	// RelayBeforePublish: nothing is lost, the row is still unpublished.
	RelayBeforePublish Name = "relay.before-publish"
	// RelayAfterPublishBeforeMark: the relay republishes; duplicates
	// must not become duplicate effects.
	RelayAfterPublishBeforeMark Name = "relay.after-publish-before-mark"
	// ConsumerAfterEffectBeforeCommit: the tx aborts; neither the effect
	// nor the inbox mark may survive.
	ConsumerAfterEffectBeforeCommit Name = "consumer.after-effect-before-commit"
	// ConsumerAfterCommitBeforeAck: redelivery of an applied event.
	ConsumerAfterCommitBeforeAck Name = "consumer.after-commit-before-ack"
	// ConsumerAfterAckBeforeCommit: only reachable in ack-first
	// variants, where it loses the event.
	ConsumerAfterAckBeforeCommit Name = "consumer.after-ack-before-commit"
	// ProcessorAfterProduceBeforeCommit: the transactional processor
	// dies with its transaction open; its restart (same
	// transactional.id) fences it and aborts it, and reads its inputs
	// again.
	ProcessorAfterProduceBeforeCommit Name = "processor.after-produce-before-commit"
	// ProcessorAfterCommitBeforePoll: the processor dies right after a
	// commit; its restart must go on from the committed offsets,
	// neither repeating nor skipping an input.
	ProcessorAfterCommitBeforePoll Name = "processor.after-commit-before-poll"
	// RedriveAfterPublishBeforeAck: the redriver dies after republishing
	// a dead letter and before removing it from the dead-letter queue;
	// its restart republishes it, which the inbox must dedupe.
	RedriveAfterPublishBeforeAck Name = "redrive.after-publish-before-ack"
)

// All lists every failpoint, sorted.
func All() []Name {
	return []Name{
		ConsumerAfterAckBeforeCommit,
		ConsumerAfterCommitBeforeAck,
		ConsumerAfterEffectBeforeCommit,
		ProcessorAfterCommitBeforePoll,
		ProcessorAfterProduceBeforeCommit,
		ProducerAfterCommit,
		RedriveAfterPublishBeforeAck,
		RelayAfterPublishBeforeMark,
		RelayBeforePublish,
	}
}

// Component is the part before the dot: "producer", "relay", "consumer"
// or "processor".
func (n Name) Component() string {
	c, _, _ := strings.Cut(string(n), ".")
	return c
}

// ParseName checks that s names a failpoint and lists the valid ones if not.
func ParseName(s string) (Name, error) {
	return choice.Parse(s, All(), "failpoint: unknown failpoint")
}

// EnvHitsFD names the environment variable holding the file descriptor
// (a pipe to the harness's supervisor) on which [ReportHit] announces a
// failpoint that fired. The supervisor sets it for every worker it starts.
const EnvHitsFD = "DELIVERYCHECK_FAILPOINT_HITS_FD"

// ReportHit tells the harness that failpoint n fired in this process,
// with the line "hit <n>" on the pipe EnvHitsFD names, so a nemesis that
// armed n learns during the run that its fault bit. A crash function
// calls it just before killing the process; the pipe keeps the line
// after the writer is dead. It does nothing when the variable is unset
// or its descriptor is not a pipe (a process started some other way,
// which may use that descriptor for something else).
func ReportHit(n Name) { report("hit " + string(n)) }

// report writes line to the pipe EnvHitsFD names, if any.
func report(line string) {
	fd, err := strconv.Atoi(os.Getenv(EnvHitsFD))
	if err != nil || fd < 3 {
		return
	}
	var st syscall.Stat_t
	if syscall.Fstat(fd, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		return
	}
	// A raw write, not an *os.File: its finalizer would close the
	// descriptor under a later call.
	_, _ = syscall.Write(fd, []byte(line+"\n"))
}

// Note tells the harness something during the run, with the line
// "note <text>" on the pipe [ReportHit] writes to (newlines in text
// become spaces): how a process paused as a zombie says where it
// stopped, and how its late transaction ended (the nemesis's zombie
// fault reads both for its evidence). Like ReportHit it does nothing
// outside a supervised worker.
func Note(text string) {
	report("note " + strings.ReplaceAll(text, "\n", " "))
}

// Term is an armed failpoint: where, and when it fires.
type Term struct {
	Name Name
	// Count is how many more hits fire; -1 means every hit (subject to
	// Prob). 0 means off.
	Count int
	// Prob is the chance each hit fires, in (0, 1]; 1 when not given.
	Prob float64
}

// String renders t gofail-style, e.g. "relay.before-publish=kill(once)".
func (t Term) String() string {
	var arg string
	switch {
	case t.Count == 0:
		return string(t.Name) + "=off"
	case t.Prob < 1:
		arg = strconv.FormatFloat(t.Prob, 'g', -1, 64)
	case t.Count < 0:
		arg = "always"
	case t.Count == 1:
		arg = "once"
	default:
		arg = strconv.Itoa(t.Count)
	}
	return string(t.Name) + "=kill(" + arg + ")"
}

// Parse reads a term such as "consumer.after-commit-before-ack=kill(once)"
// for one of the pipeline's own failpoints. A bare name means kill(once).
func Parse(s string) (Term, error) {
	return parse(s, ParseName)
}

// ParseAny reads a term for any failpoint name, such as a team's own
// "after-commit-before-ack=kill(2)": names are letters, digits, '.', '-'
// and '_'.
func ParseAny(s string) (Term, error) {
	return parse(s, func(name string) (Name, error) {
		if err := checkName(name); err != nil {
			return "", err
		}
		return Name(name), nil
	})
}

// checkName accepts names an env var, a file line and a YAML key all carry
// unchanged.
func checkName(name string) error {
	if name == "" {
		return fmt.Errorf("failpoint: empty name")
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return fmt.Errorf("failpoint: bad name %q (use letters, digits, '.', '-' and '_')", name)
		}
	}
	return nil
}

func parse(s string, parseName func(string) (Name, error)) (Term, error) {
	name, action, hasAction := strings.Cut(strings.TrimSpace(s), "=")
	n, err := parseName(name)
	if err != nil {
		return Term{}, err
	}
	t := Term{Name: n, Count: 1, Prob: 1}
	if !hasAction {
		return t, nil
	}
	if action == "off" {
		t.Count = 0
		return t, nil
	}
	arg, ok := strings.CutPrefix(action, "kill(")
	if !ok || !strings.HasSuffix(arg, ")") {
		return Term{}, fmt.Errorf("failpoint: bad action %q in %q (want kill(once), kill(N), kill(P) with 0<P<1, kill(always) or off)", action, s)
	}
	arg = strings.TrimSuffix(arg, ")")
	switch {
	case arg == "once" || arg == "":
		t.Count = 1
	case arg == "always":
		t.Count = -1
	case strings.Contains(arg, "."):
		p, err := strconv.ParseFloat(arg, 64)
		if err != nil || p <= 0 || p > 1 {
			return Term{}, fmt.Errorf("failpoint: bad probability %q in %q (want 0 < P <= 1)", arg, s)
		}
		t.Count, t.Prob = -1, p
	default:
		c, err := strconv.Atoi(arg)
		if err != nil || c < 1 {
			return Term{}, fmt.Errorf("failpoint: bad count %q in %q (want a positive integer)", arg, s)
		}
		t.Count = c
	}
	return t, nil
}

// ReadState reads a state file: the terms still armed in a built-in
// worker, one per line, as [Term.String] writes them, which its next
// incarnation reloads. A missing file is no terms.
// Terms are read with [ParseAny], so a state file can hold any name.
func ReadState(path string) ([]Term, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failpoint: state: %w", err)
	}
	var out []Term
	for i, l := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		t, err := ParseAny(l)
		if err != nil {
			return nil, fmt.Errorf("failpoint: state %s line %d: %w", path, i+1, err)
		}
		out = append(out, t)
	}
	return out, nil
}

// WriteState replaces a state file with terms. It writes a temporary file
// and renames it, so a reader sees the old terms or the new, never half.
func WriteState(path string, terms []Term) error {
	var b strings.Builder
	for _, t := range terms {
		if t.Count != 0 {
			b.WriteString(t.String() + "\n")
		}
	}
	tmp := path + ".tmp" + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("failpoint: state: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("failpoint: state: %w", err)
	}
	return nil
}

// Set is the failpoints armed in one process. Its zero value is not
// usable; create one with [NewSet].
type Set struct {
	mu    sync.Mutex
	armed map[Name]*Term
	rng   *rand.Rand
	crash func(n Name, ctx any)
	// zombieAt is the failpoint a zombie pause is armed at ("": none);
	// zombie is set once it fired; pause stops the process there.
	zombieAt Name
	zombie   bool
	pause    func(n Name, ctx any)
}

// NewSet returns a set with nothing armed. crash runs when an armed
// failpoint fires, with the name and the caller's context (typically the
// event in flight); in a worker it records that and kills the process, so
// it does not return. seed makes probabilistic terms reproducible.
func NewSet(seed uint64, crash func(n Name, ctx any)) *Set {
	return &Set{armed: map[Name]*Term{}, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), crash: crash}
}

// Arm arms (or, with Count 0, disarms) t.Name, replacing any earlier term.
func (s *Set) Arm(t Term) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.Count == 0 {
		delete(s.armed, t.Name)
		return
	}
	if t.Prob == 0 {
		t.Prob = 1
	}
	s.armed[t.Name] = &t
}

// Armed returns the armed terms, sorted by name.
func (s *Set) Armed() []Term {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Term, 0, len(s.armed))
	for _, t := range s.armed {
		out = append(out, *t)
	}
	slices.SortFunc(out, func(a, b Term) int { return strings.Compare(string(a.Name), string(b.Name)) })
	return out
}

// Hit marks that the code reached failpoint n with ctx in flight. If a
// zombie pause is armed there, the pause function runs (see ArmZombie);
// if a term armed there fires, the crash function runs (and in a worker
// never returns). Hit is cheap when nothing is armed.
func (s *Set) Hit(n Name, ctx any) {
	if s == nil {
		return
	}
	if s.takeZombie(n) {
		s.pause(n, ctx)
	}
	if s.Take(n) {
		s.crash(n, ctx)
	}
}

// ArmZombie arms a one-shot zombie pause at failpoint n in this process
// alone (it is not a Term: no state file carries it to a restart): the
// next hit of n calls pause, which stops the process there (SIGSTOP of
// itself, in a worker) until the harness resumes it, and from then on
// [Set.Zombie] is true. The nemesis's zombie fault replaces the process
// while it is stopped; resumed, it finishes the step in hand, its late
// write, and exits for good. An empty n disarms it.
func (s *Set) ArmZombie(n Name, pause func(n Name, ctx any)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.zombieAt, s.pause = n, pause
}

// Zombie reports whether a zombie pause armed by ArmZombie has fired in
// this process: it was replaced while paused, and must stop working once
// the step in hand is done.
func (s *Set) Zombie() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.zombie
}

func (s *Set) takeZombie(n Name) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.zombieAt == "" || s.zombieAt != n || s.pause == nil {
		return false
	}
	s.zombieAt, s.zombie = "", true
	return true
}

// Take reports whether a hit of failpoint n fires now, and counts it
// against its term, without calling the crash function: the harness's
// endpoint decides for a process in another language, and does the
// killing itself. A nil Set never fires.
func (s *Set) Take(n Name) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.armed[n]
	if !ok || !(t.Prob >= 1 || s.rng.Float64() < t.Prob) {
		return false
	}
	if t.Count > 0 {
		t.Count--
		if t.Count == 0 {
			delete(s.armed, n)
		}
	}
	return true
}
