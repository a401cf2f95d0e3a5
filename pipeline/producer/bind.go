package producer

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// placeholders are the values a team's own transaction (Config.Transaction)
// can use, written :name in its SQL.
var placeholders = []string{"event_id", "aggregate_id", "version", "payload", "type", "source"}

// Statement is one statement of a team's business transaction, its :name
// placeholders turned into $1, $2... (Args names the value of each).
type Statement struct {
	SQL  string   `json:"sql"`
	Args []string `json:"args"`
}

// Bind turns :name placeholders (:event_id, :aggregate_id, :version,
// :payload, :type and :source) into positional parameters. It leaves
// string literals, quoted identifiers, dollar-quoted bodies, comments and
// :: casts alone, and rejects unknown placeholders and $n parameters, so a
// mistake shows when the scenario is read, not mid-run.
func Bind(sql string) (Statement, error) {
	var b strings.Builder
	var args []string
	i := 0
	for i < len(sql) {
		c := sql[i]
		switch {
		case c == '\'' || c == '"':
			j := endQuoted(sql, i, c)
			b.WriteString(sql[i:j])
			i = j
		case c == '-' && strings.HasPrefix(sql[i:], "--"):
			j := strings.IndexByte(sql[i:], '\n')
			if j < 0 {
				j = len(sql) - i
			}
			b.WriteString(sql[i : i+j])
			i += j
		case c == '/' && strings.HasPrefix(sql[i:], "/*"):
			j := strings.Index(sql[i+2:], "*/")
			end := len(sql)
			if j >= 0 {
				end = i + 2 + j + 2
			}
			b.WriteString(sql[i:end])
			i = end
		case c == '$':
			if tag, ok := dollarTag(sql[i:]); ok {
				j := strings.Index(sql[i+len(tag):], tag)
				end := len(sql)
				if j >= 0 {
					end = i + len(tag) + j + len(tag)
				}
				b.WriteString(sql[i:end])
				i = end
				continue
			}
			if i+1 < len(sql) && sql[i+1] >= '0' && sql[i+1] <= '9' {
				return Statement{}, fmt.Errorf("positional parameter at offset %d: use :name placeholders (%s)", i, strings.Join(prefixed(), ", "))
			}
			b.WriteByte(c)
			i++
		case c == ':' && i+1 < len(sql) && sql[i+1] == ':':
			b.WriteString("::")
			i += 2
			for i < len(sql) && isIdent(sql[i]) { // the cast's type name
				b.WriteByte(sql[i])
				i++
			}
		case c == ':' && i+1 < len(sql) && isIdentStart(sql[i+1]):
			j := i + 1
			for j < len(sql) && isIdent(sql[j]) {
				j++
			}
			name := sql[i+1 : j]
			if !slices.Contains(placeholders, name) {
				return Statement{}, fmt.Errorf("unknown placeholder :%s (valid: %s)", name, strings.Join(prefixed(), ", "))
			}
			n := slices.Index(args, name)
			if n < 0 {
				args = append(args, name)
				n = len(args) - 1
			}
			b.WriteString("$" + strconv.Itoa(n+1))
			i = j
		default:
			b.WriteByte(c)
			i++
		}
	}
	st := Statement{SQL: strings.TrimSpace(b.String()), Args: args}
	if st.SQL == "" {
		return Statement{}, fmt.Errorf("empty statement")
	}
	return st, nil
}

func prefixed() []string {
	out := make([]string, len(placeholders))
	for i, p := range placeholders {
		out[i] = ":" + p
	}
	return out
}

// endQuoted returns the index just past the quoted text starting at i
// (a doubled quote inside is an escaped one), or len(s) if it never ends.
func endQuoted(s string, i int, q byte) int {
	for j := i + 1; j < len(s); j++ {
		if s[j] == q {
			if j+1 < len(s) && s[j+1] == q {
				j++
				continue
			}
			return j + 1
		}
	}
	return len(s)
}

// dollarTag reports whether s starts a dollar-quoted string ($$ or $tag$)
// and returns the tag.
func dollarTag(s string) (string, bool) {
	if len(s) < 2 {
		return "", false
	}
	if s[1] == '$' {
		return "$$", true
	}
	if !isIdentStart(s[1]) {
		return "", false
	}
	j := 2
	for j < len(s) && isIdent(s[j]) {
		j++
	}
	if j < len(s) && s[j] == '$' {
		return s[:j+1], true
	}
	return "", false
}

func isIdentStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isIdent(c byte) bool      { return isIdentStart(c) || c >= '0' && c <= '9' }
