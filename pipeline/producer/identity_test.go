package producer

import "testing"

// TestSourcesShareIDs: with several sources, ops take them in turn and
// each round shares one id, so every id occurs once under each source.
func TestSourcesShareIDs(t *testing.T) {
	p, err := New(Config{Variant: Outbox, Sources: []string{"/orders", "/returns"}, Seed: 1}, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[[2]string]bool{}
	ids := map[string]int{}
	for i := range 10 {
		src, id := p.nextIdentity()
		if want := p.cfg.Sources[i%2]; src != want {
			t.Fatalf("op %d from %s, want %s", i, src, want)
		}
		if seen[[2]string{src, id}] {
			t.Fatalf("op %d: (%s, %s) twice", i, src, id)
		}
		seen[[2]string{src, id}] = true
		ids[id]++
	}
	if len(ids) != 5 {
		t.Fatalf("%d ids for 10 ops over 2 sources, want 5: %v", len(ids), ids)
	}
	for id, n := range ids {
		if n != 2 {
			t.Errorf("id %s under %d sources, want 2", id, n)
		}
	}
	one, _ := New(Config{Variant: Outbox}, nil, nil, nil, nil)
	s1, a := one.nextIdentity()
	s2, b := one.nextIdentity()
	if s1 != DefaultSource || s2 != DefaultSource || a == b {
		t.Fatalf("one source: (%s, %s), (%s, %s); want %s and two ids", s1, a, s2, b, DefaultSource)
	}
}
