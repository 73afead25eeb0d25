// Package slackui is Slack text formats and, later, Block Kit views as
// pure functions.
//
// Slack reads text in three formats, and text from the model, a tool, an
// MCP server or a person is escaped for the one it goes in, with one
// escaper each:
//
//   - mrkdwn (Mrkdwn, MrkdwnInline): a message's text and the text of
//     section and context blocks. Slack gives &, < and > a meaning
//     (links <url|label>, mentions <@U…>, <#C…>, <!subteam^…>,
//     broadcasts <!here>); escaped, none of them can come from the text.
//   - Markdown (Markdown, MarkdownPart): the markdown_text of streamed
//     messages and markdown blocks. Besides Slack's three characters,
//     Markdown makes links of [label](target), [label][ref] with a
//     definition [ref]: target, images ![alt](src), autolinks <…> and
//     HTML; see markdown.go.
//   - plain_text (PlainText): headers, buttons, modal titles. Slack
//     makes no link or mention of it.
//
// In every format the escapers drop the Unicode controls that reorder
// text (U+202A–U+202E, U+2066–U+2069), with which a URL can be shown
// as another, and replace invalid UTF-8. A bare URL stays a link: it
// shows its own target.
//
// The bot's own markup — the mention of a requester, a date, a link it
// builds — is added around escaped text by the caller, never taken from
// it. The package does no I/O and keeps no state; its functions are safe
// for concurrent use. Package slackuitest checks text the way Slack
// reads it, for tests.
package slackui

import "strings"

// zwsp, a zero-width space, keeps characters apart that Slack would
// otherwise read together (a code fence, "](" of a link), invisibly.
const zwsp = "\u200b"

// reordering reports whether r is a Unicode control that changes the
// order in which text is shown: embeddings, overrides and isolates.
func reordering(r rune) bool {
	return (r >= '\u202a' && r <= '\u202e') || (r >= '\u2066' && r <= '\u2069')
}

// clean replaces invalid UTF-8 and drops the controls that reorder text.
func clean(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if !strings.ContainsFunc(s, reordering) {
		return s
	}
	return strings.Map(func(r rune) rune {
		if reordering(r) {
			return -1
		}
		return r
	}, s)
}
