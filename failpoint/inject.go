package failpoint

import (
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/deliverycheck/deliverycheck/history"
)

// EnvState names the state file of a process's armed failpoints, one term
// per line. The harness sets it for an external component and rewrites the
// file to arm it during a run; [Inject] reads it.
const EnvState = "DELIVERYCHECK_FAILPOINTS"

// recheck is how often Inject looks at the state file for new terms.
const recheck = 20 * time.Millisecond

// Inject marks a crash window in a team's own component, as etcd's gofail
// does: call it exactly where a crash matters, e.g.
//
//	tx.Commit(ctx)
//	failpoint.Inject("after-commit-before-ack")
//	msg.Ack()
//
// It is a no-op (one atomic load) unless the process runs under
// deliverycheck with EnvState set. When the harness has armed name, the
// process records a crash op naming it in its history (history.EnvFile)
// and kills itself with SIGKILL, so Inject does not return.
func Inject(name string) { InjectEvent(name, "") }

// InjectEvent is [Inject] naming the event in flight, which the crash op
// records, so the report can say which event the crash interrupted.
func InjectEvent(name, event string) {
	in := injectorOnce()
	if in == nil {
		return
	}
	in.hit(Name(name), event)
}

// The process-wide injector: Inject is a package function so a team can
// call it anywhere without plumbing, which is why this package keeps the
// one piece of process state it needs.
var (
	injectInit sync.Once
	injectPtr  atomic.Pointer[injector]
)

func injectorOnce() *injector {
	injectInit.Do(func() {
		if path := os.Getenv(EnvState); path != "" {
			injectPtr.Store(newInjector(path))
		}
	})
	return injectPtr.Load()
}

// injector reloads the state file when it changes, and persists what is
// left of a term before the process dies on it, so kill(2) means two
// crashes in all, not two per incarnation.
type injector struct {
	path string

	mu      sync.Mutex
	set     *Set
	checked time.Time
	mod     time.Time
	size    int64
	inode   uint64
}

func newInjector(path string) *injector {
	in := &injector{path: path}
	in.set = NewSet(uint64(time.Now().UnixNano()), in.crash)
	in.reloadLocked(true)
	return in
}

// reloadLocked re-reads the state file if it changed (or if force).
func (in *injector) reloadLocked(force bool) {
	now := time.Now()
	if !force && now.Sub(in.checked) < recheck {
		return
	}
	in.checked = now
	fi, err := os.Stat(in.path)
	if err != nil {
		return
	}
	var ino uint64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
	}
	if !force && fi.ModTime().Equal(in.mod) && fi.Size() == in.size && ino == in.inode {
		return
	}
	terms, err := ReadState(in.path)
	if err != nil {
		return
	}
	in.mod, in.size, in.inode = fi.ModTime(), fi.Size(), ino
	for _, t := range in.set.Armed() {
		in.set.Arm(Term{Name: t.Name})
	}
	for _, t := range terms {
		in.set.Arm(t)
	}
}

func (in *injector) hit(n Name, event string) {
	in.mu.Lock()
	in.reloadLocked(false)
	in.mu.Unlock()
	in.set.Hit(n, event)
}

// crash runs when an armed term fires: save what is left, record, die.
func (in *injector) crash(n Name, ctx any) {
	_ = WriteState(in.path, in.set.Armed())
	ReportHit(n)
	if rec, err := history.OpenFromEnv(); err == nil && rec != nil {
		event, _ := ctx.(string)
		_, _ = rec.Record(history.Info, history.Crash, history.Value{
			Event: event, Target: os.Getenv(history.EnvProcess), Detail: "failpoint " + string(n),
		})
		_ = rec.Close()
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way; nothing after a failpoint may run
}
