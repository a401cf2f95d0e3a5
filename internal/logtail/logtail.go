// Package logtail reads the last lines of a log, for the errors and
// reports that end with what a server or worker last said.
package logtail

import (
	"os"
	"strings"
)

// Lines is the last n non-blank lines of b, as written (not trimmed).
func Lines(b []byte, n int) []string {
	var lines []string
	for l := range strings.SplitSeq(string(b), "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	return lines[max(0, len(lines)-n):]
}

// File is the last n non-blank lines of the log at path, one per line.
// It is "" when the log cannot be read.
func File(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.Join(Lines(b, n), "\n")
}
