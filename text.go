package muster

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Printable returns s with every control character, bidirectional
// override and invalid UTF-8 byte escaped (\x1b, \n, \u202e, \xff), so
// that text an agent or a cloud wrote cannot move a terminal's cursor,
// change its colours or reorder what it shows (S8). Printable text,
// other languages included, is unchanged.
func Printable(s string) string {
	if isPrintable(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x80 && unicode.IsControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
		i += size
	}
	return b.String()
}

func isPrintable(s string) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || r == '\\' || unicode.IsControl(r) || unsafeRune(r) {
			return false
		}
		i += size
	}
	return true
}

// unsafeRune reports formatting characters that change how a terminal
// shows the text around them: bidirectional embeddings, overrides and
// isolates, and the line and paragraph separators.
func unsafeRune(r rune) bool {
	return (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) ||
		r == 0x200e || r == 0x200f || r == 0x061c || r == 0x2028 || r == 0x2029 ||
		(r >= 0x80 && r < 0xa0)
}
