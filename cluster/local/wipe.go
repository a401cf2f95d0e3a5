package local

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Wiped is what wiping a node's data dir removed, for the evidence of a
// wipe on either runtime.
type Wiped struct {
	Files int
	Bytes int64
}

func (w Wiped) String() string {
	return fmt.Sprintf("%d files, %.1f MiB removed", w.Files, float64(w.Bytes)/(1<<20))
}

// wipeDir removes everything in dir, leaving dir itself (its owner and
// mode are the node's), and counts what it removed: the empty disk a
// node replaced without its volume finds. A dir that does not exist is
// empty already.
func wipeDir(dir string) (Wiped, error) {
	var w Wiped
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) && path == dir {
				return filepath.SkipAll
			}
			return err
		}
		if d.Type().IsRegular() {
			w.Files++
			if fi, err := d.Info(); err == nil {
				w.Bytes += fi.Size()
			}
		}
		return nil
	})
	if err != nil {
		return w, fmt.Errorf("wipe %s: %w", dir, err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		return w, fmt.Errorf("wipe %s: %w", dir, err)
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return w, fmt.Errorf("wipe %s: %w", dir, err)
		}
	}
	return w, nil
}
