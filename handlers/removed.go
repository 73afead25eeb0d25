package handlers

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"sync"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slackretry"
	"github.com/countersign/countersign/slackui"
)

// A conversation whose channel the bot can no longer post in: someone
// removed the bot (/remove, a channel manager kicking it), or archived
// the channel. Slack refuses what the bot posts or updates there
// (slackui.ChannelGone), and asking again does not help, so what the
// thread would have shown is not retried: the requester is told by
// direct message — the answer, the outcome of a call they asked for, a
// card that could not be posted (its approvers decide it from the Home
// tab, or a copy), the error the run stopped with — and the event counts
// as shown. The log says it once per conversation and process.

// Report implements runner.Reporter: it shows e in its thread, or tells
// the requester by direct message if the thread's channel refuses the
// bot.
func (r *Reporter) Report(ctx context.Context, e runner.Event) error {
	err := r.report(ctx, e)
	code, gone := slackui.ChannelGone(err)
	if !gone {
		return err
	}
	_, channel, _, _ := slackui.ParseThread(e.Thread)
	if e.Kind == runner.ApprovalNeeded && e.Call.Status == agent.Unknown {
		// Its buttons settle it, and only in the thread: it is shown
		// there once the bot is invited back. The requester is told
		// once (by this process).
		if r.goneSeen.first(e.Thread + "\x00" + cardKey(e.Call.Key, e.Call.Attempts)) {
			_ = r.cantShow(ctx, e, channel, code)
		}
		return err
	}
	return r.cantShow(ctx, e, channel, code)
}

// cantShow tells the requester by direct message what e would have
// shown in a thread of channel, which refuses the bot with Slack's error
// code. It returns an error only when Slack did not answer the direct
// message (so the event is shown again later); a refusal is logged.
func (r *Reporter) cantShow(ctx context.Context, e runner.Event, channel, code string) error {
	log := r.log.WithFields(logrus.Fields{"thread": e.Thread, "channel": channel, "error": code})
	if r.goneSeen.first(e.Thread) {
		log.WithField("event", e.Kind.String()).Warn("the bot can no longer post in the conversation's channel; the requester is told by direct message")
	}
	to, text := goneMessage(e, channel, code)
	if to == "" || text == "" {
		return nil
	}
	err := r.directMessage(ctx, to, text)
	switch {
	case err == nil:
		return nil
	case slackretry.Refused(err):
		log.WithFields(logrus.Fields{"user": to, "event": e.Kind.String()}).WithError(err).Warn("the requester could not be told by direct message")
		return nil
	}
	return err
}

// goneMessage is the direct message that tells what e would have shown
// in its thread, and whom it goes to; "" for events that need none (a
// card's redraw, a reminder, text still being written: what follows
// says it).
func goneMessage(e runner.Event, channel, code string) (to, text string) {
	if e.State == nil {
		return "", ""
	}
	turn := cmp.Or(e.State.TurnBy, e.State.Requester)
	switch e.Kind {
	case runner.Answer:
		return turn, slackui.GoneAnswerText(channel, code, e.Text)
	case runner.RunCancelled:
		return turn, slackui.GoneNoteText(channel, code, slackui.CancelledText(e.People))
	case runner.RunFailed:
		return turn, slackui.GoneFailedText(channel, code, e.Text, e.Final)
	case runner.GraphChanged:
		return turn, slackui.GoneNoteText(channel, code, slackui.TextGraphChanged+" Ask me again in a channel I'm in.")
	case runner.ApprovalNeeded:
		if e.Call.Status == agent.Unknown {
			return e.Call.AskedBy(e.State), slackui.GoneUnknownText(channel, code, *e.Call)
		}
		return e.Call.AskedBy(e.State), slackui.GoneCardText(channel, code, *e.Call)
	case runner.CallFinished:
		// The outcome of a call someone approved (the answer tells what
		// the others did); one that waits for input is asked for apart.
		if c := e.Call; c.NeedsApproval && c.Status != agent.Asking {
			return c.AskedBy(e.State), slackui.GoneResultText(channel, code, *c)
		}
	}
	return "", ""
}

// directMessage posts text to user in their direct message with the bot.
func (r *Reporter) directMessage(ctx context.Context, user, text string) error {
	var dm *slack.Channel
	err := r.retry(ctx, func() error {
		var err error
		dm, _, _, err = r.api.OpenConversationContext(ctx, &slack.OpenConversationParameters{Users: []string{user}})
		return err
	})
	if err != nil {
		return err
	}
	if dm == nil || dm.ID == "" {
		return errors.New("conversations.open named no channel")
	}
	_, err = r.post(ctx, dm.ID, slack.MsgOptionText(text, false))
	return err
}

// cardless reports whether a card's recorded ts says it was never posted:
// its channel refused the bot. Its copies stand for it.
func cardless(ts []byte) bool { return len(ts) == 0 }

// isGone reports whether err says the channel refuses the bot.
func isGone(err error) bool {
	_, gone := slackui.ChannelGone(err)
	return gone
}

// goneThreads are the conversations this process logged as gone: at most
// maxGone, the oldest forgotten first (they are long over).
type goneThreads struct {
	mu sync.Mutex
	m  map[string]struct{}
}

const maxGone = 4096

// first reports whether thread was not logged yet, and marks it.
func (g *goneThreads) first(thread string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, seen := g.m[thread]; seen {
		return false
	}
	if g.m == nil || len(g.m) >= maxGone {
		g.m = map[string]struct{}{}
	}
	g.m[thread] = struct{}{}
	return true
}

// channelGoneEvent reports whether an event of type kind tells the bot
// that it can no longer post in a channel.
func channelGoneEvent(kind string) bool {
	switch kind {
	case "channel_left", "group_left", "channel_archive", "group_archive", "channel_deleted", "group_deleted":
		return true
	}
	return false
}

// channelGone logs a signed event that says the bot was removed from a
// channel, or the channel archived or deleted. Nothing else follows from
// it: the conversations there carry on, and whatever Slack refuses to
// show in their threads goes to their requesters by direct message
// (Reporter.cantShow). An event that says nothing is the bot's own
// business is left.
func (s *Server) channelGone(raw json.RawMessage) {
	var ev struct {
		Type    string `json:"type"`
		Channel string `json:"channel"`
		Actor   string `json:"actor_id"`
		User    string `json:"user"`
	}
	if json.Unmarshal(raw, &ev) != nil || ev.Channel == "" {
		return
	}
	s.log.WithFields(logrus.Fields{"event": ev.Type, "channel": ev.Channel, "by": cmp.Or(ev.Actor, ev.User)}).
		Info("the bot can no longer post in a channel; its conversations' requesters are told by direct message what their threads cannot show")
}
