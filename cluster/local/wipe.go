package local

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// wiped is what wiping a node's data dir removed, for the evidence.
type wiped struct {
	files int
	bytes int64
}

func (w wiped) String() string {
	return fmt.Sprintf("%d files, %.1f MiB removed", w.files, float64(w.bytes)/(1<<20))
}

// wipeDir removes everything in dir, leaving dir itself (its owner and
// mode are the node's), and counts what it removed: the empty disk a
// node replaced without its volume finds. A dir that does not exist is
// empty already.
func wipeDir(dir string) (wiped, error) {
	var w wiped
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) && path == dir {
				return filepath.SkipAll
			}
			return err
		}
		if d.Type().IsRegular() {
			w.files++
			if fi, err := d.Info(); err == nil {
				w.bytes += fi.Size()
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
