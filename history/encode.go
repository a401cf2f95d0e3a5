package history

import (
	"strconv"
	"unicode/utf8"
)

// AppendJSON appends op as one JSON object (no newline) to dst. Fields are
// written in a fixed order and zero Value fields are left out, so the same op
// always gives the same bytes.
func (op Op) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"index":`...)
	dst = strconv.AppendInt(dst, op.Index, 10)
	dst = append(dst, `,"time":`...)
	dst = strconv.AppendInt(dst, op.Time, 10)
	dst = append(dst, `,"process":`...)
	dst = appendString(dst, op.Process)
	dst = append(dst, `,"type":"`...)
	if op.Type >= Invoke && op.Type <= Info {
		dst = append(dst, typeNames[op.Type]...)
	}
	dst = append(dst, `","f":`...)
	dst = appendString(dst, string(op.F))
	dst = append(dst, `,"value":{`...)
	n := len(dst)
	v := &op.Value
	dst = appendStrField(dst, n, "event", v.Event)
	dst = appendStrField(dst, n, "source", v.Source)
	dst = appendStrField(dst, n, "key", v.Key)
	dst = appendIntField(dst, n, "version", v.Version)
	dst = appendIntField(dst, n, "partition", v.Partition)
	dst = appendIntField(dst, n, "offset", v.Offset)
	dst = appendIntField(dst, n, "tag", v.Tag)
	dst = appendIntField(dst, n, "attempt", v.Attempt)
	dst = appendStrField(dst, n, "consumer", v.Consumer)
	dst = appendStrField(dst, n, "table", v.Table)
	if v.Published {
		dst = appendKey(dst, n, "published")
		dst = append(dst, "true"...)
	}
	if v.Poison {
		dst = appendKey(dst, n, "poison")
		dst = append(dst, "true"...)
	}
	dst = appendStrField(dst, n, "error", v.Error)
	dst = appendStrField(dst, n, "reason", v.Reason)
	dst = appendStrField(dst, n, "fault", v.Fault)
	dst = appendStrField(dst, n, "target", v.Target)
	dst = appendStrField(dst, n, "detail", v.Detail)
	dst = appendStrField(dst, n, "evidence", v.Evidence)
	dst = appendIntField(dst, n, "commit_time", v.CommitTime)
	dst = appendStrsField(dst, n, "subscriptions", v.Subscriptions)
	dst = appendStrField(dst, n, "topic", v.Topic)
	dst = appendStrField(dst, n, "txn", v.Txn)
	dst = appendStrField(dst, n, "transactional_id", v.TransactionalID)
	dst = appendIntField(dst, n, "input_partition", v.InputPartition)
	dst = appendIntField(dst, n, "input_offset", v.InputOffset)
	dst = appendIntField(dst, n, "last_stable_offset", v.LastStableOffset)
	dst = appendIntField(dst, n, "high_watermark", v.HighWatermark)
	dst = appendStrsField(dst, n, "topics", v.Topics)
	dst = appendStrField(dst, n, "published_as", v.PublishedAs)
	dst = appendIntField(dst, n, "rss", v.RSS)
	dst = appendIntField(dst, n, "schema", v.Schema)
	dst = appendIntField(dst, n, "rate", v.Rate)
	dst = appendIntField(dst, n, "lag", v.Lag)
	dst = appendStrField(dst, n, "trace", v.Trace)
	return append(dst, "}}"...)
}

func appendKey(dst []byte, start int, k string) []byte {
	if len(dst) > start {
		dst = append(dst, ',')
	}
	dst = append(dst, '"')
	dst = append(dst, k...)
	return append(dst, '"', ':')
}

func appendStrField(dst []byte, start int, k, v string) []byte {
	if v == "" {
		return dst
	}
	return appendString(appendKey(dst, start, k), v)
}

func appendIntField(dst []byte, start int, k string, v int64) []byte {
	if v == 0 {
		return dst
	}
	return strconv.AppendInt(appendKey(dst, start, k), v, 10)
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string, escaping as encoding/json does
// (except for HTML characters, which need no escaping here).
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendStrsField appends "key":[...] when ss is not empty.
func appendStrsField(dst []byte, start int, key string, ss []string) []byte {
	if len(ss) == 0 {
		return dst
	}
	dst = appendKey(dst, start, key)
	dst = append(dst, '[')
	for i, s := range ss {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, s)
	}
	return append(dst, ']')
}
