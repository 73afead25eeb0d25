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

// MrkdwnAsSent is text a person typed, as Slack sent it to the bot
// (mrkdwn, with Slack's own markup), to be posted again by the bot: the
// person's mentions of people (<@U…>) and channels (<#C…>) stay live,
// and so do links that show their own target. What the bot must not
// post in a person's name is shown as text: a broadcast or group
// mention (<!here>, <!subteam^…>) as "@here" that notifies no one, and
// a link whose label differs from its target as "label (target)".
func MrkdwnAsSent(s string) string {
	s = clean(s)
	var b strings.Builder
	for {
		i := strings.IndexAny(s, "<>")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		if s[i] == '>' {
			b.WriteString("&gt;")
			s = s[i+1:]
			continue
		}
		j := strings.IndexAny(s[i+1:], "<>")
		if j < 0 || s[i+1+j] == '<' {
			b.WriteString("&lt;")
			s = s[i+1:]
			continue
		}
		b.WriteString(sentToken(s[i+1 : i+1+j]))
		s = s[i+1+j+1:]
	}
}

// sentToken is the markup <inner> of text Slack sent, as the bot posts it
// again.
func sentToken(inner string) string {
	target, label, labelled := strings.Cut(inner, "|")
	switch {
	case (strings.HasPrefix(target, "@") || strings.HasPrefix(target, "#")) && slackID(target[1:]):
		return "<" + target + ">"
	case strings.HasPrefix(target, "!date^"):
		return MrkdwnInline(sentText(label))
	case strings.HasPrefix(target, "!"):
		name, _, _ := strings.Cut(strings.TrimPrefix(target, "!"), "^")
		if labelled {
			name = strings.TrimPrefix(sentText(label), "@")
		}
		return "@" + zwsp + MrkdwnInline(name)
	case linkTarget(target):
		if !labelled || label == target || label == strings.TrimPrefix(strings.TrimPrefix(target, "https://"), "http://") ||
			label == strings.TrimPrefix(target, "mailto:") {
			return "<" + target + ">"
		}
		return MrkdwnInline(sentText(label)) + " (<" + target + ">)"
	}
	return "&lt;" + inner + "&gt;"
}

// slackID reports whether s is a Slack ID: capital letters and digits.
func slackID(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for _, r := range s {
		if (r < 'A' || r > 'Z') && (r < '0' || r > '9') {
			return false
		}
	}
	return true
}

// linkTarget reports whether s is a URL Slack links: http, https or
// mailto, with nothing in it that Slack reads as markup.
func linkTarget(s string) bool {
	return (strings.HasPrefix(s, "https://") || strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "mailto:")) &&
		!strings.ContainsAny(s, " \t\n|<>")
}

// sentText undoes Slack's escaping of &, < and > in text it sent.
func sentText(s string) string {
	return strings.NewReplacer("&lt;", "<", "&gt;", ">", "&amp;", "&").Replace(s)
}
