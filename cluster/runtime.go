package cluster

import (
	"context"
	"fmt"

	"github.com/deliverycheck/deliverycheck/cluster/containers"
)

// Runtime names.
const (
	// Local runs every server as a child process from the machine's own
	// packages (see cluster/local).
	Local = "local"
	// Containers runs every server in a container on Docker or Podman
	// (see cluster/containers).
	Containers = "containers"
	// Auto picks Containers when a healthy engine can provide every image,
	// else Local.
	Auto = "auto"
)

// Runtimes lists the runtime names a user may pass.
func Runtimes() []string { return []string{Auto, Local, Containers} }

// images is the image each named service would run on the containers
// runtime under cfg.
func images(cfg Config, names []string) []string {
	var out []string
	for _, n := range names {
		img := cfg.Images[n]
		if img == "" {
			img = containers.DefaultImage(n)
		}
		out = append(out, img)
	}
	return out
}

// ResolveRuntime turns "auto" into the runtime a run would use, and says
// why (for `deliverycheck doctor` and the run's log): the containers
// runtime when a container engine is healthy and can provide every image
// (present, or pullable from its registry), else the local one. Any
// other name is returned as it is.
func ResolveRuntime(ctx context.Context, runtime string, imgs []string) (string, string) {
	if runtime != Auto {
		return runtime, "chosen explicitly"
	}
	rt, why, _ := resolveAuto(ctx, imgs)
	return rt, why
}

// resolveAuto is "auto" resolved, with the engine it found when that is
// the containers runtime, so starting the runtime need not look again.
func resolveAuto(ctx context.Context, imgs []string) (string, string, *containers.Engine) {
	eng, err := containers.Detect(ctx)
	if err != nil {
		return Local, err.Error(), nil
	}
	if err := containers.CanProvide(ctx, eng, imgs); err != nil {
		return Local, fmt.Sprintf("%s is healthy, but %v", eng, err), nil
	}
	return Containers, fmt.Sprintf("%s is healthy and has every image", eng), &eng
}

// ImageList is the image of each named service on the containers
// runtime with the given overrides, in the order of names.
func ImageList(overrides map[string]string, names []string) []string {
	return images(Config{Images: overrides}, names)
}
