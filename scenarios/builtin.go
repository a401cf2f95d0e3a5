package scenarios

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
)

// builtinFS holds the catalogue. It is read-only; each call parses it
// afresh, so nothing in the package is shared mutable state.
//
//go:embed builtin/*.yaml
var builtinFS embed.FS

// Builtin returns the built-in catalogue, sorted by name. The files are
// checked by the package's tests; one that does not parse is a build
// mistake, so Builtin panics naming it rather than hide a scenario.
func Builtin() []Scenario {
	entries, err := fs.ReadDir(builtinFS, "builtin")
	if err != nil {
		panic(fmt.Sprintf("scenarios: built-in catalogue: %v", err))
	}
	out := make([]Scenario, 0, len(entries))
	for _, e := range entries {
		s, err := parseBuiltin(e.Name())
		if err != nil {
			panic(fmt.Sprintf("scenarios: built-in catalogue is broken:\n%v", err))
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Scenario) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func parseBuiltin(file string) (Scenario, error) {
	p := path.Join("builtin", file)
	data, err := builtinFS.ReadFile(p)
	if err != nil {
		return Scenario{}, fmt.Errorf("scenarios: %w", err)
	}
	return Parse(p, data)
}

// Lookup finds a built-in scenario by name.
func Lookup(name string) (Scenario, bool) {
	if checkName(name) != "" {
		return Scenario{}, false
	}
	s, err := parseBuiltin(name + ".yaml")
	if err != nil || s.Name != name {
		return Scenario{}, false
	}
	return s, true
}

// Names lists the built-in scenarios' names, sorted.
func Names() []string {
	var out []string
	for _, s := range Builtin() {
		out = append(out, s.Name)
	}
	return out
}

// Load reads a scenario by built-in name or file path. An argument that
// looks like a path (has a separator or a .yaml/.yml extension) is always
// a file; otherwise a built-in name wins over a file of the same name.
func Load(nameOrPath string) (Scenario, error) {
	looksLikePath := strings.ContainsRune(nameOrPath, '/') || strings.ContainsRune(nameOrPath, os.PathSeparator) ||
		strings.HasSuffix(nameOrPath, ".yaml") || strings.HasSuffix(nameOrPath, ".yml")
	if !looksLikePath {
		if s, ok := Lookup(nameOrPath); ok {
			return s, nil
		}
	}
	data, err := os.ReadFile(nameOrPath)
	if err == nil {
		return Parse(nameOrPath, data)
	}
	if looksLikePath || !errors.Is(err, fs.ErrNotExist) {
		return Scenario{}, fmt.Errorf("scenarios: %w", err)
	}
	names := Names()
	return Scenario{}, fmt.Errorf("scenarios: no built-in scenario or file named %q%s (built-in: %s; deliverycheck list describes them)",
		nameOrPath, suggest(nameOrPath, names), strings.Join(names, ", "))
}
