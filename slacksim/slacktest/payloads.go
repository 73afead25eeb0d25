package slacktest

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// The defaults of the request builders: where and by whom a request is
// made when the test does not say.
const (
	ChannelID = "C0TEST"
	UserID    = "U0USER"
	AppID     = "A0TEST"
	Command   = "/agent"
)

// SlashCommand is the form body Slack sends for a slash command: form's
// values over defaults for everything Slack always sends (command
// Command, team TeamID, channel ChannelID, user UserID, a fresh
// trigger_id).
func SlashCommand(form url.Values) []byte {
	v := url.Values{
		"token":        {"unused-verification-token"},
		"command":      {Command},
		"text":         {""},
		"team_id":      {TeamID},
		"team_domain":  {"countersign-test"},
		"channel_id":   {ChannelID},
		"channel_name": {"general"},
		"user_id":      {UserID},
		"user_name":    {"tester"},
		"api_app_id":   {AppID},
		"trigger_id":   {"trigger." + uniqueTS()},
	}
	for k, vals := range form {
		v[k] = vals
	}
	return []byte(v.Encode())
}

// Click is a button click on a message, for BlockActions. Empty fields get
// defaults: User UserID, Channel ChannelID, BlockID "actions", TriggerID
// and ActionTS fresh unique values (Slack's action_ts differs for every
// click, and handlers may deduplicate on it). With Home set, the button
// is in the app's Home tab instead: the payload names the view, and no
// channel or message.
type Click struct {
	User, Channel       string
	MessageTS, ThreadTS string
	ActionID, BlockID   string
	Value               string
	TriggerID, ActionTS string
	Home                bool
}

// BlockActions is the form body Slack sends when a person clicks a
// button: a block_actions payload.
func BlockActions(c Click) []byte {
	if c.Home {
		return homeActions(c)
	}
	c.User = or(c.User, UserID)
	c.Channel = or(c.Channel, ChannelID)
	c.BlockID = or(c.BlockID, "actions")
	c.TriggerID = or(c.TriggerID, "trigger."+uniqueTS())
	c.ActionTS = or(c.ActionTS, uniqueTS())
	message := map[string]any{"type": "message", "ts": c.MessageTS, "user": BotUserID, "bot_id": BotID}
	container := map[string]any{"type": "message", "message_ts": c.MessageTS, "channel_id": c.Channel, "is_ephemeral": false}
	if c.ThreadTS != "" {
		message["thread_ts"] = c.ThreadTS
		container["thread_ts"] = c.ThreadTS
	}
	return payloadForm(map[string]any{
		"type":       "block_actions",
		"team":       map[string]any{"id": TeamID, "domain": "countersign-test"},
		"user":       map[string]any{"id": c.User, "team_id": TeamID},
		"api_app_id": AppID,
		"trigger_id": c.TriggerID,
		"container":  container,
		"channel":    map[string]any{"id": c.Channel, "name": "general"},
		"message":    message,
		"actions": []any{map[string]any{
			"type": "button", "action_id": c.ActionID, "block_id": c.BlockID, "value": c.Value,
			"action_ts": c.ActionTS, "text": map[string]any{"type": "plain_text", "text": c.ActionID},
		}},
	})
}

// homeActions is the block_actions payload of a click in the Home tab.
func homeActions(c Click) []byte {
	c.User = or(c.User, UserID)
	c.BlockID = or(c.BlockID, "actions")
	c.TriggerID = or(c.TriggerID, "trigger."+uniqueTS())
	c.ActionTS = or(c.ActionTS, uniqueTS())
	viewID := "VHOME" + strings.ReplaceAll(c.User, "_", "")
	return payloadForm(map[string]any{
		"type":       "block_actions",
		"team":       map[string]any{"id": TeamID, "domain": "countersign-test"},
		"user":       map[string]any{"id": c.User, "team_id": TeamID},
		"api_app_id": AppID,
		"trigger_id": c.TriggerID,
		"container":  map[string]any{"type": "view", "view_id": viewID},
		"view": map[string]any{"id": viewID, "team_id": TeamID, "type": "home", "app_id": AppID, "bot_id": BotID,
			"hash": uniqueTS() + ".hash", "state": map[string]any{"values": map[string]any{}}},
		"actions": []any{map[string]any{
			"type": "button", "action_id": c.ActionID, "block_id": c.BlockID, "value": c.Value,
			"action_ts": c.ActionTS, "text": map[string]any{"type": "plain_text", "text": c.ActionID},
		}},
	})
}

