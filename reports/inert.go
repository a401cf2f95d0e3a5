package reports

import (
	"io"
	"reflect"
	"strings"
	"unicode/utf8"
)

// maxShownText is the most of one string the page shows, in bytes. Every
// string in a report may come from a hostile message (an event id, a
// rejection reason citing a header, a broker's error, a log tail), and one
// of 1 MiB repeated in a lineage table would make a page no browser opens;
// results.json keeps every string whole.
const maxShownText = 4 << 10

// cutMarker begins what the page shows in place of a string's cut tail.
const cutMarker = "… [cut: "

// shown is s as the page shows it: [Printable], cut to maxShownText
// bytes with a marker giving the whole length. html/template escapes
// markup but passes bytes that are not UTF-8 and controls through, and
// they make the page invalid UTF-8 or a parse error, or hide text.
func shown(s string) string { return printable(s, maxShownText) }

// Printable is s with nothing a reader's screen acts on: valid UTF-8 with
// each byte that is not UTF-8 as U+FFFD, each C0 control but tab and
// newline (NUL, ESC, carriage return, ...) and DEL as its Unicode control
// picture (␀, ␛, ␍, ␡), each C1 control and noncharacter as U+FFFD. Text
// from a hostile message (an id, a reason, a broker's error) shown on a
// terminal could otherwise move the cursor, rewrite the screen or set the
// window title; on a page it is invalid.
func Printable(s string) string { return printable(s, -1) }

// PrintableWriter writes to w what it is given through [Printable], for a
// terminal; each Write must be whole runes, as fmt.Fprintf's are.
func PrintableWriter(w io.Writer) io.Writer { return printableWriter{w} }

type printableWriter struct{ w io.Writer }

func (p printableWriter) Write(b []byte) (int, error) {
	if _, err := io.WriteString(p.w, Printable(string(b))); err != nil {
		return 0, err
	}
	return len(b), nil
}

// printable is Printable, cut to limit bytes with a marker when limit is
// not negative.
func printable(s string, limit int) string {
	if (limit < 0 || len(s) <= limit) && plain(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		if limit >= 0 && b.Len() >= limit {
			b.WriteString(cutMarker + groupDigits(int64(len(s))) + " bytes in all, whole in results.json]")
			break
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		switch {
		case r == '\t' || r == '\n':
		case r < 0x20:
			r += 0x2400 // control pictures: U+2400 ␀ to U+241F
		case r == 0x7f:
			r = 0x2421 // ␡
		case r < 0xa0 && r > 0x7f, noncharacter(r):
			r = utf8.RuneError
		}
		b.WriteRune(r)
	}
	return b.String()
}

// plain reports whether s is valid UTF-8 with nothing Printable would
// replace.
func plain(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || r < 0x20 && r != '\t' && r != '\n' || r >= 0x7f && r < 0xa0 || noncharacter(r) {
			return false
		}
	}
	return true
}

// noncharacter reports whether r is one of Unicode's noncharacters
// (U+FDD0–U+FDEF, and the last two code points of every plane), which
// HTML makes a parse error and XML 1.0 forbids in part.
func noncharacter(r rune) bool {
	return r >= 0xfdd0 && r <= 0xfdef || r&0xfffe == 0xfffe
}

// inert passes every string of the view through shown: the one place the
// page's text is made safe beyond html/template's escaping, so a field
// added to the view later is covered too. It copies every slice, map and
// pointer it goes through first, since the view shares them with the
// checker's result, which results.json and junit.xml show whole. Strings
// of other types than string (a plot's points) are the report's own.
func inert(v *view) {
	inertValue(reflect.ValueOf(v).Elem())
}

func inertValue(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		if v.Type() == reflect.TypeFor[string]() && v.CanSet() {
			v.SetString(shown(v.String()))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			inertValue(v.Field(i))
		}
	case reflect.Array:
		for i := range v.Len() {
			inertValue(v.Index(i))
		}
	case reflect.Slice:
		if v.IsNil() || !v.CanSet() {
			return
		}
		c := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		reflect.Copy(c, v)
		v.Set(c)
		for i := range v.Len() {
			inertValue(v.Index(i))
		}
	case reflect.Pointer:
		if v.IsNil() || !v.CanSet() {
			return
		}
		c := reflect.New(v.Type().Elem())
		c.Elem().Set(v.Elem())
		v.Set(c)
		inertValue(c.Elem())
	case reflect.Map:
		if v.IsNil() || !v.CanSet() {
			return
		}
		c := reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			k.Set(it.Key())
			e.Set(it.Value())
			inertValue(k)
			inertValue(e)
			c.SetMapIndex(k, e)
		}
		v.Set(c)
	}
}
