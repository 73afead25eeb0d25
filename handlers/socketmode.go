package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"time"

	"github.com/slack-go/slack/socketmode"
)

// RunSocketMode receives Slack's requests over a Socket Mode connection
// instead of HTTP, until ctx ends. Each request goes through the same
// handler as its HTTP twin (Socket Mode needs no signature: the app-level
// token authenticates the connection), and every envelope is
// acknowledged, with the handler's answer as its payload. It reconnects
// for ever, backing off while Slack cannot be reached.
func (s *Server) RunSocketMode(ctx context.Context, client *socketmode.Client) error {
	go s.consumeSocketEvents(ctx, client)
	backoff := time.Second
	for {
		start := time.Now()
		err := client.RunContext(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(start) > time.Minute {
			backoff = time.Second
		}
		s.log.WithError(err).WithField("retry_in", backoff).Warn("socket mode connection ended; reconnecting")
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Minute)
	}
}

func (s *Server) consumeSocketEvents(ctx context.Context, client *socketmode.Client) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-client.Events:
			if !ok {
				return
			}
			if ev.Request == nil || ev.Request.EnvelopeID == "" {
				continue // connection events: connecting, hello, …
			}
			payload, err := s.dispatchEnvelope(ctx, ev.Request)
			if errors.Is(err, errNotTaken) {
				// The request could not be stored (its HTTP twin is
				// answered 503): left unacknowledged, Slack delivers it
				// again, as it would over HTTP. An ack would drop it.
				s.log.WithError(err).WithField("type", ev.Request.Type).Warn("socket mode request not taken; Slack delivers it again")
				continue
			}
			if err != nil {
				s.log.WithError(err).WithField("type", ev.Request.Type).Warn("socket mode request")
			}
			if err := client.AckCtx(ctx, ev.Request.EnvelopeID, payload); err != nil {
				s.log.WithError(err).Warn("acknowledging a socket mode request")
			}
		}
	}
}

// errNotTaken: a request could not be taken now (storage unavailable)
// and must be delivered again.
var errNotTaken = errors.New("request not taken")

// dispatchEnvelope turns a Socket Mode request into the body its HTTP
// twin would have, runs that handler, and returns the answer's JSON.
func (s *Server) dispatchEnvelope(ctx context.Context, req *socketmode.Request) (json.RawMessage, error) {
	var handle func(http.ResponseWriter, *http.Request, []byte)
	var body []byte
	switch req.Type {
	case socketmode.RequestTypeEventsAPI:
		handle, body = s.event, req.Payload
	case socketmode.RequestTypeInteractive:
		handle, body = s.interaction, []byte(url.Values{"payload": {string(req.Payload)}}.Encode())
	case socketmode.RequestTypeSlashCommands:
		var fields map[string]any
		if err := json.Unmarshal(req.Payload, &fields); err != nil {
			return nil, fmt.Errorf("slash command payload: %w", err)
		}
		form := url.Values{}
		for k, v := range fields {
			if str, ok := v.(string); ok {
				form.Set(k, str)
			}
		}
		handle, body = s.command, []byte(form.Encode())
	default:
		return nil, nil
	}
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/slack/socket", strings.NewReader(string(body)))
	if req.RetryAttempt > 0 {
		r.Header.Set("X-Slack-Retry-Num", fmt.Sprint(req.RetryAttempt))
	}
	w := httptest.NewRecorder()
	handle(w, r, body)
	if w.Code >= 500 {
		return nil, fmt.Errorf("%w: handler answered %d: %s", errNotTaken, w.Code, strings.TrimSpace(w.Body.String()))
	}
	if w.Code >= 300 {
		return nil, fmt.Errorf("handler answered %d: %s", w.Code, strings.TrimSpace(w.Body.String()))
	}
	if w.Body.Len() == 0 || !json.Valid(w.Body.Bytes()) {
		return nil, nil
	}
	return json.RawMessage(w.Body.Bytes()), nil
}
