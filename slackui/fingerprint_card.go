package slackui

import (
	"strings"

	"github.com/slack-go/slack"
)

// The buttons of a run the updated bot cannot resume (runner.GraphChanged).
const (
	ActionRestartRun = "restart_run"
	ActionCancelRun  = "cancel_run"
)

// GraphChangedCard is the message of a run that waited while the bot was
// updated and cannot go on as it was: what changed (one change a line),
// and the buttons Restart from here and Cancel, whose value is ref.
func GraphChangedCard(changes string, ref string) []slack.Block {
	var lines []string
	for _, l := range strings.Split(changes, "\n") {
		if l = OneLine(l); l != "" {
			lines = append(lines, "• "+slackEscape(l))
		}
	}
	text := "🔄 The bot was updated while this request waited, and it can't go on as it was:\n" +
		ClipText(strings.Join(lines, "\n"), BudgetError) +
		"\n*Restart from here* lets the agent plan again with what it can do now; *Cancel* stops this request."
	return []slack.Block{
		SectionBlock(text),
		slack.NewActionBlock(BlockRunActions,
			Button(ActionRestartRun, "Restart from here", ref, slack.StylePrimary),
			Button(ActionCancelRun, "Cancel", ref, slack.StyleDanger)),
	}
}

// CancelledText is the thread's line of a runner.RunCancelled event: who
// cancelled the run, as a mention.
func CancelledText(by []string) string {
	who := "_someone_"
	if len(by) > 0 {
		who = MentionList(by, BudgetMentions)
	}
	return "✖️ Cancelled by " + who + ": the bot was updated while this request waited."
}
