package runner

import (
	"slices"
	"testing"

	"github.com/deliverycheck/deliverycheck/checker"
	"github.com/deliverycheck/deliverycheck/cluster"
)

// The checker tells server nodes from workers by the servers' names: it
// must know every server a run can provision.
func TestCheckerKnowsTheServers(t *testing.T) {
	if got, want := slices.Sorted(slices.Values(checker.Servers)), slices.Sorted(slices.Values(cluster.Names())); !slices.Equal(got, want) {
		t.Errorf("checker.Servers = %v, cluster.Names() = %v", got, want)
	}
}
