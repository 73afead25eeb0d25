package main

import (
	"context"
	"errors"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/runner"
)

// changed asks what to do with a run the updated bot cannot resume, and
// does it. It reports false if the person quit.
func (c *chatSession) changed(ctx context.Context, st *agent.State, changes []string) bool {
	c.term.printf("The bot was updated while this request waited, and it can't go on as it was:\n")
	for _, ch := range changes {
		c.term.printf("  • %s\n", ch)
	}
	for {
		answer, ok := c.term.ask("[r]estart from here, [c]ancel or [q]uit> ")
		var err error
		switch {
		case !ok || answer == "q":
			return false
		case answer == "r":
			err = c.svc.RestartChanged(ctx, runner.Message{Thread: c.thread, Team: st.Team, Channel: st.Channel, By: c.user})
		case answer == "c":
			err = c.svc.CancelChanged(ctx, runner.Message{Thread: c.thread, Team: st.Team, Channel: st.Channel, By: c.user})
		default:
			continue
		}
		var refused *runner.RefusedError
		switch {
		case errors.As(err, &refused):
			c.term.printf("You can't do this: %s.\n", refusalText(refused))
		case err != nil:
			c.term.printf("error: %s\n", plainText(err.Error()))
		}
		return true
	}
}
