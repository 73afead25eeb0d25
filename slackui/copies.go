package slackui

import (
	"fmt"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/tools"
)

// The copies of a card (in the notify channel, by direct message) and
// the reminders and escalations of a call that waits.

// Linkable reports whether link can stand in a <link|label> of a Slack
// message.
func Linkable(link string) bool {
	return strings.HasPrefix(link, "https://") && len(link) <= 500 && !strings.ContainsAny(link, "<>| \n")
}

// CopyBlocks are a copy's blocks: a line that says where the call waits,
// with a link to its thread, then the card's own.
func CopyBlocks(channel, link string, card []slack.Block) []slack.Block {
	where := "Waiting in " + copyWhere(channel)
	if Linkable(link) {
		where += " · <" + link + "|Open the thread>"
	}
	return append([]slack.Block{ContextBlock(where)}, card...)
}

// copyWhere links the channel of a copy's thread; anything that is not
// a channel ID is shown as "a thread".
func copyWhere(id string) string {
	if m := ChannelMention(id); strings.HasPrefix(m, "<#") {
		return m
	}
	return "a thread"
}

func idMentions(ids []string) string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = ApproverMention(id)
	}
	return strings.Join(out, ", ")
}

// ReminderText is the thread message that reminds people (user and
// user-group IDs; none when anyone may decide) that a call to tool has
// waited for approval for waited.
func ReminderText(tool string, people []string, waited time.Duration) string {
	what := fmt.Sprintf("%s has waited %s for approval", ClipText(slackEscape(OneLine(tool)), BudgetName), tools.FormatDuration(waited))
	if len(people) == 0 {
		return "Reminder: " + what
	}
	return "Reminder: " + idMentions(people) + " — " + what
}

// EscalationText is the thread message that tells people (user and
// user-group IDs) that a call to tool waited for approval for waited, and
// that they may now decide it.
func EscalationText(tool string, people []string, waited time.Duration) string {
	return fmt.Sprintf("Escalated: %s — %s has waited %s for approval; you may now decide it too (the card is above).",
		idMentions(people), ClipText(slackEscape(OneLine(tool)), BudgetName), tools.FormatDuration(waited))
}
