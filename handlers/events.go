package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack/slackevents"

	"github.com/countersign/countersign/runner"
)

// event handles the Events API.
func (s *Server) event(w http.ResponseWriter, r *http.Request, body []byte) {
	var envelope struct {
		Type      string          `json:"type"`
		Challenge string          `json:"challenge"`
		TeamID    string          `json:"team_id"`
		EventID   string          `json:"event_id"`
		Event     json.RawMessage `json:"event"`
	}
	if err := json.Unmarshal(body, &envelope); err != nil {
		http.Error(w, "malformed event", http.StatusBadRequest)
		return
	}
	switch envelope.Type {
	case slackevents.URLVerification:
		writeJSON(w, map[string]string{"challenge": envelope.Challenge})
		return
	case slackevents.CallbackEvent:
	default:
		w.WriteHeader(http.StatusOK)
		return
	}
	var ev messageEvent
	if err := json.Unmarshal(envelope.Event, &ev); err != nil || envelope.EventID == "" {
		http.Error(w, "malformed event", http.StatusBadRequest)
		return
	}
	first, err := s.store.Dedup(r.Context(), "event:"+envelope.EventID, dedupTTL)
	if err != nil {
		// Not acknowledging makes Slack deliver the event again later.
		s.log.WithError(err).Error("dedup of an event")
		http.Error(w, "store unavailable", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
	if !first {
		return
	}
	s.dispatchEvent(r.Context(), envelope.TeamID, ev)
}

// messageEvent holds the fields of app_mention and message events that
// the bot reads.
type messageEvent struct {
	Type     string `json:"type"`
	Subtype  string `json:"subtype"`
	User     string `json:"user"`
	BotID    string `json:"bot_id"`
	Text     string `json:"text"`
	Channel  string `json:"channel"`
	TS       string `json:"ts"`
	ThreadTS string `json:"thread_ts"`
}

// dispatchEvent acts on one event; shared by HTTP and Socket Mode.
func (s *Server) dispatchEvent(ctx context.Context, team string, ev messageEvent) {
	// The bot's own messages, edits, joins and the like are not requests.
	if ev.BotID != "" || ev.Subtype != "" || ev.User == "" || ev.User == s.opts.BotUserID {
		return
	}
	log := s.log.WithFields(logrus.Fields{"team": team, "channel": ev.Channel, "user": ev.User, "event": ev.Type})
	root := ev.ThreadTS
	if root == "" {
		root = ev.TS
	}
	thread := ThreadKey(team, ev.Channel, root)
	text := typedText(strings.TrimSpace(mention.ReplaceAllString(ev.Text, "")))
	switch ev.Type {
	case "app_mention":
		s.background(ctx, func(ctx context.Context) {
			if s.owns(ctx, thread) {
				s.reply(ctx, team, thread, ev, text, log)
				return
			}
			if text == "" {
				s.ephemeral(ctx, ev.Channel, root, ev.User, helpText)
				return
			}
			s.start(ctx, team, thread, ev.User, ev.Channel, text, log)
		})
	case "message":
		// Only replies in threads; a reply that mentions the bot comes
		// as app_mention too and is handled there.
		if ev.ThreadTS == "" || ev.ThreadTS == ev.TS || (s.opts.BotUserID != "" && strings.Contains(ev.Text, "<@"+s.opts.BotUserID+">")) {
			return
		}
		s.background(ctx, func(ctx context.Context) {
			if s.owns(ctx, thread) {
				s.reply(ctx, team, thread, ev, text, log)
			}
		})
	}
}

// mention matches a user mention, such as the bot's at the start of an
// app_mention.
var mention = regexp.MustCompile(`<@[A-Z0-9]+(\|[^>]*)?>`)

// owns reports whether thread is a Countersign conversation.
func (s *Server) owns(ctx context.Context, thread string) bool {
	_, err := s.svc.State(ctx, thread)
	return err == nil
}

// reply hands a thread reply to the runner and explains refusals.
func (s *Server) reply(ctx context.Context, team, thread string, ev messageEvent, text string, log logrus.FieldLogger) {
	_, _, root, _ := ParseThread(thread)
	err := s.svc.Reply(ctx, runner.Message{Thread: thread, Team: team, Channel: ev.Channel, By: ev.User, Text: text})
	var refused *runner.RefusedError
	switch {
	case err == nil:
	case errors.As(err, &refused):
		s.ephemeral(ctx, ev.Channel, root, ev.User, "Your reply rejected nothing: "+refused.Why+
			". I kept it as a note, and the agent will read it once the waiting calls are decided.")
	case errors.Is(err, runner.ErrBusy):
		s.ephemeral(ctx, ev.Channel, root, ev.User, textBusy)
	case errors.Is(err, runner.ErrFailed):
		s.ephemeral(ctx, ev.Channel, root, ev.User, textFailed)
	case errors.Is(err, runner.ErrNoThread):
	default:
		log.WithField("thread", thread).WithError(err).Error("handling a reply")
		s.ephemeral(ctx, ev.Channel, root, ev.User, textTryAgain)
	}
}
