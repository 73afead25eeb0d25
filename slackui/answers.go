package slackui

import (
	"errors"
	"fmt"
	"strings"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/runner"
)

// What the bot answers a person, in mrkdwn: ephemeral answers to clicks,
// commands and replies, and the help.

// Texts people see.
const (
	TextTryAgain   = "Countersign can't reach its database right now, so nothing was done. Please try again in a minute."
	TextNotPending = "This request is no longer pending."
	TextBusy       = "I'm still working on this thread. Reply again once I've answered."
	TextFailed     = "The last run in this thread stopped with an error. Press *Retry* on the error card first."
	// TextFinalAdvice is what to do about a run that failed in a way a
	// retry cannot fix.
	TextFinalAdvice = "Start a new thread to go on; if it fails there too, tell whoever runs the bot."
)

// TextRecording answers a click whose decision is still being recorded
// when its request ends: the card shows it once it is, and the person
// is told if it is not.
const TextRecording = "Your decision is being recorded: the card will show it. If it can't be, I'll tell you here."

// The notification texts of the error card and of the card of a run the
// updated bot cannot resume (ErrorCard, GraphChangedCard).
const (
	TextRunFailed    = "The run stopped with an error."
	TextGraphChanged = "The bot was updated while this request waited."
)

// HelpText is mrkdwn, in which "<" and ">" are written as entities: Slack
// reads a bare "<…>" as a link or mention.
const HelpText = "*Countersign* runs an AI agent for you, and asks before any risky action.\n" +
	"• `/agent &lt;request&gt;` — start: I post your request and work in its thread.\n" +
	"• Each tool call that needs approval gets a card: *Approve*, *Edit* (change the arguments) or *Reject* (with a reason).\n" +
	"• Reply in the thread to give feedback while a call waits, or to continue the conversation after I answer.\n" +
	"• You can also mention me: `@Countersign &lt;request&gt;`."

// CantPostText tells a person why the bot could not post their request,
// and what to do.
func CantPostText(err error) string {
	var se slack.SlackErrorResponse
	if errors.As(err, &se) && (se.Err == "is_archived" || se.Err == "channel_is_archived") {
		return "This channel is archived, so I can't work here. Send your request in another channel."
	}
	if errors.As(err, &se) && (se.Err == "not_in_channel" || se.Err == "channel_not_found") {
		return "I'm not in this channel, so I can't work here yet. Invite me with `/invite @Countersign`, then send your request again."
	}
	return "I couldn't post in this channel (" + err.Error() + "). Invite me with `/invite @Countersign` and try again."
}

// NotOpened tells the person that the modal of a button could not be
// opened.
func NotOpened(actionID string, err error) string {
	if actionID == ActionShowArgs {
		return "I couldn't open the arguments (" + err.Error() + "). Please try again."
	}
	return "I couldn't open the form (" + err.Error() + "). Please try again."
}

// RefusalText is a refusal in mrkdwn: its words escaped, its people and
// channels as Slack mentions.
func RefusalText(r *runner.RefusedError) string {
	return r.Render(MrkdwnInline, func(ids []string) string { return MentionList(ids, BudgetMentions) }, ChannelMention)
}

// AlreadyText tells a late clicker who decided first.
func AlreadyText(d agent.Decision) string {
	if d.Kind == agent.Expire {
		return "This request has expired."
	}
	return fmt.Sprintf("Already %s by %s.", d.Kind.Past(), MentionList(d.Approvers(), BudgetMentions))
}

// DecisionAnswer is what to tell a person whose decision (or look at a
// call) the runner did not take, or "" if it did; unknown reports an
// error that the text (TextTryAgain) does not explain, to be logged.
func DecisionAnswer(err error) (text string, unknown bool) {
	var lost *runner.AlreadyDecidedError
	var refused *runner.RefusedError
	var invalid *runner.InvalidArgsError
	switch {
	case err == nil:
		return "", false
	case errors.As(err, &lost):
		return AlreadyText(lost.Decision), false
	case errors.As(err, &refused) && refused.TryAgain:
		return RefusalText(refused) + ".", false // not an answer about the person
	case errors.As(err, &refused):
		return "You can't decide this call: " + RefusalText(refused) + ".", false
	case errors.As(err, &invalid):
		return "These arguments don't fit the tool: " + invalid.Err.Error(), false
	case errors.Is(err, runner.ErrNotPending):
		return TextNotPending, false
	}
	return TextTryAgain, true
}

// RetryAnswer is what to tell a person whose Retry on a run's error card
// the runner refused, or "" if it did not; unknown as for DecisionAnswer.
func RetryAnswer(err error) (text string, unknown bool) {
	var refused *runner.RefusedError
	var final *runner.FinalError
	switch {
	case err == nil:
		return "", false
	case errors.As(err, &final):
		return "Retrying would fail the same way, so nothing was run. The run stopped: " + finalText(final) + ". " + TextFinalAdvice, false
	case errors.As(err, &refused) && refused.TryAgain:
		return RefusalText(refused) + ".", false // not an answer about the person
	case errors.As(err, &refused):
		return "You can't retry this run: " + RefusalText(refused) + ".", false
	case errors.Is(err, runner.ErrNotFailed), errors.Is(err, runner.ErrNotPending):
		return "This run is no longer stopped; nothing to retry.", false
	case errors.Is(err, runner.ErrBusy):
		return TextBusy, false
	}
	return TextTryAgain, true
}

// FinalReplyAnswer is what to tell a person who replied in a thread whose
// last run failed in a way a retry cannot fix.
func FinalReplyAnswer(final *runner.FinalError) string {
	return "I can't go on in this thread: its last run stopped with an error a retry can't fix: " + finalText(final) + ". " + TextFinalAdvice
}

// finalText is a final failure's text in mrkdwn, on one line, clipped.
func finalText(final *runner.FinalError) string {
	return ClipText(slackEscape(strings.TrimRight(OneLine(final.Text), ".")), BudgetError)
}

// ChangedRunAnswer is what to tell a person whose Restart or Cancel on
// the card of a run the updated bot cannot resume was refused, or "";
// unknown reports an error to be logged, with nothing to tell.
func ChangedRunAnswer(err error) (text string, unknown bool) {
	var refused *runner.RefusedError
	switch {
	case err == nil:
		return "", false
	case errors.As(err, &refused):
		return "You can't do this: " + RefusalText(refused) + ".", false
	case errors.Is(err, runner.ErrNotChanged):
		return "This request was restarted or cancelled already.", false
	case errors.Is(err, runner.ErrBusy):
		return TextBusy, false
	}
	return "", true
}
