package handlers

import (
	"context"
	"errors"
	"strings"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/runner"
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
		if l = oneLine(l); l != "" {
			lines = append(lines, "• "+slackEscape(l))
		}
	}
	text := "🔄 The bot was updated while this request waited, and it can't go on as it was:\n" +
		clipText(strings.Join(lines, "\n"), budgetError) +
		"\n*Restart from here* lets the agent plan again with what it can do now; *Cancel* stops this request."
	return []slack.Block{
		sectionBlock(text),
		slack.NewActionBlock(BlockRunActions,
			buttonElement(ActionRestartRun, "Restart from here", ref, slack.StylePrimary),
			buttonElement(ActionCancelRun, "Cancel", ref, slack.StyleDanger)),
	}
}

// CancelledText is the thread's line of a runner.RunCancelled event: who
// cancelled the run, as a mention.
func CancelledText(by []string) string {
	who := "_someone_"
	if len(by) > 0 {
		who = mentionList(by, budgetMentions)
	}
	return "✖️ Cancelled by " + who + ": the bot was updated while this request waited."
}

// postGraphChanged posts the card of a runner.GraphChanged event.
func (r *Reporter) postGraphChanged(ctx context.Context, e runner.Event, channel, root string) error {
	value, err := r.newRef(ctx, ref{Thread: e.Thread})
	if err != nil {
		return err
	}
	_, err = r.post(ctx, channel, slack.MsgOptionTS(root),
		slack.MsgOptionText("The bot was updated while this request waited.", false),
		slack.MsgOptionBlocks(GraphChangedCard(e.Text, value)...))
	return err
}

// changedRun restarts or cancels, from its card, a run the updated bot
// cannot resume.
func (s *Server) changedRun(ctx context.Context, c click, restart bool) string {
	m := runner.Message{Thread: c.ref.Thread, Team: c.cb.Team.ID, Channel: c.channel(), By: c.user()}
	s.background(ctx, func(ctx context.Context) {
		var err error
		if restart {
			err = s.svc.RestartChanged(ctx, m)
		} else {
			err = s.svc.CancelChanged(ctx, m)
		}
		var refused *runner.RefusedError
		switch {
		case errors.As(err, &refused):
			s.ephemeral(ctx, c.channel(), threadTS(c.cb), c.user(), "You can't do this: "+refusalText(refused)+".")
		case errors.Is(err, runner.ErrNotChanged):
			s.ephemeral(ctx, c.channel(), threadTS(c.cb), c.user(), "This request was restarted or cancelled already.")
		case errors.Is(err, runner.ErrBusy):
			s.ephemeral(ctx, c.channel(), threadTS(c.cb), c.user(), textBusy)
		case err != nil:
			c.log.WithError(err).Error("restarting or cancelling a run after an update")
		}
	})
	return ""
}
