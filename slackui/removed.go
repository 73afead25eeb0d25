package slackui

import (
	"errors"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/agent"
)

// The direct messages that tell a requester what the bot could not post
// in their conversation's thread, because it was removed from the channel
// or the channel was archived (package handlers: removed.go).

// BudgetDM bounds what a direct message quotes of an answer or an error
// (the message has a few lines of its own besides).
const BudgetDM = 3000

// ChannelGone returns Slack's error code if err says the bot can no
// longer post in a channel — it is not a member (removed, or a private
// channel it was never in), the channel is gone or archived — and
// reports whether it does. Asking again does not help; inviting the bot
// back (or unarchiving the channel) does.
func ChannelGone(err error) (code string, gone bool) {
	var se slack.SlackErrorResponse
	if !errors.As(err, &se) {
		return "", false
	}
	switch se.Err {
	case "not_in_channel", "channel_not_found", "is_archived", "channel_is_archived":
		return se.Err, true
	}
	return "", false
}

// goneWhy says, in words, why the bot can no longer post in channel.
func goneWhy(channel, code string) string {
	where := ChannelMention(channel)
	switch code {
	case "is_archived", "channel_is_archived":
		return "I can't post in " + where + " any more: it was archived."
	case "channel_not_found":
		return "I can't post in " + where + " any more: I was removed from it, or it was deleted."
	}
	return "I can't post in " + where + " any more: I was removed from it."
}

// dmQuote is text from the model, a tool or an error, escaped as mrkdwn
// and cut to BudgetDM, for a direct message.
func dmQuote(s string) string { return BalanceFences(ClipText(Mrkdwn(s), BudgetDM)) }

// GoneAnswerText tells the requester, by direct message, the answer the
// bot could not post in their thread in channel.
func GoneAnswerText(channel, code, answer string) string {
	return goneWhy(channel, code) + " Here is my answer to your request there:\n\n" + dmQuote(answer)
}

// GoneResultText tells the requester the outcome of a call, which the
// bot could not post in their thread in channel.
func GoneResultText(channel, code string, c agent.Call) string {
	return goneWhy(channel, code) + " The " + CodeSpan(c.Tool) + " call of your request there ended:\n" + ResultText(c)
}

// GoneCardText tells the requester that a call of their request waits for
// approval, though its card could not be posted in their thread in
// channel: its approvers find it in the bot's Home tab (and in the card's
// copies, if the policy sends any).
func GoneCardText(channel, code string, c agent.Call) string {
	return goneWhy(channel, code) + " The " + CodeSpan(c.Tool) + " call of your request there waits for approval: " +
		"its approvers can decide it from my Home tab, and I'll tell you the outcome here if I still can't post there."
}

// GoneUnknownText tells the requester that a call of their request was
// running when the bot stopped, so that nobody knows whether it ran:
// its card, whose buttons settle it, waits to be shown in their thread.
func GoneUnknownText(channel, code string, c agent.Call) string {
	return goneWhy(channel, code) + " The " + CodeSpan(c.Tool) + " call of your request there was running when I stopped, " +
		"and I can't tell whether it ran. Its card, to settle it, goes in the thread: invite me back with `/invite @Countersign` and I'll post it."
}

// GoneFailedText tells the requester the error their run stopped with.
// A run that may be retried says how.
func GoneFailedText(channel, code, text string, final bool) string {
	s := goneWhy(channel, code) + " Your request there stopped with an error:\n\n" + dmQuote(text)
	if !final {
		s += "\n\nInvite me back with `/invite @Countersign` to retry it there, or ask me again elsewhere."
	}
	return s
}

// GoneNoteText tells the requester a line of their thread the bot could
// not post there (a cancellation, the bot's update); line is mrkdwn.
func GoneNoteText(channel, code, line string) string {
	return goneWhy(channel, code) + " About your request there: " + line
}

// GoneAskText begins a tool's request for input sent by direct message
// because the bot could not post it in the thread in channel.
func GoneAskText(channel, code string) string {
	return goneWhy(channel, code) + " A tool working on your request there asks you:"
}
