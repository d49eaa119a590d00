package muster

import (
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestPrintable(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"plain", "instance started in zone a", "instance started in zone a"},
		{"other scripts", "zone ä — 東京", "zone ä — 東京"},
		{"escape sequence", "ok\x1b[2J\x1b[31mred", `ok\x1b[2J\x1b[31mred`},
		{"newline and tab", "a\nb\tc\r", `a\nb\tc\r`},
		{"backslash is escaped so escapes are unambiguous", `a\x1b`, `a\\x1b`},
		{"bidi override", "abc\u202edcba", `abc\u202edcba`},
		{"C1 control", "a\u009bb", `a\u009bb`},
		{"bell and delete", "a\x07\x7f", `a\x07\x7f`},
		{"invalid utf-8", "a\xffb", `a\xffb`},
		{"empty", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Printable(tc.in); got != tc.want {
				t.Errorf("Printable(%q): got %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func FuzzPrintable(f *testing.F) {
	for _, s := range []string{"", "ok", "\x1b[31m", "\u202e", "a\xff", `\`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := Printable(s)
		if !utf8.ValidString(out) {
			t.Fatalf("Printable(%q) = %q: not valid UTF-8", s, out)
		}
		for _, r := range out {
			if unicode.IsControl(r) || unsafeRune(r) {
				t.Fatalf("Printable(%q) = %q: holds %U", s, out, r)
			}
		}
		if isPrintable(s) && out != s {
			t.Fatalf("Printable(%q) = %q: changed printable text", s, out)
		}
	})
}
