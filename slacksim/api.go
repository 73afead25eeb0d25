package slacksim

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/countersign/countersign/slacksim/internal/wire"
)

// maxAPIRequest is the largest Web API request body read.
const maxAPIRequest = 4 << 20

// APIHandler is the Slack Web API the bot calls: mount it at /api/ and
// give the bot's Slack client that URL (SLACK_API_URL). It answers
// auth.test, chat.postMessage, chat.update, chat.delete, chat.postEphemeral,
// chat.startStream, chat.appendStream, chat.stopStream (see stream.go),
// assistant.threads.setStatus, views.open, views.update, views.push,
// views.publish (the Home tab, see home.go), usergroups.users.list,
// conversations.members, conversations.info and conversations.replies
// (a thread, to find a card posted and not recorded), with form or JSON
// bodies, as Slack does; other methods get unknown_method.
func (s *Simulator) APIHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := strings.LastIndex(r.URL.Path, "/api/")
		if i < 0 {
			http.NotFound(w, r)
			return
		}
		method := r.URL.Path[i+len("/api/"):]
		reply := s.call(r, method)
		if ok, _ := reply["ok"].(bool); !ok {
			s.log.WithField("method", method).WithField("error", reply["error"]).Info("Slack API call answered with an error")
		} else {
			s.log.WithField("method", method).Debug("Slack API call")
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_ = json.NewEncoder(w).Encode(reply)
	})
}

// params are a Web API call's arguments: form values, or a JSON body's
// top-level fields (strings as they are, other values as JSON).
type params map[string]string

