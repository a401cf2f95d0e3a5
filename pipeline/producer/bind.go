package producer

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// placeholder is one value a team's own transaction (Config.Transaction)
// can use, written :name in its SQL.
type placeholder struct {
	name string
	// broker is the only broker the value exists on, or "" for every
	// one. A destination placeholder names the run's topic or exchange,
	// and the other broker has no such thing: binding it to "" (or to the
	// other broker's name) would let a statement written for one broker
	// run on the other and route its rows nowhere, so it is a mistake
	// reported before the run (see [Statement.CheckBroker]).
	broker string
	// doc is its row in docs/contract.md's placeholder table (a test
	// keeps the two the same).
	doc string
	// value is what it binds for one op.
	value func(Values) any
}

// placeholders is the one list of placeholders: Bind, the values an op
// binds and docs/contract.md's table all come from it.
var placeholders = []placeholder{
	{name: "event_id", doc: "a fresh UUID; the event's identity everywhere", value: func(v Values) any { return v.EventID }},
	{name: "aggregate_id", doc: "the aggregate (`order-7`)", value: func(v Values) any { return v.AggregateID }},
	{name: "version", doc: "its new version, from 1, contiguous per aggregate (bigint)", value: func(v Values) any { return v.Version }},
	{name: "payload", doc: "the event's JSON (text)", value: func(v Values) any { return v.Payload }},
	{name: "type", doc: "`" + EventType + "`", value: func(v Values) any { return v.Type }},
	{name: "source", doc: "`" + DefaultSource + "`", value: func(v Values) any { return v.Source }},
	{name: "traceparent", doc: "the W3C `traceparent` of the op's trace, for the outbox row's `traceparent` column (docs/history.md, \"Traces\")", value: func(v Values) any { return v.TraceParent }},
	{name: "topic", broker: "kafka", doc: "the run's events topic, what `DELIVERYCHECK_KAFKA_TOPIC` holds; Kafka runs only", value: func(v Values) any { return v.Events }},
	{name: "exchange", broker: "rabbitmq", doc: "the run's events exchange, what `DELIVERYCHECK_AMQP_EXCHANGE` holds; RabbitMQ runs only", value: func(v Values) any { return v.Events }},
}

// lookup returns the placeholder called name.
func lookup(name string) (placeholder, bool) {
	i := slices.IndexFunc(placeholders, func(p placeholder) bool { return p.name == name })
	if i < 0 {
		return placeholder{}, false
	}
	return placeholders[i], true
}

// Values are what one op's placeholders stand for.
type Values struct {
	EventID     string
	AggregateID string
	Version     int64
	Payload     string
	Type        string
	Source      string
	// Events is the run's events topic (Kafka) or exchange (RabbitMQ):
	// what :topic or :exchange binds, whichever exists on the broker.
	Events string
	// TraceParent is the op's trace, which the producer records on its
	// commit op.
	TraceParent string
}

// Statement is one statement of a team's business transaction, its :name
// placeholders turned into $1, $2... (Args names the value of each).
type Statement struct {
	SQL  string   `json:"sql"`
	Args []string `json:"args"`
}

// Values returns the statement's arguments for one op, in $n order.
func (st Statement) Values(v Values) []any {
	args := make([]any, len(st.Args))
	for i, a := range st.Args {
		if p, ok := lookup(a); ok { // Bind only names placeholders
			args[i] = p.value(v)
		}
	}
	return args
}

// CheckBroker reports a placeholder the statement uses that does not
// exist on broker ("kafka" or "rabbitmq"): :topic on RabbitMQ, :exchange
// on Kafka.
func (st Statement) CheckBroker(broker string) error {
	for _, a := range st.Args {
		p, ok := lookup(a)
		if !ok || p.broker == "" || p.broker == broker {
			continue
		}
		msg := fmt.Sprintf(":%s only exists on %s runs, and this run's broker is %s", p.name, p.broker, cmp.Or(broker, "not set"))
		if alt := destinationOn(broker); alt != "" {
			msg += fmt.Sprintf(": use :%s", alt)
		}
		return errors.New(msg)
	}
	return nil
}

// destinationOn is the destination placeholder that exists on broker, or "".
func destinationOn(broker string) string {
	for _, p := range placeholders {
		if p.broker != "" && p.broker == broker {
			return p.name
		}
	}
	return ""
}

// Bind turns :name placeholders (those of [placeholders], the table in
// docs/contract.md) into positional parameters. It leaves string
// literals, quoted identifiers, dollar-quoted bodies, comments and ::
// casts alone, and rejects unknown placeholders and $n parameters, so a
// mistake shows when the scenario is read, not mid-run. It reads the statement alone: whether
// :topic or :exchange exists depends on the run's broker, which
// [Statement.CheckBroker] checks.
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
			if _, ok := lookup(name); !ok {
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
		out[i] = ":" + p.name
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
