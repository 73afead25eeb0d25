// Package slackui is Countersign's Slack views: the Block Kit of the
// approval cards (cards.go, the quorum card quorumcard.go, the arguments
// argsview.go, a tool's origin toolcard.go, a run the updated bot cannot
// resume fingerprint_card.go), the Home tab's view (home.go), and the
// text formats they are written in, as pure functions: data in — an
// agent.Call, a runner.Gate, a person's inbox — and slack.Blocks or a
// view request out. Package handlers posts them, publishes them and
// dispatches the clicks on their buttons by the action IDs defined here;
// nothing here talks to Slack or to storage. It imports runner only for
// the plain data the Home view and the quorum card show (runner.Gate,
// runner.Waiting, runner.DecisionRecord), never handlers.
//
// Every text built here is measured in UTF-16 code units against Block
// Kit's limits (blocktext.go), and the tests check every view against
// them, against golden files in testdata/ (go test -update rewrites
// them) and, by fuzzing, against hostile input.
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
// it (Date, UserMention, ChannelMention, MentionList). The package does
// no I/O and keeps no state; its functions are safe for concurrent use.
// Package slackuitest checks text the way Slack reads it, for tests.
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
