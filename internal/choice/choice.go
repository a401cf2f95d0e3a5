// Package choice checks a name that must be one of a closed set (a
// variant, a fault, a kind), so every such parser says the same thing
// when it is not: what was given and every valid name.
package choice

import (
	"fmt"
	"slices"
	"strings"
)

// Parse returns s as a T if it is one of valid, or else an error that
// starts with unknown ("consumer: unknown variant") and then quotes s and
// lists the valid names in order.
func Parse[T ~string](s string, valid []T, unknown string) (T, error) {
	if slices.Contains(valid, T(s)) {
		return T(s), nil
	}
	names := make([]string, len(valid))
	for i, v := range valid {
		names[i] = string(v)
	}
	return "", fmt.Errorf("%s %q (valid: %s)", unknown, s, strings.Join(names, ", "))
}
