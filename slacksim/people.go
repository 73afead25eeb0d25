package slacksim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/countersign/countersign/slacksim/internal/wire"
)

// Errors of what a person does in the page.
var (
	// ErrUnknownUser: the page acted for someone not in the workspace.
	ErrUnknownUser = errors.New("no such person in the playground")
	// ErrNotFound: the message, button, thread or view acted on does not
	// exist (any more).
	ErrNotFound = errors.New("no such message, button or view")
	// ErrEmpty: there is nothing to send.
	ErrEmpty = errors.New("nothing to send")
	// ErrBot: the bot did not accept a delivery (an error status, or no
	// answer in time).
	ErrBot = errors.New("the bot did not accept the request")
)

// Send is a person typing text into the channel, or into the thread of
// threadTS: a slash command, or a message.
func (s *Simulator) Send(ctx context.Context, userID, text, threadTS string) error {
	u, ok := s.user(userID)
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownUser, userID)
	}
	text = strings.TrimSpace(text)
	if text == "" {
		return ErrEmpty
	}
	if strings.HasPrefix(text, "/") {
		return s.command(ctx, u, text, threadTS)
	}
	return s.message(ctx, u, text, threadTS)
}

// command delivers a slash command and shows its immediate response.
func (s *Simulator) command(ctx context.Context, u User, text, threadTS string) error {
	name, rest := text, ""
	if i := strings.IndexAny(text, " \t\n"); i >= 0 {
		name, rest = text[:i], strings.TrimSpace(text[i:])
	}
	s.mu.Lock()
	if name != s.opts.Command {
		s.addMessage(Message{User: SlackbotID, VisibleTo: u.ID, ThreadTS: threadTS, Text: slackEscape(name) +
			" is not a valid command. In Slack, all messages that start with the \"/\" character are interpreted as commands."})
		s.mu.Unlock()
		return nil
	}
	trigger := s.newTrigger(u.ID)
	s.mu.Unlock()

	resp, err := s.deliver(ctx, "commands", formType, s.commandForm(u, name, slackEscape(rest), trigger))
	failure := ""
	switch {
	case err != nil && ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		s.log.WithError(err).Warn("delivering a slash command")
		failure = "operation_timeout"
	case resp.status != 200:
		s.log.WithField("status", resp.status).Warn("the bot answered a slash command with an error status")
		failure = "dispatch_failed"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if failure != "" {
		s.addMessage(Message{User: SlackbotID, VisibleTo: u.ID, ThreadTS: threadTS,
			Text: fmt.Sprintf("%s failed with the error \"%s\"", slackEscape(name), failure)})
		return nil
	}
	s.commandResponse(u, slackEscape(text), threadTS, resp.body)
	return nil
}

// commandResponse shows a slash command's immediate response: nothing
// for an empty body, otherwise a message only the person sees, or one
// everyone sees (with the command) for response_type in_channel; s.mu is
// held.
func (s *Simulator) commandResponse(u User, command, threadTS string, body []byte) {
	raw := strings.TrimSpace(string(body))
	if raw == "" {
		return
	}
	var r struct {
		ResponseType string          `json:"response_type"`
		Text         string          `json:"text"`
		Blocks       json.RawMessage `json:"blocks"`
	}
	if json.Unmarshal(body, &r) != nil {
		r.Text = raw
	}
	m := Message{User: s.opts.BotUserID, BotID: s.opts.BotID, Text: r.Text, ThreadTS: threadTS}
	if blocks, ok := checkBlocks(string(r.Blocks)); ok {
		m.Blocks = blocks
	}
	if r.Text == "" && len(m.Blocks) == 0 {
		return
	}
	if r.ResponseType == "in_channel" {
		s.addMessage(Message{User: u.ID, Text: command})
		m.ThreadTS = ""
	} else {
		m.VisibleTo = u.ID
	}
	s.addMessage(m)
}

// message posts what a person typed and delivers it to the bot as
// events: "message", and "app_mention" first when it mentions the bot.
func (s *Simulator) message(ctx context.Context, u User, text, threadTS string) error {
	s.mu.Lock()
	var parent *Message
	if threadTS != "" {
		root, ok := s.byTS[threadTS]
		if !ok || root.VisibleTo != "" || root.ThreadTS != "" {
			s.mu.Unlock()
			return fmt.Errorf("%w: thread %s", ErrNotFound, threadTS)
		}
		parent = root
	}
	m := s.addMessage(Message{User: u.ID, Text: s.typed(text), ThreadTS: threadTS})
	var events []map[string]any
	ev := map[string]any{
		"type": "message", "channel": s.opts.ChannelID, "channel_type": "channel", "user": u.ID,
		"text": m.Text, "ts": m.TS, "event_ts": m.TS, "team": s.opts.TeamID,
	}
	if parent != nil {
		ev["thread_ts"], ev["parent_user_id"] = parent.TS, parent.User
	}
	if strings.Contains(m.Text, "<@"+s.opts.BotUserID+">") {
		mention := make(map[string]any, len(ev))
		for k, v := range ev {
			mention[k] = v
		}
		mention["type"] = "app_mention"
		delete(mention, "channel_type")
		delete(mention, "parent_user_id")
		events = append(events, mention)
	}
	events = append(events, ev)
	ids := make([]string, len(events))
	for i := range ids {
		ids[i] = "Ev" + strings.ToUpper(s.opts.NewID())
	}
	s.mu.Unlock()

	for i, ev := range events {
		resp, err := s.deliver(ctx, "events", jsonType, s.eventBody(ids[i], ev))
		if err != nil {
			return fmt.Errorf("%w: %s event: %w", ErrBot, ev["type"], err)
		}
		if resp.status != 200 {
			return fmt.Errorf("%w: %s event answered with HTTP %d", ErrBot, ev["type"], resp.status)
		}
	}
	return nil
}

// typedToken finds what a Slack client rewrites in typed text: mentions
// in Slack's form, @names, and bare URLs.
var typedToken = regexp.MustCompile(`<@[A-Z0-9]+>|@[\p{L}\p{N}_-]+(?:\.[\p{L}\p{N}_-]+)*|https?://[^\s<>]+`)

// typed is text as a Slack client sends it: &, < and > escaped, @names
// of people and the bot as <@U…> mentions, and bare URLs as <…> links.
func (s *Simulator) typed(text string) string {
	var b strings.Builder
	last := 0
	for _, loc := range typedToken.FindAllStringIndex(text, -1) {
		b.WriteString(slackEscape(text[last:loc[0]]))
		tok := text[loc[0]:loc[1]]
		last = loc[1]
		switch {
		case strings.HasPrefix(tok, "<@"):
			b.WriteString(tok)
		case strings.HasPrefix(tok, "@"):
			if id := s.userIDByName(tok[1:]); id != "" {
				b.WriteString("<@" + id + ">")
			} else {
				b.WriteString(slackEscape(tok))
			}
		default:
			url := strings.TrimRight(tok, ".,;:!?")
			b.WriteString("<" + slackEscape(url) + ">" + slackEscape(tok[len(url):]))
		}
	}
	b.WriteString(slackEscape(text[last:]))
	return b.String()
}

// userIDByName finds a person or the bot by name, ignoring case.
func (s *Simulator) userIDByName(name string) string {
	if strings.EqualFold(name, s.opts.BotName) {
		return s.opts.BotUserID
	}
	for _, u := range s.opts.Users {
		if strings.EqualFold(name, u.Name) {
			return u.ID
		}
	}
	return ""
}

func slackEscape(s string) string { return wire.Escape(s) }

// Click is a person pressing a button (action actionID, in block blockID
// if it is not empty) on the message ts.
func (s *Simulator) Click(ctx context.Context, userID, ts, blockID, actionID string) error {
	u, ok := s.user(userID)
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownUser, userID)
	}
	s.mu.Lock()
	m, found := s.byTS[ts]
	if !found || (m.VisibleTo != "" && m.VisibleTo != u.ID) {
		s.mu.Unlock()
		return fmt.Errorf("%w: message %s", ErrNotFound, ts)
	}
	action, found := findButton(m.Blocks, blockID, actionID)
	if !found {
		s.mu.Unlock()
		return fmt.Errorf("%w: button %q on message %s", ErrNotFound, actionID, ts)
	}
	action["action_ts"] = s.nextTS()
	trigger := s.newTrigger(u.ID)
	body := s.blockActions(u, *m, action, trigger)
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

