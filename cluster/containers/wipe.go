package containers

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/deliverycheck/deliverycheck/cluster/local"
)

// A wipe on the containers runtime (cluster.Wiper) is a pod rescheduled
// without its volume, as literally as an engine allows: the node's
// server container is killed and removed, writable layer and anonymous
// volumes with it, and the next start creates a new container from the
// image with the same name, configuration and holder. The holder keeps
// the node's address, host name and fault rules, as a pod's network
// outlives a container restart. The new container's entrypoint finds an
// empty data dir and does what it does on a first boot (Kafka formats its
// storage; RabbitMQ makes a new database), and each node type then
// rejoins its cluster as the local runtime's nodes do.

// discarded is what discard found and did, for a wipe's evidence.
type discarded struct {
	what  string            // "killed (signal: killed)", or "was down"
	disk  local.Wiped       // the regular files under the data dir, and their size
	files map[string]string // the text of the data dir's files asked for, by base name
}

// discard kills the container (if it runs), reads what its data dir held
// (the engine copies it out of the stopped container: no exec needed, so
// the kill comes first, as a crash does), keeps its output so far for
// LogFile, then removes it. The Service then has no container, and its
// next Start creates one afresh. keep names files of the data dir whose
// text the caller wants (Kafka's meta.properties, for the directory id).
func (s *Service) discard(ctx context.Context, dataDir string, keep ...string) (discarded, error) {
	d := discarded{what: "was down", files: map[string]string{}}
	id, err := s.containerID()
	if err != nil {
		return d, fmt.Errorf("wipe %s: %w", s.name, err)
	}
	if st, err := s.state(ctx); err == nil && st.Running {
		if err := s.Kill(ctx); err != nil {
			return d, fmt.Errorf("wipe %s: %w", s.name, err)
		}
		d.what = "killed (" + s.ExitStatus() + ")"
	}
	if d.disk, err = s.readDisk(ctx, id, dataDir, keep, d.files); err != nil {
		return d, fmt.Errorf("wipe %s: %w", s.name, err)
	}
	if err := s.keepLogs(ctx, id); err != nil {
		s.log.Warn("keep the logs of a wiped container", "err", err)
	}
	err = s.rt.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !client.IsErrNotFound(err) {
		return d, fmt.Errorf("wipe %s: remove container: %w", s.name, err)
	}
	s.mu.Lock()
	s.id = ""
	s.mu.Unlock()
	if err := s.rt.g.UntrackContainer(id); err != nil {
		return d, fmt.Errorf("wipe %s: %w", s.name, err)
	}
	s.log.Info("wiped", "container", shortID(id), "removed", d.disk.String())
	return d, nil
}

// readDisk counts the regular files under dir in container id (stopped
// or not) and their bytes, and fills texts with the contents of the
// files named in keep. A dir that does not exist is an empty disk.
func (s *Service) readDisk(ctx context.Context, id, dir string, keep []string, texts map[string]string) (local.Wiped, error) {
	var w local.Wiped
	rc, _, err := s.rt.cli.CopyFromContainer(ctx, id, dir)
	if err != nil {
		if client.IsErrNotFound(err) || strings.Contains(err.Error(), "no such file") {
			return w, nil
		}
		return w, fmt.Errorf("read %s: %w", dir, err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return w, nil
		}
		if err != nil {
			return w, fmt.Errorf("read %s: %w", dir, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		w.Files++
		w.Bytes += h.Size
		for _, k := range keep {
			if path.Base(h.Name) == k {
				b, err := io.ReadAll(io.LimitReader(tr, 1<<16))
				if err != nil {
					return w, fmt.Errorf("read %s: %w", h.Name, err)
				}
				texts[k] = string(b)
			}
		}
	}
}

// earlierLog is where the output of the service's wiped containers is
// kept, oldest first; LogFile puts it before the current container's.
func (s *Service) earlierLog() string {
	return filepath.Join(s.dir, s.name+".earlier.log")
}

// keepLogs appends container id's output to earlierLog, with a line
// saying where it ends.
func (s *Service) keepLogs(ctx context.Context, id string) error {
	f, err := os.OpenFile(s.earlierLog(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if err := s.copyLogs(ctx, id, f); err != nil {
		f.Close()
		return err
	}
	if _, err := fmt.Fprintf(f, "--- deliverycheck: container %s wiped (removed); a new one follows ---\n", shortID(id)); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// shortID is a container id as the engines print it.
func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
