package choice

import "testing"

func TestParse(t *testing.T) {
	type color string
	valid := []color{"red", "green"}
	if c, err := Parse("green", valid, "paint: unknown color"); err != nil || c != "green" {
		t.Fatalf("Parse(green) = %q, %v", c, err)
	}
	for _, s := range []string{"", "blue", "Red"} {
		c, err := Parse(s, valid, "paint: unknown color")
		want := `paint: unknown color "` + s + `" (valid: red, green)`
		if err == nil || err.Error() != want || c != "" {
			t.Errorf("Parse(%q) = %q, %v; want the error %s", s, c, err, want)
		}
	}
}