// findButton finds a button in blocks — in an actions block or as a
// section's accessory — and returns it as a block_actions payload's
// action.
func findButton(blocks json.RawMessage, blockID, actionID string) (map[string]any, bool) {
	type button struct {
		Type     string          `json:"type"`
		ActionID string          `json:"action_id"`
		Text     json.RawMessage `json:"text"`
		Value    string          `json:"value"`
		Style    string          `json:"style"`
	}
	var bs []struct {
		Type      string   `json:"type"`
		BlockID   string   `json:"block_id"`
		Elements  []button `json:"elements"`
		Accessory *button  `json:"accessory"`
	}
	if json.Unmarshal(blocks, &bs) != nil {
		return nil, false
	}
	for _, b := range bs {
		if blockID != "" && b.BlockID != blockID {
			continue
		}
		candidates := b.Elements
		if b.Accessory != nil {
			candidates = append(candidates, *b.Accessory)
		}
		for _, e := range candidates {
			if e.Type != "button" || e.ActionID != actionID {
				continue
			}
			action := map[string]any{
				"type": "button", "action_id": e.ActionID, "block_id": b.BlockID,
				"text": e.Text, "value": e.Value,
			}
			if e.Style != "" {
				action["style"] = e.Style
			}
			return action, true
		}
	}
	return nil, false
}

