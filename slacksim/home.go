package slacksim

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// The app's Home tab: the bot publishes a view for each person
// (views.publish); the page shows the acting person's, tells the bot when
// they open it (app_home_opened), and sends the clicks on its buttons as
// Slack does — a block_actions payload naming the view and no channel.

// maxHomeBlocks is Slack's limit on the blocks of a Home tab view.
const maxHomeBlocks = 100

// publishHome stores the Home tab the bot published for a person and
// tells the page; s.mu is held.
func (s *Simulator) publishHome(p params) map[string]any {
	user := p["user_id"]
	if _, found := s.user(user); !found {
		return fail("user_not_found")
	}
	var f viewFields
	var fields map[string]any
	if json.Unmarshal([]byte(p["view"]), &f) != nil || json.Unmarshal([]byte(p["view"]), &fields) != nil || fields == nil {
		return fail("invalid_arguments")
	}
	if f.Type != "home" {
		return fail("invalid_arguments")
	}
	if _, valid := checkBlocksUpTo(string(f.Blocks), maxHomeBlocks); !valid {
		return fail("invalid_arguments")
	}
	id := "VHOME" + strings.ToUpper(user)
	if old, ok := s.homes[user]; ok {
		id = old.ID
	}
	v := &View{ID: id, User: user, Hash: s.nextTS() + "." + s.opts.NewID(), fields: f}
	fields["id"], fields["hash"] = v.ID, v.Hash
	fields["team_id"], fields["bot_id"], fields["app_id"] = s.opts.TeamID, s.opts.BotID, "A0PLAYGROUND"
	fields["state"] = map[string]any{"values": map[string]any{}}
	v.View, _ = json.Marshal(fields)
	s.homes[user] = v
	s.publish("home", map[string]any{"user": user, "view": *v})
	return ok(map[string]any{"view": json.RawMessage(v.View)})
}

// members answers conversations.members: everyone is in the one
// channel; s.mu is held.
func (s *Simulator) members(p params) map[string]any {
	if !s.isChannel(p["channel"]) {
		return fail("channel_not_found")
	}
	ids := make([]string, 0, len(s.opts.Users))
	for _, u := range s.opts.Users {
		ids = append(ids, u.ID)
	}
	return ok(map[string]any{"members": ids, "response_metadata": map[string]any{"next_cursor": ""}})
}

// homeViews copies the Home tabs published so far; s.mu is held.
func (s *Simulator) homeViews() map[string]View {
	out := map[string]View{}
	for user, v := range s.homes {
		out[user] = *v
	}
	return out
}

// OpenHome is a person opening the app's Home tab: the bot gets an
// app_home_opened event, and publishes the tab.
func (s *Simulator) OpenHome(ctx context.Context, userID string) error {
	u, ok := s.user(userID)
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownUser, userID)
	}
	ev := map[string]any{"type": "app_home_opened", "user": u.ID, "channel": "D" + strings.TrimPrefix(u.ID, "U"), "tab": "home"}
	s.mu.Lock()
	ev["event_ts"] = s.nextTS()
	if v, ok := s.homes[u.ID]; ok {
		var view map[string]any
		_ = json.Unmarshal(v.View, &view) // the simulator wrote it
		ev["view"] = view
	}
	id := "Ev" + strings.ToUpper(s.opts.NewID())
	s.mu.Unlock()
	resp, err := s.deliver(ctx, "events", jsonType, s.eventBody(id, ev))
	if err != nil {
		return fmt.Errorf("%w: app_home_opened: %w", ErrBot, err)
	}
	if resp.status != 200 {
		return fmt.Errorf("%w: app_home_opened answered with HTTP %d", ErrBot, resp.status)
	}
	return nil
}

// ClickHome is a person pressing a button (action actionID, in block
// blockID if it is not empty) in their Home tab.
func (s *Simulator) ClickHome(ctx context.Context, userID, blockID, actionID string) error {
	u, ok := s.user(userID)
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownUser, userID)
	}
	s.mu.Lock()
	v, found := s.homes[u.ID]
	if !found {
		s.mu.Unlock()
		return fmt.Errorf("%w: no Home tab for %s", ErrNotFound, u.ID)
	}
	action, found := findButton(v.fields.Blocks, blockID, actionID)
	if !found {
		s.mu.Unlock()
		return fmt.Errorf("%w: button %q in the Home tab", ErrNotFound, actionID)
	}
	action["action_ts"] = s.nextTS()
	trigger := s.newTrigger(u.ID)
	var view map[string]any
	_ = json.Unmarshal(v.View, &view) // the simulator wrote it
	body := interactionForm(map[string]any{
		"type":       "block_actions",
		"token":      "playground-verification-token",
		"api_app_id": "A0PLAYGROUND",
		"team":       map[string]any{"id": s.opts.TeamID, "domain": s.opts.ChannelName},
		"user":       s.userJSON(u),
		"trigger_id": trigger,
		"container":  map[string]any{"type": "view", "view_id": v.ID},
		"view":       view,
		"actions":    []any{action},
	})
	s.mu.Unlock()

	resp, err := s.deliver(ctx, "interactions", formType, body)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBot, err)
	}
	if resp.status != 200 {
		return fmt.Errorf("%w: HTTP %d", ErrBot, resp.status)
	}
	return nil
}