func (s *Simulator) call(r *http.Request, method string) map[string]any {
	raw, token, code := wire.ParseRequest(r, maxAPIRequest)
	p := params(raw)
	switch {
	case code != "":
		return fail(code)
	case token == "":
		return fail("not_authed")
	case s.opts.BotToken != "" && subtle.ConstantTimeCompare([]byte(token), []byte(s.opts.BotToken)) != 1:
		// In constant time: the playground's API answers any process
		// on the machine, a tool the bot started included.
		return fail("invalid_auth")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch method {
	case "auth.test":
		return ok(map[string]any{
			"url": "https://" + s.opts.ChannelName + ".slack.invalid/", "team": "Countersign playground",
			"user": strings.ToLower(s.opts.BotName), "team_id": s.opts.TeamID,
			"user_id": s.opts.BotUserID, "bot_id": s.opts.BotID,
		})
	case "chat.postMessage":
		return s.postMessage(p)
	case "chat.update":
		return s.update(p)
	case "chat.delete":
		return s.deleteMessage(p)
	case "chat.startStream":
		return s.startStream(p)
	case "chat.appendStream", "chat.stopStream":
		return s.appendStream(p, method == "chat.stopStream")
	case "assistant.threads.setStatus":
		return ok(nil)
	case "chat.postEphemeral":
		return s.postEphemeral(p)
	case "views.open", "views.push":
		return s.openView(p, method == "views.push")
	case "views.update":
		return s.updateView(p)
	case "views.publish":
		return s.publishHome(p)
	case "conversations.members":
		return s.members(p)
	case "usergroups.users.list":
		// The playground has no user groups: every group is empty.
		if p["usergroup"] == "" {
			return fail("invalid_arguments")
		}
		return ok(map[string]any{"users": []string{}})
	case "conversations.replies":
		return s.replies(p)
	case "conversations.info":
		if !s.isChannel(p["channel"]) {
			return fail("channel_not_found")
		}
		return ok(map[string]any{"channel": map[string]any{
			"id": s.opts.ChannelID, "name": s.opts.ChannelName, "is_channel": true, "is_member": true,
			"is_private": false, "is_archived": false,
		}})
	}
	return fail("unknown_method")
}

func ok(fields map[string]any) map[string]any {
	out := map[string]any{"ok": true}
	maps.Copy(out, fields)
	return out
}

func fail(code string) map[string]any { return map[string]any{"ok": false, "error": code} }

// isChannel reports whether a channel argument names the one channel.
func (s *Simulator) isChannel(ch string) bool {
	return ch == s.opts.ChannelID || strings.TrimPrefix(ch, "#") == s.opts.ChannelName
}

// postMessage posts a bot message; s.mu is held.
func (s *Simulator) postMessage(p params) map[string]any {
	m, code := s.messageFrom(p)
	if code != "" {
		return fail(code)
	}
	if root := p["thread_ts"]; root != "" {
		parent, found := s.byTS[root]
		if !found || parent.VisibleTo != "" {
			return fail("thread_not_found")
		}
		if parent.ThreadTS != "" {
			root = parent.ThreadTS // a reply to a reply goes to the thread
		}
		m.ThreadTS = root
	}
	if raw := p["metadata"]; json.Valid([]byte(raw)) {
		m.metadata = raw
	}
	m = s.addMessage(m)
	return ok(map[string]any{"channel": s.opts.ChannelID, "ts": m.TS, "message": s.messageJSON(m)})
}

// postEphemeral shows a bot message to one person; s.mu is held.
func (s *Simulator) postEphemeral(p params) map[string]any {
	m, code := s.messageFrom(p)
	if code != "" {
		return fail(code)
	}
	if _, found := s.user(p["user"]); !found {
		return fail("user_not_in_channel")
	}
	m.VisibleTo, m.ThreadTS = p["user"], p["thread_ts"]
	m = s.addMessage(m)
	return ok(map[string]any{"message_ts": m.TS})
}

// update replaces a bot message's text and blocks; s.mu is held.
func (s *Simulator) update(p params) map[string]any {
	if !s.isChannel(p["channel"]) {
		return fail("channel_not_found")
	}
	m, found := s.byTS[p["ts"]]
	switch {
	case !found || m.VisibleTo != "":
		return fail("message_not_found")
	case m.BotID != s.opts.BotID, m.Streaming:
		return fail("cant_update_message")
	}
	next, code := s.messageFrom(p)
	if code != "" {
		return fail(code)
	}
	m.Text, m.Blocks = next.Text, next.Blocks
	m.Updated++
	s.publish("message", *m)
	return ok(map[string]any{"channel": s.opts.ChannelID, "ts": m.TS, "text": m.Text, "message": s.messageJSON(*m)})
}

// deleteMessage removes a bot message, as Slack lets a bot remove its
// own; s.mu is held.
func (s *Simulator) deleteMessage(p params) map[string]any {
	if !s.isChannel(p["channel"]) {
		return fail("channel_not_found")
	}
	ts := p["ts"]
	m, found := s.byTS[ts]
	switch {
	case !found || m.VisibleTo != "":
		return fail("message_not_found")
	case m.BotID != s.opts.BotID:
		return fail("cant_delete_message")
	}
	delete(s.byTS, ts)
	s.messages = slices.DeleteFunc(s.messages, func(x *Message) bool { return x == m })
	s.publish("deleted", map[string]any{"ts": ts})
	return ok(map[string]any{"channel": s.opts.ChannelID, "ts": ts})
}

// messageFrom reads a bot message's channel, text and blocks.
func (s *Simulator) messageFrom(p params) (Message, string) {
	if !s.isChannel(p["channel"]) {
		return Message{}, "channel_not_found"
	}
	m := Message{User: s.opts.BotUserID, BotID: s.opts.BotID, Text: p["text"]}
	if raw := p["blocks"]; raw != "" && raw != "null" {
		blocks, okBlocks := checkBlocks(raw)
		if !okBlocks {
			return Message{}, "invalid_blocks"
		}
		m.Blocks = blocks
	}
	switch {
	case m.Text == "" && len(m.Blocks) == 0:
		return Message{}, "no_text"
	case len(m.Text) > 40000:
		return Message{}, "msg_too_long"
	}
	return m, ""
}

// checkBlocks accepts a JSON array of at most 50 blocks that each have a
// type, and returns it compact.
func checkBlocks(raw string) (json.RawMessage, bool) { return checkBlocksUpTo(raw, 50) }

// checkBlocksUpTo is checkBlocks with a limit of n blocks.
func checkBlocksUpTo(raw string, n int) (json.RawMessage, bool) {
	var blocks []struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal([]byte(raw), &blocks); err != nil || len(blocks) > n {
		return nil, false
	}
	for _, b := range blocks {
		if b.Type == "" {
			return nil, false
		}
	}
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(raw)); err != nil {
		return nil, false
	}
	if len(blocks) == 0 {
		return nil, true
	}
	return b.Bytes(), true
}

