package handlers

import "strings"

// Text from the model and from tools reaches Slack only through the
// functions of this file (and the card builders of blocks.go, which
// escape the same way): whatever a fetched page or a model writes, no
// <!here>, <!channel>, <@…>, <#…> or <url|label> of its own becomes live,
// and an unclosed code fence cannot swallow what the bot posts after it.
// The bot's own markup — the requester's mention on the root message,
// "Approved by <@…>" on cards — is added around the escaped text, never
// taken from it.

// answerText is the thread reply of a model's answer: its mrkdwn
// (*bold*, _italics_, `code`, ```blocks```) kept, and &, < and >
// escaped, so that Slack shows them as the characters they are.
func answerText(s string) string {
	return balanceFences(slackEscaper.Replace(strings.ToValidUTF8(s, "\uFFFD")))
}

// breakFences puts a zero-width space between backticks that follow one
// another, so that text shown inline cannot open or close a code block.
func breakFences(s string) string {
	if !strings.Contains(s, "``") {
		return s
	}
	var b strings.Builder
	prev := false
	for _, r := range s {
		if r == '`' && prev {
			b.WriteString("\u200b")
		}
		b.WriteRune(r)
		prev = r == '`'
	}
	return b.String()
}

// balanceFences closes a code block that text opens and does not close.
func balanceFences(s string) string {
	if strings.Count(s, "```")%2 == 1 {
		if !strings.HasSuffix(s, "\n") {
			s += "\n"
		}
		s += "```"
	}
	return s
}
