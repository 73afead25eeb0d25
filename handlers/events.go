package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack/slackevents"

	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slackfiles"
	"github.com/countersign/countersign/slackui"
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
	if group, channel, ok := membershipChange(ev.Type, envelope.Event); ok {
		s.membershipChanged(w, r, envelope.EventID, group, channel)
		return
	}
	if ev.Type == "app_home_opened" {
		s.homeOpened(w, r, envelope.EventID, envelope.Event)
		return
	}
	if channelGoneEvent(ev.Type) {
		s.channelGone(envelope.Event)
		w.WriteHeader(http.StatusOK)
		return
	}
	rec, ok := s.request(envelope.TeamID, ev)
	if !ok {
		w.WriteHeader(http.StatusOK) // not a request: the bot's own message, an edit, a join…
		return
	}
	// The request is stored before it is answered, so that it outlives
	// this process; a repeated delivery finds it stored.
	id := "event:" + envelope.EventID
	h, first, err := s.accept(r.Context(), id, rec)
	if err != nil {
		// Not acknowledging makes Slack deliver the event again later.
		s.log.WithError(err).Error("accepting an event")
		http.Error(w, "store unavailable", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
	if first {
		s.carryOn(r.Context(), id, h, rec)
	}
}

// homeOpened publishes the Home tab of the person who opened it.
func (s *Server) homeOpened(w http.ResponseWriter, r *http.Request, eventID string, raw json.RawMessage) {
	var ev struct {
		User string `json:"user"`
		Tab  string `json:"tab"`
	}
	w.WriteHeader(http.StatusOK)
	if s.home == nil || json.Unmarshal(raw, &ev) != nil || ev.User == "" || ev.Tab != "home" {
		return // the Messages tab, or the Home tab turned off
	}
	// Publishing twice does no harm, so a store that cannot tell a
	// repeated delivery does not stop it.
	if first, err := s.store.Dedup(r.Context(), "event:"+eventID, dedupTTL); err == nil && !first {
		return
	}
	s.background(r.Context(), func(ctx context.Context) { s.home.Opened(ctx, ev.User) })
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
	// Files are the files attached to the message (slackfiles.Decode):
	// read leniently, so that an odd list never makes the event
	// malformed.
	Files json.RawMessage `json:"files"`
}

// requestSubtypes are the subtypes of messages people write that are
// requests like any: a reply also sent to the channel, and a message
// with files. Every other subtype (an edit, a join, a bot's message, a
// deletion…) is not a request.
var requestSubtypes = map[string]bool{"": true, "thread_broadcast": true, "file_share": true}

// request turns an event into the request it makes, if it makes one: a
// mention of the bot, or a reply in a thread.
func (s *Server) request(team string, ev messageEvent) (intake, bool) {
	// The bot's own messages, edits, joins and the like are not requests.
	if ev.BotID != "" || !requestSubtypes[ev.Subtype] || ev.User == "" || ev.User == s.opts.BotUserID || ev.Channel == "" || ev.TS == "" {
		return intake{}, false
	}
	rec := intake{Team: team, Channel: ev.Channel, User: ev.User, TS: ev.TS, Root: ev.ThreadTS,
		Text: slackui.MentionText(ev.Text), Files: slackfiles.Decode(ev.Files)}
	if rec.Root == "" {
		rec.Root = ev.TS
	}
	switch ev.Type {
	case "app_mention":
		rec.Kind = intakeMention
	case "message":
		// Only replies in threads; a reply that mentions the bot comes
		// as app_mention too and is handled there.
		if ev.ThreadTS == "" || ev.ThreadTS == ev.TS || (s.opts.BotUserID != "" && strings.Contains(ev.Text, "<@"+s.opts.BotUserID+">")) {
			return intake{}, false
		}
		rec.Kind = intakeReply
	default:
		return intake{}, false
	}
	return rec, true
}

// owns reports whether thread is a Countersign conversation. Only a
// definite answer is one: an error reading the thread (Redis down, a
// Cluster failing over) is returned, never taken for "not a
// conversation".
func (s *Server) owns(ctx context.Context, thread string) (bool, error) {
	_, err := s.svc.State(ctx, thread)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, runner.ErrNoThread):
		return false, nil
	}
	return false, err
}

// reply hands a thread reply, the request id, to the runner and explains
// refusals. It reports whether the reply is settled: false when the
// runner could not be asked (a storage error), so that the intake drives
// it again. A reply the runner kept until its conversation's first save
// (runner.ErrKept) is not settled, and reply reports it kept; kept says
// it was kept before, and expired that its kept time is over: this look
// is its last (runner.Message.Expired).
func (s *Server) reply(ctx context.Context, team, thread string, ev messageEvent, text string, images []llm.Image, id string, kept, expired bool, log logrus.FieldLogger) (ok, keptNow bool) {
	_, _, root, _ := slackui.ParseThread(thread)
	err := s.svc.Reply(ctx, runner.Message{Thread: thread, Team: team, Channel: ev.Channel, By: ev.User, Text: text, Images: images,
		TS: ev.TS, Ref: id, Kept: kept, Expired: kept && expired})
	var refused *runner.RefusedError
	var final *runner.FinalError
	switch {
	case errors.Is(err, runner.ErrKept):
		return false, true
	case err == nil:
	case errors.As(err, &refused) && refused.TryAgain:
		// Who may decide could not be checked (a look-up failed): the
		// reply decided nothing and stays due, to be tried again.
		warnFirst(log.WithField("thread", thread), err, "checking a reply; it stays due and is tried again")
		return false, false
	case errors.As(err, &refused):
		s.ephemeral(ctx, ev.Channel, root, ev.User, "Your reply rejected nothing: "+slackui.RefusalText(refused)+
			". I kept it as a note, and the agent will read it once the waiting calls are decided.")
	case errors.Is(err, runner.ErrBusy):
		s.ephemeral(ctx, ev.Channel, root, ev.User, slackui.TextBusy)
	case errors.As(err, &final):
		s.ephemeral(ctx, ev.Channel, root, ev.User, slackui.FinalReplyAnswer(final))
	case errors.Is(err, runner.ErrFailed):
		s.ephemeral(ctx, ev.Channel, root, ev.User, slackui.TextFailed)
	case errors.Is(err, runner.ErrNoThread):
	default:
		// The reply was acknowledged and is stored: it stays due, and
		// the intake carries it on once the store answers again.
		warnFirst(log.WithField("thread", thread), err, "handling a reply; it stays due and is tried again")
		return false, false
	}
	return true, false
}