// messageJSON is a message as Slack shows it in API answers and payloads.
func (s *Simulator) messageJSON(m Message) map[string]any {
	out := map[string]any{"type": "message", "text": m.Text, "user": m.User, "ts": m.TS, "team": s.opts.TeamID}
	if m.BotID != "" {
		out["bot_id"] = m.BotID
	}
	if m.ThreadTS != "" {
		out["thread_ts"] = m.ThreadTS
	}
	if len(m.Blocks) > 0 {
		out["blocks"] = m.Blocks
	}
	return out
}

// replies answers conversations.replies: a thread's root, then its
// replies, oldest first, in one page, with their metadata when
// include_all_metadata is set; ephemeral messages are no one's to read.
// s.mu is held.
func (s *Simulator) replies(p params) map[string]any {
	if !s.isChannel(p["channel"]) {
		return fail("channel_not_found")
	}
	root, found := s.byTS[p["ts"]]
	if !found || root.VisibleTo != "" || root.ThreadTS != "" {
		return fail("thread_not_found")
	}
	withMetadata := p["include_all_metadata"] == "1" || p["include_all_metadata"] == "true"
	var out []map[string]any
	for _, m := range s.messages {
		if m.VisibleTo != "" || (m.TS != root.TS && m.ThreadTS != root.TS) {
			continue
		}
		j := s.messageJSON(*m)
		if withMetadata && m.metadata != "" {
			j["metadata"] = json.RawMessage(m.metadata)
		}
		out = append(out, j)
	}
	return ok(map[string]any{"messages": out, "has_more": false, "response_metadata": map[string]any{"next_cursor": ""}})
}

// openView opens a modal with a trigger_id, or pushes one onto the stack;
// s.mu is held.
func (s *Simulator) openView(p params, push bool) map[string]any {
	user, code := s.useTrigger(p["trigger_id"])
	if code != "" {
		return fail(code)
	}
	v, code := s.newView(p["view"], user, "")
	if code != "" {
		return fail(code)
	}
	stack := s.views[user]
	if !push {
		stack = nil
	} else if len(stack) >= 3 {
		return fail("push_limit_reached")
	}
	s.views[user] = append(stack, v)
	s.publishViews(user)
	return ok(map[string]any{"view": json.RawMessage(v.View)})
}

// updateView replaces an open view, found by view_id or external_id;
// s.mu is held.
func (s *Simulator) updateView(p params) map[string]any {
	user, i := s.findView(p["view_id"], p["external_id"])
	if i < 0 {
		return fail("not_found")
	}
	old := s.views[user][i]
	if h := p["hash"]; h != "" && h != old.Hash {
		return fail("hash_conflict")
	}
	v, code := s.newView(p["view"], user, old.ID)
	if code != "" {
		return fail(code)
	}
	s.views[user][i] = v
	s.publishViews(user)
	return ok(map[string]any{"view": json.RawMessage(v.View)})
}

// findView finds an open view by ID or external ID; s.mu is held.
func (s *Simulator) findView(id, externalID string) (string, int) {
	for user, stack := range s.views {
		for i, v := range stack {
			if (id != "" && v.ID == id) || (id == "" && externalID != "" && v.fields.ExternalID == externalID) {
				return user, i
			}
		}
	}
	return "", -1
}

// newView builds an open view from the view the bot sent, with a new
// hash, under id (or a new one); s.mu is held.
func (s *Simulator) newView(raw, user, id string) (*View, string) {
	var f viewFields
	var fields map[string]any
	if json.Unmarshal([]byte(raw), &f) != nil || json.Unmarshal([]byte(raw), &fields) != nil || fields == nil {
		return nil, "invalid_arguments"
	}
	if f.Type != "modal" || len(f.Title) == 0 {
		return nil, "invalid_arguments"
	}
	if _, valid := checkBlocks(string(f.Blocks)); !valid || len(f.Blocks) == 0 {
		return nil, "invalid_arguments"
	}
	if id == "" {
		id = "V" + strings.ToUpper(s.opts.NewID())
	}
	v := &View{ID: id, User: user, Hash: s.nextTS() + "." + s.opts.NewID(), fields: f}
	fields["id"], fields["hash"] = v.ID, v.Hash
	fields["team_id"], fields["bot_id"], fields["app_id"] = s.opts.TeamID, s.opts.BotID, "A0PLAYGROUND"
	fields["root_view_id"] = v.ID
	fields["state"] = map[string]any{"values": map[string]any{}}
	v.View, _ = json.Marshal(fields)
	return v, ""
}
