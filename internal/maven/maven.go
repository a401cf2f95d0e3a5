// Package maven is deliverycheck's per-user cache of jars fetched from
// Maven Central with mvn: the Kafka broker's (cluster/local) and Kafka
// Connect's with Debezium (pipeline/debezium).
//
// It lives under internal/ rather than in cluster/: the jars serve both
// the servers and a pipeline component, and a relay should not import a
// runtime to get them. Nothing outside deliverycheck needs it.
//
// Read [Jars] first. Every fetch goes to a temp dir that is renamed into
// place, under [Lock], so a fetch that fails or is interrupted never
// leaves half a cache behind and concurrent harnesses fetch once.
package maven

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/deliverycheck/deliverycheck/internal/logtail"
	"github.com/deliverycheck/deliverycheck/process"
)

// How to install what a fetch needs, for the errors that say it is missing
// (Debian's package names).
const (
	InstallJava  = "apt-get install -y openjdk-17-jre-headless"
	InstallMaven = "apt-get install -y maven"
)

// Root is the cache's directory, os.UserCacheDir()/deliverycheck, outside
// any work tree. Each entry is a directory in it; the local runtime also
// keeps what it builds from the broker's jars there, under the same [Lock].
func Root() (string, error) {
	c, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("maven: no cache dir: %w", err)
	}
	return filepath.Join(c, "deliverycheck"), nil
}

// Lock takes an exclusive lock on the cache (flock on a file in [Root]),
// so that concurrent harnesses (go test runs packages in parallel) fetch
// and build once and the others wait, instead of running mvn or a
// training broker twice on a small machine. It waits until it has the
// lock or ctx ends. Under the lock, the temp dirs a holder that died left
// in an entry (named .fetch-* or .build-*) are removed: only a holder
// makes them.
func Lock(ctx context.Context) (unlock func(), err error) {
	root, err := Root()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	// The name predates this package; kept so that a harness built before
	// it and one built after still take the same lock.
	f, err := os.OpenFile(filepath.Join(root, ".kafka.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("wait for another deliverycheck preparing the jar cache: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	stale, _ := filepath.Glob(filepath.Join(root, "*", ".fetch-*"))
	more, _ := filepath.Glob(filepath.Join(root, "*", ".build-*"))
	for _, d := range append(stale, more...) {
		os.RemoveAll(d)
	}
	return func() { f.Close() }, nil // closing the file drops the lock
}

// Fetch runs mvn on pom into a temp dir next to dest, copying the runtime
// dependencies, and renames it into place as dest. props are -D flags for
// mvn. The caller holds the [Lock].
func Fetch(ctx context.Context, pom []byte, dest string, props ...string) error {
	mvn, err := exec.LookPath("mvn")
	if err != nil {
		return fmt.Errorf("mvn not found on PATH (install with: %s)", InstallMaven)
	}
	if _, err := exec.LookPath("java"); err != nil {
		return fmt.Errorf("java not found on PATH (install with: %s)", InstallJava)
	}
	parent := filepath.Dir(dest)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(parent, ".fetch-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	pomPath := filepath.Join(tmp, "pom.xml")
	if err := os.WriteFile(pomPath, pom, 0o644); err != nil {
		return err
	}
	libs := filepath.Join(tmp, "libs")
	args := append([]string{"-B", "-q", "-f", pomPath, "dependency:copy-dependencies", "-DincludeScope=runtime", "-DoutputDirectory=" + libs}, props...)
	cmd := process.Command(ctx, mvn, args...) // mvn runs a JVM: the whole group goes on cancel
	cmd.Dir = tmp
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("mvn: %w\n%s", err, strings.Join(logtail.Lines(out, 30), "\n"))
	}
	return os.Rename(libs, dest)
}

// JarsStatus says where [Jars] keeps the jars of entry name and whether
// they are there. It never fetches (for `deliverycheck doctor`).
func JarsStatus(name string) (dir string, ok bool) {
	root, err := Root()
	if err != nil {
		return "", false
	}
	dir = filepath.Join(root, name, "libs")
	ents, err := os.ReadDir(dir)
	return dir, err == nil && len(ents) > 0
}

// Jars returns the cache directory of entry name ([Root]/<name>/libs)
// holding the runtime dependencies of pom, fetched with [Fetch] on first
// use. props are -D flags for mvn. Tools run next to the servers (Kafka
// Connect with Debezium) get their jars this way.
func Jars(ctx context.Context, name string, pom []byte, props ...string) (string, error) {
	if _, err := Root(); err != nil {
		return "", err
	}
	dir, ok := JarsStatus(name)
	if ok {
		return dir, nil
	}
	unlock, err := Lock(ctx)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	defer unlock()
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return dir, nil // fetched while we waited for the lock
	}
	if err := Fetch(ctx, pom, dir, props...); err != nil {
		return "", fmt.Errorf("%s: fetch jars: %w", name, err)
	}
	return dir, nil
}
