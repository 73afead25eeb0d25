package slackui

import "strings"

// PlainText is text for a plain_text object (a header, a button, a
// modal's title): Slack shows it as it is, with no link, mention or
// formatting, so only what would change how it is shown goes: invalid
// UTF-8, the controls that reorder text, and control characters other
// than newline and tab.
func PlainText(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t':
			return r
		case r < 0x20 || (r >= 0x7f && r < 0xa0) || reordering(r):
			return -1
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
}
