package handlers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/runner"
)

// dedupTTL is how long a delivery is remembered; Slack retries within
// minutes.
const dedupTTL = time.Hour

// helpText is mrkdwn, in which "<" and ">" are written as entities: Slack
// reads a bare "<…>" as a link or mention.
const helpText = "*Countersign* runs an AI agent for you, and asks before any risky action.\n" +
	"• `/agent &lt;request&gt;` — start: I post your request and work in its thread.\n" +
	"• Each tool call that needs approval gets a card: *Approve*, *Edit* (change the arguments) or *Reject* (with a reason).\n" +
	"• Reply in the thread to give feedback while a call waits, or to continue the conversation after I answer.\n" +
	"• You can also mention me: `@Countersign &lt;request&gt;`."

// command handles /agent.
func (s *Server) command(w http.ResponseWriter, r *http.Request, body []byte) {
	form, err := url.ParseQuery(string(body))
	if err != nil || form.Get("channel_id") == "" || form.Get("user_id") == "" {
		http.Error(w, "malformed slash command", http.StatusBadRequest)
		return
	}
	team, channel, user := form.Get("team_id"), form.Get("channel_id"), form.Get("user_id")
	text := strings.TrimSpace(form.Get("text"))
	log := s.log.WithFields(logrus.Fields{"team": team, "channel": channel, "user": user, "command": form.Get("command")})

	if text == "" || strings.EqualFold(text, "help") {
		writeJSON(w, map[string]string{"response_type": "ephemeral", "text": helpText})
		return
	}
	// Slack retries a command it did not see answered in time; the
	// trigger_id is the same on every delivery.
	first, err := s.store.Dedup(r.Context(), "command:"+form.Get("trigger_id"), dedupTTL)
	if err != nil {
		log.WithError(err).Error("dedup of a slash command")
		writeJSON(w, map[string]string{"response_type": "ephemeral", "text": textTryAgain})
		return
	}
	if !first {
		log.WithField("retry", r.Header.Get("X-Slack-Retry-Num")).Info("repeated slash command ignored")
		w.WriteHeader(http.StatusOK)
		return
	}
	w.WriteHeader(http.StatusOK)
	s.background(r.Context(), func(ctx context.Context) {
		_, ts, err := s.api.PostMessageContext(ctx, channel, slack.MsgOptionText(fmt.Sprintf("<@%s> asked: %s", user, text), false))
		if err != nil {
			log.WithError(err).Warn("posting the request's root message")
			s.ephemeral(ctx, channel, "", user, "I couldn't post in this channel ("+err.Error()+"). Invite me with `/invite @Countersign` and try again.")
			return
		}
		s.start(ctx, team, ThreadKey(team, channel, ts), user, channel, typedText(text), log)
	})
}

// start begins a conversation in thread.
func (s *Server) start(ctx context.Context, team, thread, user, channel, text string, log logrus.FieldLogger) {
	err := s.svc.Start(ctx, runner.StartRequest{Thread: thread, Requester: user, Team: team, Channel: channel, Text: text})
	switch {
	case errors.Is(err, runner.ErrThreadExists):
		log.WithField("thread", thread).Info("conversation already started")
	case err != nil:
		log.WithField("thread", thread).WithError(err).Error("starting a conversation")
		_, _, root, _ := ParseThread(thread)
		s.ephemeral(ctx, channel, root, user, textTryAgain)
	}
}
