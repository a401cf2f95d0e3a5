package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/deliverycheck/deliverycheck/scenarios"
)

func TestListShowsTheCatalogue(t *testing.T) {
	var out bytes.Buffer
	cmd := newListCmd()
	cmd.SetOut(&out)
	cmd.SetArgs(nil)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if !strings.HasPrefix(lines[0], "NAME") || len(lines) != len(scenarios.Builtin())+1 {
		t.Fatalf("got %d lines:\n%s", len(lines), out.String())
	}
	for _, want := range []string{"bad-no-inbox", "rabbitmq", "invalid (duplicate-effect)", "order-confirmation"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, out.String())
		}
	}
}
