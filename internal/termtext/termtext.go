// Package termtext is the terminal's escaper: it makes text that came from
// elsewhere — a fetched page, a tool's or an MCP server's result, the
// model, a person, an export file — safe to print on an operator's
// terminal. It owns what a terminal would take as a command; what a
// value means, and how a command lays it out, are its callers'.
//
// A terminal acts on control characters, not on text: ESC starts the
// sequences that clear the screen, move the cursor, retitle the window,
// write the clipboard (OSC 52) or make a link (OSC 8); the 8-bit C1
// controls (U+0080–U+009F, among them CSI U+009B and OSC U+009D) do the
// same alone; BEL, backspace and a carriage return rewrite what is shown;
// and the Unicode bidirectional controls (U+202A–U+202E, U+2066–U+2069 and
// the marks) reorder a line so that it reads otherwise than it is. With
// every control character neutralised no escape sequence is left, whatever
// follows it: its other bytes are printable text.
//
// Some characters show as nothing, and disguise what is shown instead: a
// zero-width space or joiner in a URL or a command, the soft hyphen, the
// byte order mark, the Unicode tag characters (which spell a whole text no
// one sees), the other format characters and default-ignorable ones
// (Hangul fillers, variation selectors). They are neutralised too, but
// for U+FE0F, which follows nearly every emoji and hides nothing.
//
// A neutralised character is shown, not dropped, so that the operator
// sees that something was there: as a JSON-style escape, \n \r \t \b \f
// or \uXXXX. Inside a JSON string such an escape means the character
// itself, so JSON passed through Text or a Writer still decodes to the
// same values. Bytes that are not UTF-8 (a lone 0x9B is 8-bit CSI to some
// terminals) become U+FFFD.
//
// Text keeps newlines and tabs, for multi-line values and for JSON and
// tables laid out by the caller; Line neutralises them too, for a value
// that must stay on its line (a table cell, a field of a one-line record).
// A Writer applies Text to everything written through it, for a command's
// whole output.
package termtext

import (
	"io"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Text returns s safe to print on a terminal, keeping its newlines and
// tabs. A carriage return before a newline is dropped (the line ends the
// same); any other is shown as \r.
func Text(s string) string {
	if clean(s, true) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	appendText(&b, s, true)
	return b.String()
}

// Line returns s safe to print on a terminal on one line: as Text, but
// newlines and tabs are shown as \n and \t too.
func Line(s string) string {
	if clean(s, false) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	appendText(&b, s, false)
	return b.String()
}

// Neutralised reports whether a terminal escaper shows r escaped rather
// than as it is: C0 and C1 controls, DEL, the Unicode bidirectional
// controls, the line and paragraph separators, and the characters that
// show as nothing (format and default-ignorable characters, variation
// selectors but U+FE0F). Newline and tab are neutralised except where the
// text may span lines.
func Neutralised(r rune, multiline bool) bool {
	switch {
	case r == '\n' || r == '\t':
		return !multiline
	case r < 0x20 || r >= 0x7f && r <= 0x9f:
		return true
	case r < 0x80 || r == '\ufe0f':
		return false
	case r == '\u2028' || r == '\u2029':
		return true
	}
	return unicode.In(r, unicode.Bidi_Control, unicode.Cf, unicode.Other_Default_Ignorable_Code_Point, unicode.Variation_Selector)
}

// clean reports whether s needs no change.
func clean(s string, multiline bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c < 0x7f || multiline && (c == '\n' || c == '\t') {
			continue
		}
		if c < 0x80 {
			return false
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n <= 1 || Neutralised(r, multiline) {
			return false
		}
		i += n - 1
	}
	return true
}

// appendText writes s escaped to b.
func appendText(b *strings.Builder, s string, multiline bool) {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			b.WriteRune(utf8.RuneError)
		case r == '\r' && multiline && i+1 < len(s) && s[i+1] == '\n':
			// CRLF: the line ends as with LF alone.
		case Neutralised(r, multiline):
			writeEscape(b, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
}

const hexDigits = "0123456789abcdef"

func writeEscape(b *strings.Builder, r rune) {
	switch r {
	case '\n':
		b.WriteString(`\n`)
	case '\r':
		b.WriteString(`\r`)
	case '\t':
		b.WriteString(`\t`)
	case '\b':
		b.WriteString(`\b`)
	case '\f':
		b.WriteString(`\f`)
	default:
		if r >= 0x10000 { // a tag character, say: a JSON surrogate pair
			hi, lo := utf16.EncodeRune(r)
			writeU(b, hi)
			writeU(b, lo)
			return
		}
		writeU(b, r)
	}
}

// writeU writes a UTF-16 code unit as \uXXXX.
func writeU(b *strings.Builder, r rune) {
	b.WriteString(`\u`)
	for shift := 12; shift >= 0; shift -= 4 {
		b.WriteByte(hexDigits[r>>shift&0xf])
	}
}

// Writer writes what is written to it through Text. It holds back an
// incomplete UTF-8 sequence or a final carriage return until the next
// write tells what it is; Flush writes them as they are then. A Writer is
// for one goroutine.
type Writer struct {
	w       io.Writer
	pending []byte
	buf     strings.Builder
}

// NewWriter returns a Writer to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write escapes p and writes it. It returns len(p) when the escaped text
// was written, whatever its length.
func (w *Writer) Write(p []byte) (int, error) {
	s := string(p)
	if len(w.pending) > 0 {
		s = string(w.pending) + s
		w.pending = w.pending[:0]
	}
	// Hold back what the next write may complete: the start of a UTF-8
	// sequence, or a carriage return that a newline may follow.
	cut := len(s)
	if cut > 0 && s[cut-1] == '\r' {
		cut--
	} else {
		for i := max(0, cut-utf8.UTFMax+1); i < cut; i++ {
			if utf8.RuneStart(s[i]) && s[i] >= 0x80 && !utf8.FullRuneInString(s[i:]) {
				cut = i
				break
			}
		}
	}
	w.pending = append(w.pending, s[cut:]...)
	if err := w.write(s[:cut]); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes what Write held back.
func (w *Writer) Flush() error {
	s := string(w.pending)
	w.pending = w.pending[:0]
	return w.write(s)
}

func (w *Writer) write(s string) error {
	if s == "" {
		return nil
	}
	if clean(s, true) {
		_, err := io.WriteString(w.w, s)
		return err
	}
	w.buf.Reset()
	appendText(&w.buf, s, true)
	_, err := io.WriteString(w.w, w.buf.String())
	return err
}
