package maven

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// cacheIn points os.UserCacheDir at a temp dir and returns Root.
func cacheIn(t *testing.T) string {
	t.Helper()
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func TestJarsUsesWhatIsCached(t *testing.T) {
	root := cacheIn(t)
	dir, ok := JarsStatus("tool-1")
	if ok || dir != filepath.Join(root, "tool-1", "libs") {
		t.Fatalf("JarsStatus of an empty cache = %q, %v", dir, ok)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, ok := JarsStatus("tool-1"); ok {
		t.Fatal("an empty libs dir counts as fetched")
	}
	if err := os.WriteFile(filepath.Join(dir, "a.jar"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// No pom: a fetch would fail, so this proves Jars did not fetch.
	got, err := Jars(context.Background(), "tool-1", nil)
	if err != nil || got != dir {
		t.Fatalf("Jars = %q, %v; want %q", got, err, dir)
	}
}

func TestLockExcludesAndSweeps(t *testing.T) {
	root := cacheIn(t)
	stale := filepath.Join(root, "tool-1", ".fetch-123")
	if err := os.MkdirAll(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	unlock, err := Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("a dead holder's temp dir survived the lock: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := Lock(ctx); err == nil {
		t.Fatal("a second Lock got the lock while the first held it")
	}
	unlock()
	again, err := Lock(context.Background())
	if err != nil {
		t.Fatalf("Lock after unlock: %v", err)
	}
	again()
}
