package handlers

import (
	"context"
	"errors"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slackui"
)

// postGraphChanged posts the card of a runner.GraphChanged event.
func (r *Reporter) postGraphChanged(ctx context.Context, e runner.Event, channel, root string) error {
	value, err := r.newRef(ctx, ref{Thread: e.Thread})
	if err != nil {
		return err
	}
	_, err = r.post(ctx, channel, slack.MsgOptionTS(root),
		slack.MsgOptionText("The bot was updated while this request waited.", false),
		slack.MsgOptionBlocks(slackui.GraphChangedCard(e.Text, value)...))
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
			s.ephemeral(ctx, c.channel(), threadTS(c.cb), c.user(), "You can't do this: "+slackui.RefusalText(refused)+".")
		case errors.Is(err, runner.ErrNotChanged):
			s.ephemeral(ctx, c.channel(), threadTS(c.cb), c.user(), "This request was restarted or cancelled already.")
		case errors.Is(err, runner.ErrBusy):
			s.ephemeral(ctx, c.channel(), threadTS(c.cb), c.user(), slackui.TextBusy)
		case err != nil:
			c.log.WithError(err).Error("restarting or cancelling a run after an update")
		}
	})
	return ""
}
