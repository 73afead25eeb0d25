package slackui

import (
	"strings"
	"unicode"
	"unicode/utf16"
)

// Arguments are shown so that an approver sees every character a call
// runs with. Some characters show as nothing: format characters (zero-width
// spaces and joiners, the soft hyphen, the byte order mark, the Unicode tag
// characters that can spell a whole hidden text), the bidirectional
// controls (which the mrkdwn escaper drops, so that the text no longer
// reads as it is), the other default-ignorable characters (Hangul fillers,
// variation selectors) and the C1 controls. In arguments such a character
// could make "main" of a value that is not "main", or carry text to
// another program that no person saw. In the arguments' JSON each is
// written as its JSON escape (\u200b; a pair for one beyond the Basic
// Multilingual Plane), which decodes to the same character: the JSON
// means what it did, and every character shows.

// invisible reports whether r shows as nothing, or changes how the text
// around it reads, rather than as a character of its own. U+FE0F, which
// asks for an emoji's colour presentation after nearly every emoji, is
// not: it hides nothing.
func invisible(r rune) bool {
	switch {
	case r < 0x80 || r == '\ufe0f':
		return false
	case r <= 0x9f, r == '\u2028', r == '\u2029':
		return true
	}
	return unicode.In(r, unicode.Cf, unicode.Other_Default_Ignorable_Code_Point, unicode.Variation_Selector)
}

// hasInvisible reports whether s holds an invisible character.
func hasInvisible(s string) bool { return strings.ContainsFunc(s, invisible) }

// visibleJSON writes each invisible character of JSON text as its JSON
// escape. In JSON such a character can only be inside a string, where the
// escape means the same character. Text that is not JSON is treated the
// same way, for display.
func visibleJSON(js string) string {
	if !hasInvisible(js) {
		return js
	}
	var b strings.Builder
	b.Grow(len(js) + 16)
	for _, r := range js {
		if !invisible(r) {
			b.WriteRune(r)
			continue
		}
		if r >= 0x10000 {
			hi, lo := utf16.EncodeRune(r)
			writeUEscape(&b, hi)
			writeUEscape(&b, lo)
			continue
		}
		writeUEscape(&b, r)
	}
	return b.String()
}

// writeUEscape writes r, a UTF-16 code unit, as \uXXXX.
func writeUEscape(b *strings.Builder, r rune) {
	const hex = "0123456789abcdef"
	b.WriteString(`\u`)
	for shift := 12; shift >= 0; shift -= 4 {
		b.WriteByte(hex[r>>shift&0xf])
	}
}