// troubleConnecting is what Slack shows in a modal when the app does not
// answer a submission properly.
const troubleConnecting = "We had some trouble connecting. Try again?"

// Submit is a person submitting the modal viewID with input values by
// block ID and action ID. The bot's answer decides what happens to the
// modal (see the package doc).
func (s *Simulator) Submit(ctx context.Context, userID, viewID string, values map[string]map[string]string) error {
	var u User
	var body []byte
	err := s.inView(userID, viewID, func(user User, i int) {
		u = user
		body = s.viewPayload("view_submission", u, *s.views[u.ID][i], values, s.newTrigger(u.ID))
	})
	if err != nil {
		return err
	}

	resp, err := s.deliver(ctx, "interactions", formType, body)
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		s.log.WithError(err).Warn("delivering a view submission")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.publishViews(u.ID)
	i := s.viewIndex(u.ID, viewID)
	if i < 0 {
		return nil // closed meanwhile
	}
	v := s.views[u.ID][i]
	if err != nil || resp.status != 200 {
		s.setViewErrors(v, nil, troubleConnecting)
		return nil
	}
	if len(strings.TrimSpace(string(resp.body))) == 0 {
		s.views[u.ID] = append(s.views[u.ID][:i:i], s.views[u.ID][i+1:]...)
		return nil
	}
	var r struct {
		ResponseAction string            `json:"response_action"`
		Errors         map[string]string `json:"errors"`
		View           json.RawMessage   `json:"view"`
	}
	if json.Unmarshal(resp.body, &r) != nil {
		s.setViewErrors(v, nil, troubleConnecting)
		return nil
	}
	switch r.ResponseAction {
	case "errors":
		s.setViewErrors(v, r.Errors, "")
	case "update", "push":
		next, code := s.newView(string(r.View), u.ID, "")
		switch {
		case code != "":
			s.setViewErrors(v, nil, troubleConnecting)
		case r.ResponseAction == "update":
			next.ID = v.ID
			s.rewriteView(next)
			s.views[u.ID][i] = next
		case len(s.views[u.ID]) >= 3:
			s.setViewErrors(v, nil, troubleConnecting)
		default:
			s.views[u.ID] = append(s.views[u.ID], next)
		}
	case "clear":
		delete(s.views, u.ID)
	default:
		s.setViewErrors(v, nil, troubleConnecting)
	}
	return nil
}

// CloseView is a person closing the modal viewID without submitting it.
// The bot hears of it only if the view asked (notify_on_close).
func (s *Simulator) CloseView(ctx context.Context, userID, viewID string) error {
	var body []byte
	err := s.inView(userID, viewID, func(u User, i int) {
		v := *s.views[u.ID][i]
		if v.fields.ClearOnClose {
			delete(s.views, u.ID)
		} else {
			s.views[u.ID] = append(s.views[u.ID][:i:i], s.views[u.ID][i+1:]...)
		}
		s.publishViews(u.ID)
		if v.fields.NotifyOnClose {
			body = s.viewPayload("view_closed", u, v, nil, "")
		}
	})
	if err != nil {
		return err
	}

	if body == nil {
		return nil
	}
	resp, err := s.deliver(ctx, "interactions", formType, body)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBot, err)
	}
	if resp.status != 200 {
		return fmt.Errorf("%w: HTTP %d", ErrBot, resp.status)
	}
	return nil
}

// inView runs fn, with s.mu held, on the user's open view viewID at index
// i of their stack.
func (s *Simulator) inView(userID, viewID string, fn func(u User, i int)) error {
	u, ok := s.user(userID)
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownUser, userID)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.viewIndex(u.ID, viewID)
	if i < 0 {
		return fmt.Errorf("%w: view %s", ErrNotFound, viewID)
	}
	fn(u, i)
	return nil
}

// viewIndex finds a view in user's stack; s.mu is held.
func (s *Simulator) viewIndex(user, id string) int {
	for i, v := range s.views[user] {
		if v.ID == id {
			return i
		}
	}
	return -1
}

// setViewErrors shows errors in a view and gives it a new hash, as a
// changed view gets; s.mu is held.
func (s *Simulator) setViewErrors(v *View, errs map[string]string, general string) {
	v.Errors, v.Error = errs, general
	s.rewriteView(v)
}

// rewriteView gives v a new hash and writes its id and hash into its JSON;
// s.mu is held.
func (s *Simulator) rewriteView(v *View) {
	v.Hash = s.nextTS() + "." + s.opts.NewID()
	var fields map[string]any
	if json.Unmarshal(v.View, &fields) == nil {
		fields["id"], fields["root_view_id"], fields["hash"] = v.ID, v.ID, v.Hash
		v.View, _ = json.Marshal(fields)
	}
}