// AppHomeOpened is the Events API body Slack sends when user opens the
// app's Home tab. An empty eventID gets a fresh unique one.
func AppHomeOpened(eventID, user string) []byte {
	return EventCallback(eventID, map[string]any{
		"type": "app_home_opened", "user": user, "channel": "D" + strings.TrimPrefix(user, "U"), "tab": "home",
		"event_ts": uniqueTS(),
	})
}

// Submission is a person submitting a modal, for ViewSubmission. Values
// are the plain_text_input values by block ID and action ID; State, the
// state of other inputs, as Slack sends it (e.g. {"type": "datepicker",
// "selected_date": "2026-01-02"}), by block ID and action ID. Empty fields
// get defaults: User UserID, ViewID and Hash fresh unique values.
type Submission struct {
	User                        string
	ViewID, Hash                string
	CallbackID, PrivateMetadata string
	Values                      map[string]map[string]string
	State                       map[string]map[string]any
}

// ViewSubmission is the form body Slack sends when a person submits a
// modal: a view_submission payload.
func ViewSubmission(s Submission) []byte {
	s.User = or(s.User, UserID)
	s.ViewID = or(s.ViewID, "V"+uniqueTS())
	s.Hash = or(s.Hash, uniqueTS()+".hash")
	values := map[string]any{}
	for block, actions := range s.Values {
		vs := map[string]any{}
		for action, value := range actions {
			vs[action] = map[string]any{"type": "plain_text_input", "value": value}
		}
		values[block] = vs
	}
	for block, actions := range s.State {
		vs, _ := values[block].(map[string]any)
		if vs == nil {
			vs = map[string]any{}
		}
		for action, state := range actions {
			vs[action] = state
		}
		values[block] = vs
	}
	return payloadForm(map[string]any{
		"type":       "view_submission",
		"team":       map[string]any{"id": TeamID, "domain": "countersign-test"},
		"user":       map[string]any{"id": s.User, "team_id": TeamID},
		"api_app_id": AppID,
		"trigger_id": "trigger." + uniqueTS(),
		"view": map[string]any{
			"id": s.ViewID, "team_id": TeamID, "type": "modal", "callback_id": s.CallbackID,
			"private_metadata": s.PrivateMetadata, "hash": s.Hash, "app_id": AppID, "bot_id": BotID,
			"state": map[string]any{"values": values},
		},
	})
}

// EventCallback is the JSON body Slack's Events API sends for one event,
// e.g. {"type": "message", "channel": …, "user": …, "text": …, "ts": …,
// "thread_ts": …}. An empty eventID gets a fresh unique one.
func EventCallback(eventID string, event map[string]any) []byte {
	body, err := json.Marshal(map[string]any{
		"token":      "unused-verification-token",
		"team_id":    TeamID,
		"api_app_id": AppID,
		"type":       "event_callback",
		"event_id":   or(eventID, "Ev"+uniqueTS()),
		"event_time": time.Now().Unix(),
		"event":      event,
	})
	if err != nil {
		panic("slacktest: " + err.Error())
	}
	return body
}

// payloadForm is an interaction's form body: payload=<JSON>.
func payloadForm(payload map[string]any) []byte {
	b, err := json.Marshal(payload)
	if err != nil {
		panic("slacktest: " + err.Error()) // only maps, strings and bools: cannot happen
	}
	return []byte(url.Values{"payload": {string(b)}}.Encode())
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// lastTS is the last value uniqueTS handed out, in microseconds.
var lastTS atomic.Int64

// uniqueTS is a Slack-style timestamp from the clock, different from
// every earlier one in the process (and, being the time, from those of
// earlier runs).
func uniqueTS() string {
	for {
		last := lastTS.Load()
		next := max(time.Now().UnixMicro(), last+1)
		if lastTS.CompareAndSwap(last, next) {
			return fmt.Sprintf("%d.%06d", next/1_000_000, next%1_000_000)
		}
	}
}
