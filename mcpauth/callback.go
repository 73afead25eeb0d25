package mcpauth

import (
	"errors"
	"fmt"
	"html/template"
	"net/http"

	"github.com/sirupsen/logrus"
)

var callbackPage = template.Must(template.New("callback").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>Countersign</title></head>
<body><p>{{.}}</p></body></html>
`))

// Callback is GET /oauth/callback (CallbackPath in package bot): it
// completes the connection the authorization server sends the person's
// browser back for, on any replica, and tells the person in a page.
func (b *Broker) Callback(log logrus.FieldLogger) http.Handler {
	log = log.WithField("component", "oauth")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		id, err := b.Complete(r.Context(), r.URL.Query())
		status, msg := http.StatusOK, ""
		switch {
		case err == nil:
			msg = fmt.Sprintf("Connected to %s. You can close this page and go back to Slack: the call goes on.", id.Server)
			log.WithFields(logrus.Fields{"user": id.User, "mcp_server": id.Server}).Info("OAuth callback: code handed to the waiting call")
		case errors.Is(err, ErrNoState):
			status, msg = http.StatusBadRequest, "This connection link is unknown, was used already, or expired. Ask again from Slack."
		case errors.Is(err, ErrDenied):
			status, msg = http.StatusOK, fmt.Sprintf("The connection to %s was not made. The call that waited for it is told so.", id.Server)
		default:
			status, msg = http.StatusServiceUnavailable, "The connection could not be completed just now. Try the Connect button again."
			log.WithError(err).Warn("OAuth callback: storage error")
		}
		w.WriteHeader(status)
		_ = callbackPage.Execute(w, msg)
	})
}
