package slackui

import "strings"

// mrkdwnEscaper escapes the three characters Slack's mrkdwn gives a
// meaning to.
var mrkdwnEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// Mrkdwn is a text from the model or a tool as mrkdwn message text: its
// own formatting (*bold*, _italics_, `code`, ```blocks```) kept, &, <
// and > escaped so that Slack shows them as the characters they are, and
// a code block it opens and does not close closed. mrkdwn has no link
// syntax of its own besides <…>: "[label](target)" shows as written.
func Mrkdwn(s string) string {
	return BalanceFences(mrkdwnEscaper.Replace(clean(s)))
}

// MrkdwnInline is text from the model, a tool or a person for a place in
// the bot's own mrkdwn (a card's line, a code block's content): escaped
// like Mrkdwn, and with no code fence of its own (see BreakFences).
func MrkdwnInline(s string) string {
	return BreakFences(mrkdwnEscaper.Replace(clean(s)))
}

// BreakFences puts a zero-width space between backticks that follow one
// another, so that text shown inline cannot open or close a code block.
func BreakFences(s string) string {
	if !strings.Contains(s, "``") {
		return s
	}
	var b strings.Builder
	prev := false
	for _, r := range s {
		if r == '`' && prev {
			b.WriteString(zwsp)
		}
		b.WriteRune(r)
		prev = r == '`'
	}
	return b.String()
}

// BalanceFences closes a code block that s opens and does not close.
func BalanceFences(s string) string {
	if strings.Count(s, "```")%2 == 1 {
		if !strings.HasSuffix(s, "\n") {
			s += "\n"
		}
		s += "```"
	}
	return s
}
