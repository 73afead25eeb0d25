package handlers

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/countersign/countersign/slackui"
	"github.com/sirupsen/logrus"
)

// dedupTTL is how long a delivery is remembered; Slack retries within
// minutes.
const dedupTTL = time.Hour

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
		writeJSON(w, map[string]string{"response_type": "ephemeral", "text": slackui.HelpText})
		return
	}
	// Slack retries a command it did not see answered in time; the
	// trigger_id is the same on every delivery. The request is stored
	// before it is answered, so that it outlives this process.
	id := "command:" + form.Get("trigger_id")
	rec := intake{Kind: intakeCommand, Team: team, Channel: channel, User: user, Text: slackui.TypedText(text), Typed: text,
		ResponseURL: form.Get("response_url")}
	h, first, err := s.accept(r.Context(), id, rec)
	if err != nil {
		log.WithError(err).Error("accepting a slash command")
		writeJSON(w, map[string]string{"response_type": "ephemeral", "text": slackui.TextTryAgain})
		return
	}
	if !first {
		log.WithField("retry", r.Header.Get("X-Slack-Retry-Num")).Info("repeated slash command ignored")
		w.WriteHeader(http.StatusOK)
		return
	}
	w.WriteHeader(http.StatusOK)
	s.carryOn(r.Context(), id, h, rec)
}
