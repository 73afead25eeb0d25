package slackui

import (
	"regexp"
	"strings"
)

// slackLink matches Slack's angle-bracket markup in message text: links
// <https://x> and <https://x|label>, and channel references <#C1|name>.
// User mentions (<@U1>) are left as they are: the model understands them
// and writes them back.
var slackLink = regexp.MustCompile(`<((?:https?|mailto):[^|>]+)(?:\|([^>]*))?>|<#([A-Z0-9]+)(?:\|([^>]*))?>`)

// TypedText turns the text of a Slack message or command into what the
// person typed: links as their URL (with the label, when it differs),
// channel references as #name, and &amp; &lt; &gt; unescaped — Slack
// escapes those three characters in every text it sends.
func TypedText(s string) string {
	s = slackLink.ReplaceAllStringFunc(s, func(m string) string {
		p := slackLink.FindStringSubmatch(m)
		switch {
		case p[1] != "" && p[2] != "" && p[2] != p[1] && p[2] != strings.TrimPrefix(strings.TrimPrefix(p[1], "https://"), "http://"):
			return p[2] + " (" + p[1] + ")"
		case p[1] != "":
			return p[1]
		case p[4] != "":
			return "#" + p[4]
		default:
			return "<#" + p[3] + ">"
		}
	})
	return strings.NewReplacer("&lt;", "<", "&gt;", ">", "&amp;", "&").Replace(s)
}

// mention matches a user mention, such as the bot's at the start of an
// app_mention.
var mention = regexp.MustCompile(`<@[A-Z0-9]+(\|[^>]*)?>`)

// MentionText is TypedText of a message that mentions the bot (an
// app_mention, a reply in a thread), with the user mentions left out.
func MentionText(s string) string {
	return TypedText(strings.TrimSpace(mention.ReplaceAllString(s, "")))
}

// RequestText is the root message of a request: who asked, and what, in
// their words as Slack sent them (MrkdwnAsSent). A request of several
// lines is quoted, every line of it: a line of the person's cannot stand
// at the start of a line of the bot's message, where it would read as
// the bot's own ("✅ Approved by …").
func RequestText(user, typed string) string {
	text := MrkdwnAsSent(typed)
	if !strings.ContainsAny(text, "\r\n") {
		return UserMention(user) + " asked: " + text
	}
	text = strings.ReplaceAll(strings.ReplaceAll(text, "\r\n", "\n"), "\r", "\n")
	return UserMention(user) + " asked:\n> " + strings.ReplaceAll(text, "\n", "\n> ")
}
