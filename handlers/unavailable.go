package handlers

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"

	"github.com/countersign/countersign/slackui"
)

// Unavailable answers Slack while the bot has no storage at all yet (it
// is starting, and its Redis does not answer), as the endpoints answer
// during an outage: an event is not acknowledged, so that Slack delivers
// it again later; a slash command and a click are told that nothing was
// done and to try again; an edit or reject form says so and stays open.
// Requests are verified as ever; nothing is stored and nothing runs. A
// server made for it by New needs no runner and no store; its Shutdown
// waits for the answers still being posted.
func (s *Server) Unavailable() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /slack/commands", s.verifier.Middleware(s.commandUnavailable))
	mux.Handle("POST /slack/events", s.verifier.Middleware(s.eventUnavailable))
	mux.Handle("POST /slack/interactions", s.verifier.Middleware(s.interactionUnavailable))
	return mux
}

// commandUnavailable answers help, which needs nothing stored, and says
// to try again to anything else.
func (s *Server) commandUnavailable(w http.ResponseWriter, _ *http.Request, body []byte) {
	form, err := url.ParseQuery(string(body))
	if err != nil || form.Get("channel_id") == "" || form.Get("user_id") == "" {
		http.Error(w, "malformed slash command", http.StatusBadRequest)
		return
	}
	text := strings.TrimSpace(form.Get("text"))
	if text == "" || strings.EqualFold(text, "help") {
		writeJSON(w, map[string]string{"response_type": "ephemeral", "text": slackui.HelpText})
		return
	}
	writeJSON(w, map[string]string{"response_type": "ephemeral", "text": slackui.TextTryAgain})
}

// eventUnavailable answers Slack's URL check, which needs nothing
// stored, and leaves every event unacknowledged.
func (s *Server) eventUnavailable(w http.ResponseWriter, _ *http.Request, body []byte) {
	var envelope struct {
		Type      string `json:"type"`
		Challenge string `json:"challenge"`
	}
	if err := json.Unmarshal(body, &envelope); err != nil {
		http.Error(w, "malformed event", http.StatusBadRequest)
		return
	}
	switch envelope.Type {
	case slackevents.URLVerification:
		writeJSON(w, map[string]string{"challenge": envelope.Challenge})
	case slackevents.CallbackEvent:
		// Not acknowledging makes Slack deliver the event again later.
		http.Error(w, "store unavailable", http.StatusServiceUnavailable)
	default:
		w.WriteHeader(http.StatusOK)
	}
}

// interactionUnavailable tells the person who clicked that nothing was
// done. A form whose errors have no place to show (a tool's request for
// input) is not acknowledged: Slack keeps it open and says it could not
// be sent.
func (s *Server) interactionUnavailable(w http.ResponseWriter, r *http.Request, body []byte) {
	cb, ok := parseInteraction(w, body)
	if !ok {
		return
	}
	switch cb.Type {
	case slack.InteractionTypeBlockActions:
		w.WriteHeader(http.StatusOK)
		if len(cb.ActionCallback.BlockActions) == 0 || cb.ActionCallback.BlockActions[0].ActionID == slackui.ActionMCPConnect || cb.Channel.ID == "" {
			return // a link, which the browser follows; or the Home tab, which cannot be published without the inbox
		}
		s.background(r.Context(), func(ctx context.Context) {
			s.tell(ctx, cb.Channel.ID, threadTS(cb), cb.User.ID, cb.ResponseURL, slackui.TextTryAgain)
		})
	case slack.InteractionTypeViewSubmission:
		switch cb.View.CallbackID {
		case slackui.CallbackEdit, slackui.CallbackReject:
			writeErrors(w, cb, slackui.TextTryAgain)
		default:
			http.Error(w, "store unavailable", http.StatusServiceUnavailable)
		}
	default:
		w.WriteHeader(http.StatusOK)
	}
}
