package cluster

import (
	"context"
	"errors"
	"testing"
)

// bare is a service with the core only, as an external runtime's would
// be: nothing to kill, pause or restart.
type bare struct{ name string }

func (b bare) Name() string              { return b.name }
func (bare) Start(context.Context) error { return nil }
func (bare) Stop(context.Context) error  { return nil }
func (bare) Endpoint() string            { return "127.0.0.1:1" }
func (bare) Close() error                { return nil }

// able has every ability.
type able struct{ bare }

func (able) Kill(context.Context) error    { return nil }
func (able) Pause(context.Context) error   { return nil }
func (able) Resume(context.Context) error  { return nil }
func (able) Restart(context.Context) error { return nil }
func (able) Version() string               { return "Test 1.0" }

func TestAbilitiesAreAskedFor(t *testing.T) {
	c := &Cluster{runtime: "external", services: map[string]Service{
		Kafka:    bare{Kafka},
		Postgres: able{bare{Postgres}},
	}}
	for _, tc := range []struct {
		get  func(string) error
		want string
	}{
		{func(n string) error { _, err := c.Killer(n); return err }, "service kafka cannot be killed on runtime external"},
		{func(n string) error { _, err := c.Pauser(n); return err }, "service kafka cannot be paused on runtime external"},
		{func(n string) error { _, err := c.Restarter(n); return err }, "service kafka cannot be restarted on runtime external"},
	} {
		err := tc.get(Kafka)
		if err == nil || err.Error() != tc.want {
			t.Errorf("got %v, want %q", err, tc.want)
		}
		if !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("%v is not errors.ErrUnsupported", err)
		}
		var ue *UnsupportedError
		if !errors.As(err, &ue) || ue.Service != Kafka || ue.Runtime != "external" {
			t.Errorf("%v: not an *UnsupportedError for kafka on external: %+v", err, ue)
		}
		if err := tc.get(Postgres); err != nil {
			t.Errorf("a service with the ability: %v", err)
		}
		if err := tc.get(RabbitMQ); err == nil || errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("a service the cluster does not run: %v, want a plain error", err)
		}
	}
	if got := c.Versions(); len(got) != 1 || got[Postgres] != "Test 1.0" {
		t.Errorf("Versions = %v", got)
	}
}
