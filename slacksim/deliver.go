package slacksim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/countersign/countersign/slacksim/internal/wire"
)

// The content types Slack sends with.
const (
	formType = "application/x-www-form-urlencoded"
	jsonType = "application/json"
)

// botResponse is the bot's answer to a delivery.
type botResponse struct {
	status int
	body   []byte
}

// deliver sends body to the bot's endpoint (commands, events or
// interactions), signed with the signing secret the way Slack signs
// (v0: HMAC-SHA256 of "v0:<unix time>:<body>").
func (s *Simulator) deliver(ctx context.Context, endpoint, contentType string, body []byte) (botResponse, error) {
	target := strings.TrimSuffix(s.opts.BotURL, "/") + "/slack/" + endpoint
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return botResponse{}, fmt.Errorf("deliver to %s: %w", endpoint, err)
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("User-Agent", "Slackbot 1.0 (+https://api.slack.com/robots)")
	wire.Sign(req, []byte(s.opts.SigningSecret), body, s.opts.Now())
	resp, err := s.opts.Client.Do(req)
	if err != nil {
		return botResponse{}, fmt.Errorf("deliver to %s: %w", endpoint, err)
	}
	defer resp.Body.Close()
	respBody, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return botResponse{}, fmt.Errorf("read the answer to %s: %w", endpoint, err)
	}
	s.log.WithField("endpoint", endpoint).WithField("status", resp.StatusCode).Debug("delivered to the bot")
	return botResponse{status: resp.StatusCode, body: respBody}, nil
}

// commandForm is the form Slack sends for a slash command.
func (s *Simulator) commandForm(u User, command, text, triggerID string) []byte {
	return []byte(url.Values{
		"token":                 {"playground-verification-token"},
		"team_id":               {s.opts.TeamID},
		"team_domain":           {s.opts.ChannelName},
		"channel_id":            {s.opts.ChannelID},
		"channel_name":          {s.opts.ChannelName},
		"user_id":               {u.ID},
		"user_name":             {u.Name},
		"command":               {command},
		"text":                  {text},
		"api_app_id":            {"A0PLAYGROUND"},
		"is_enterprise_install": {"false"},
		"trigger_id":            {triggerID},
	}.Encode())
}

// eventBody is the Events API callback for one event.
func (s *Simulator) eventBody(eventID string, event map[string]any) []byte {
	body, _ := json.Marshal(map[string]any{
		"token":      "playground-verification-token",
		"team_id":    s.opts.TeamID,
		"api_app_id": "A0PLAYGROUND",
		"type":       "event_callback",
		"event_id":   eventID,
		"event_time": s.opts.Now().Unix(),
		"event":      event,
		"authorizations": []any{map[string]any{
			"team_id": s.opts.TeamID, "user_id": s.opts.BotUserID, "is_bot": true,
		}},
	})
	return body
}

// interactionForm is the form Slack sends an interaction payload in.
func interactionForm(payload map[string]any) []byte {
	raw, _ := json.Marshal(payload)
	return []byte(url.Values{"payload": {string(raw)}}.Encode())
}

// blockActions is the payload of a button click on m.
func (s *Simulator) blockActions(u User, m Message, action map[string]any, triggerID string) []byte {
	container := map[string]any{
		"type": "message", "message_ts": m.TS, "channel_id": s.opts.ChannelID, "is_ephemeral": m.VisibleTo != "",
	}
	if m.ThreadTS != "" {
		container["thread_ts"] = m.ThreadTS
	}
	return interactionForm(map[string]any{
		"type":       "block_actions",
		"token":      "playground-verification-token",
		"api_app_id": "A0PLAYGROUND",
		"team":       map[string]any{"id": s.opts.TeamID, "domain": s.opts.ChannelName},
		"user":       s.userJSON(u),
		"trigger_id": triggerID,
		"container":  container,
		"channel":    map[string]any{"id": s.opts.ChannelID, "name": s.opts.ChannelName},
		"message":    s.messageJSON(m),
		"state":      map[string]any{"values": map[string]any{}},
		"actions":    []any{action},
	})
}

// viewPayload is the payload of a view_submission or view_closed of v,
// with the person's input values by block and action ID.
func (s *Simulator) viewPayload(kind string, u User, v View, values map[string]map[string]string, triggerID string) []byte {
	var view map[string]any
	_ = json.Unmarshal(v.View, &view) // the simulator wrote it
	types := elementTypes(view)
	state := map[string]any{}
	for block, actions := range values {
		vs := map[string]any{}
		for action, value := range actions {
			vs[action] = inputState(types[block+"\x00"+action], value)
		}
		state[block] = vs
	}
	view["state"] = map[string]any{"values": state}
	payload := map[string]any{
		"type":       kind,
		"token":      "playground-verification-token",
		"api_app_id": "A0PLAYGROUND",
		"team":       map[string]any{"id": s.opts.TeamID, "domain": s.opts.ChannelName},
		"user":       s.userJSON(u),
		"view":       view,
	}
	if kind == "view_submission" {
		payload["trigger_id"] = triggerID
		payload["response_urls"] = []any{}
	} else {
		payload["is_cleared"] = false
	}
	return interactionForm(payload)
}

func (s *Simulator) userJSON(u User) map[string]any {
	return map[string]any{"id": u.ID, "username": strings.ToLower(u.Name), "name": strings.ToLower(u.Name), "team_id": s.opts.TeamID}
}

// elementTypes are the types of a view's input elements, by block ID and
// action ID (joined by a NUL).
func elementTypes(view map[string]any) map[string]string {
	types := map[string]string{}
	blocks, _ := view["blocks"].([]any)
	for _, b := range blocks {
		block, _ := b.(map[string]any)
		el, _ := block["element"].(map[string]any)
		id, _ := block["block_id"].(string)
		action, _ := el["action_id"].(string)
		if t, ok := el["type"].(string); ok {
			types[id+"\x00"+action] = t
		}
	}
	return types
}

// inputState is an input's state in a submission, as Slack sends it for
// the element's type, from the value the page read from it: the text,
// the selected values as a JSON array, the date, or a Unix time.
func inputState(elementType, value string) map[string]any {
	option := func(v string) map[string]any {
		return map[string]any{"value": v, "text": map[string]any{"type": "plain_text", "text": v}}
	}
	switch elementType {
	case "static_select":
		if value == "" {
			return map[string]any{"type": elementType, "selected_option": nil}
		}
		return map[string]any{"type": elementType, "selected_option": option(value)}
	case "multi_static_select", "checkboxes":
		var vs []string
		_ = json.Unmarshal([]byte(value), &vs) // none selected when it is not a list
		opts := []any{}
		for _, v := range vs {
			opts = append(opts, option(v))
		}
		return map[string]any{"type": elementType, "selected_options": opts}
	case "datepicker":
		return map[string]any{"type": elementType, "selected_date": value}
	case "datetimepicker":
		n, _ := strconv.ParseInt(value, 10, 64)
		return map[string]any{"type": elementType, "selected_date_time": n}
	case "number_input":
		return map[string]any{"type": elementType, "value": value}
	}
	return map[string]any{"type": "plain_text_input", "value": value}
}
