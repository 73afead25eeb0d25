package slacksim

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/internal/testclock"
)

const testToken = "xoxb-test"

// newAPI serves a simulator's Web API and returns a slack-go client of it.
func newAPI(t *testing.T, clock *testclock.Clock) (*Simulator, *slack.Client, string) {
	t.Helper()
	sim := New(Options{BotURL: "http://127.0.0.1:1", SigningSecret: "secret", BotToken: testToken, Now: clock.Now})
	mux := http.NewServeMux()
	mux.Handle("/api/", sim.APIHandler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return sim, slack.New(testToken, slack.OptionAPIURL(srv.URL+"/api/")), srv.URL + "/api/"
}

// slackError is the error code of a failed Web API call.
func slackError(err error) string {
	var se slack.SlackErrorResponse
	if errors.As(err, &se) {
		return se.Err
	}
	if err != nil {
		return err.Error()
	}
	return ""
}

func TestAPIAnswersLikeSlack(t *testing.T) {
	ctx := context.Background()
	clock := testclock.New(time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC))
	sim, api, _ := newAPI(t, clock)

	auth, err := api.AuthTestContext(ctx)
	if err != nil || auth.UserID != DefaultBotUserID || auth.TeamID != DefaultTeamID || auth.BotID != DefaultBotID {
		t.Fatalf("auth.test = %+v, %v; want the bot %s in %s", auth, err, DefaultBotUserID, DefaultTeamID)
	}

	blocks := slack.MsgOptionBlocks(slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, "*hi*", false, false), nil, nil))
	_, root, err := api.PostMessageContext(ctx, DefaultChannelID, slack.MsgOptionText("root", false))
	if err != nil {
		t.Fatalf("chat.postMessage: %v", err)
	}
	_, reply, err := api.PostMessageContext(ctx, DefaultChannelID, slack.MsgOptionTS(root), slack.MsgOptionText("card", false), blocks)
	if err != nil {
		t.Fatalf("chat.postMessage in a thread: %v", err)
	}
	if !(root < reply) {
		t.Errorf("timestamps %q then %q: want increasing", root, reply)
	}
	_, nested, err := api.PostMessageContext(ctx, DefaultChannelID, slack.MsgOptionTS(reply), slack.MsgOptionText("nested", false))
	if err != nil {
		t.Fatalf("chat.postMessage to a reply: %v", err)
	}
	if _, _, _, err := api.UpdateMessageContext(ctx, DefaultChannelID, reply, slack.MsgOptionText("card, updated", false)); err != nil {
		t.Fatalf("chat.update: %v", err)
	}
	eph, err := api.PostEphemeralContext(ctx, DefaultChannelID, "U0YOU", slack.MsgOptionText("psst", false), slack.MsgOptionTS(root))
	if err != nil || eph == "" {
		t.Fatalf("chat.postEphemeral = %q, %v", eph, err)
	}
	members, err := api.GetUserGroupMembersContext(ctx, "S0GROUP")
	if err != nil || len(members) != 0 {
		t.Errorf("usergroups.users.list = %v, %v; want no members", members, err)
	}
	ch, err := api.GetConversationInfoContext(ctx, &slack.GetConversationInfoInput{ChannelID: DefaultChannelID})
	if err != nil || ch.Name != DefaultChannelName {
		t.Errorf("conversations.info = %+v, %v; want #%s", ch, err, DefaultChannelName)
	}

	st := sim.State()
	want := []Message{
		{TS: root, User: DefaultBotUserID, BotID: DefaultBotID, Text: "root"},
		{TS: reply, ThreadTS: root, User: DefaultBotUserID, BotID: DefaultBotID, Text: "card, updated", Updated: 1},
		{TS: nested, ThreadTS: root, User: DefaultBotUserID, BotID: DefaultBotID, Text: "nested"},
		{TS: eph, ThreadTS: root, User: DefaultBotUserID, BotID: DefaultBotID, Text: "psst", VisibleTo: "U0YOU"},
	}
	if len(st.Messages) != len(want) {
		t.Fatalf("state has %d messages, want %d: %+v", len(st.Messages), len(want), st.Messages)
	}
	for i, w := range want {
		got := st.Messages[i]
		got.Blocks = nil // chat.update without blocks removed them
		if g, _ := json.Marshal(got); string(g) != string(mustJSON(w)) {
			t.Errorf("message %d = %s, want %s", i, g, mustJSON(w))
		}
	}
}

// conversations.replies reads a thread: its root, then its replies, with
// the metadata they were posted with when asked for it; an ephemeral
// message is nobody's to read.
func TestAPIReadsAThread(t *testing.T) {
	ctx := context.Background()
	clock := testclock.New(time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC))
	_, api, _ := newAPI(t, clock)
	_, root, err := api.PostMessageContext(ctx, DefaultChannelID, slack.MsgOptionText("root", false))
	if err != nil {
		t.Fatal(err)
	}
	meta := slack.SlackMetadata{EventType: "countersign_card", EventPayload: map[string]any{"card": "card:1.0#0"}}
	_, card, err := api.PostMessageContext(ctx, DefaultChannelID, slack.MsgOptionTS(root), slack.MsgOptionText("card", false), slack.MsgOptionMetadata(meta))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.PostEphemeralContext(ctx, DefaultChannelID, "U0YOU", slack.MsgOptionText("psst", false), slack.MsgOptionTS(root)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := api.PostMessageContext(ctx, DefaultChannelID, slack.MsgOptionText("elsewhere", false)); err != nil {
		t.Fatal(err)
	}
	msgs, more, _, err := api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{
		ChannelID: DefaultChannelID, Timestamp: root, IncludeAllMetadata: true})
	if err != nil || more || len(msgs) != 2 || msgs[0].Timestamp != root || msgs[1].Timestamp != card {
		t.Fatalf("conversations.replies = %+v, %v, %v; want the root and the card", msgs, more, err)
	}
	if got := msgs[1].Metadata; got.EventType != meta.EventType || got.EventPayload["card"] != "card:1.0#0" || msgs[1].BotID != DefaultBotID {
		t.Errorf("the card read back = %+v, bot %q; want its metadata %+v, the bot's", got, msgs[1].BotID, meta)
	}
	if _, _, _, err := api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{
		ChannelID: DefaultChannelID, Timestamp: card}); slackError(err) != "thread_not_found" {
		t.Errorf("conversations.replies of a reply = %v, want thread_not_found", err)
	}
}

// chat.delete removes a bot message from the channel; one already gone,
// or in another channel, is refused as Slack refuses it.
func TestAPIDeletesABotMessage(t *testing.T) {
	ctx := context.Background()
	clock := testclock.New(time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC))
	sim, api, _ := newAPI(t, clock)
	_, root, err := api.PostMessageContext(ctx, DefaultChannelID, slack.MsgOptionText("root", false))
	if err != nil {
		t.Fatal(err)
	}
	_, card, err := api.PostMessageContext(ctx, DefaultChannelID, slack.MsgOptionTS(root), slack.MsgOptionText("a second card", false))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := api.DeleteMessageContext(ctx, DefaultChannelID, card); err != nil {
		t.Fatalf("chat.delete: %v", err)
	}
	if st := sim.State(); len(st.Messages) != 1 || st.Messages[0].TS != root {
		t.Errorf("state after chat.delete = %+v, want the root alone", st.Messages)
	}
	if _, _, err := api.DeleteMessageContext(ctx, DefaultChannelID, card); slackError(err) != "message_not_found" {
		t.Errorf("chat.delete again = %v, want message_not_found", err)
	}
	if _, _, err := api.DeleteMessageContext(ctx, "C0ELSEWHERE", root); slackError(err) != "channel_not_found" {
		t.Errorf("chat.delete in another channel = %v, want channel_not_found", err)
	}
}

func TestAPIErrorsLikeSlack(t *testing.T) {
	ctx := context.Background()
	clock := testclock.New(time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC))
	sim, api, url := newAPI(t, clock)
	_, root, err := api.PostMessageContext(ctx, DefaultChannelID, slack.MsgOptionText("root", false))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"post to another channel", func() error {
			_, _, err := api.PostMessageContext(ctx, "C0OTHER", slack.MsgOptionText("x", false))
			return err
		}, "channel_not_found"},
		{"post nothing", func() error {
			_, _, err := api.PostMessageContext(ctx, DefaultChannelID)
			return err
		}, "no_text"},
		{"post blocks without a type", func() error {
			return rawCall(t, url, "chat.postMessage", "channel="+DefaultChannelID+"&text=x&blocks=%5B%7B%22text%22%3A1%7D%5D")
		}, "invalid_blocks"},
		{"an unknown method", func() error {
			return rawCall(t, url, "users.setPresence", "presence=away")
		}, "unknown_method"},
		{"reply to an unknown thread", func() error {
			_, _, err := api.PostMessageContext(ctx, DefaultChannelID, slack.MsgOptionTS("1.000001"), slack.MsgOptionText("x", false))
			return err
		}, "thread_not_found"},
		{"update an unknown message", func() error {
			_, _, _, err := api.UpdateMessageContext(ctx, DefaultChannelID, "1.000001", slack.MsgOptionText("x", false))
			return err
		}, "message_not_found"},
		{"ephemeral to a stranger", func() error {
			_, err := api.PostEphemeralContext(ctx, DefaultChannelID, "U0STRANGER", slack.MsgOptionText("x", false))
			return err
		}, "user_not_in_channel"},
		{"open a view with an unknown trigger", func() error {
			_, err := api.OpenViewContext(ctx, "123.unknown", modal("x"))
			return err
		}, "invalid_trigger_id"},
		{"update an unknown view", func() error {
			_, err := api.UpdateViewContext(ctx, modal("x"), "", "", "V0NONE")
			return err
		}, "not_found"},
		{"a wrong token", func() error {
			_, err := slack.New("xoxb-wrong", slack.OptionAPIURL(url)).AuthTestContext(ctx)
			return err
		}, "invalid_auth"},
		{"no token", func() error {
			_, err := slack.New("", slack.OptionAPIURL(url)).AuthTestContext(ctx)
			return err
		}, "not_authed"},
	}
	for _, tt := range tests {
		if got := slackError(tt.call()); got != tt.want {
			t.Errorf("%s: error %q, want %q", tt.name, got, tt.want)
		}
	}
	if _, _, err := api.PostMessageContext(ctx, DefaultChannelID, slack.MsgOptionTS(root), slack.MsgOptionText("ok", false)); err != nil {
		t.Errorf("a good post after the errors: %v", err)
	}
	if n := len(sim.State().Messages); n != 2 {
		t.Errorf("the errors left %d messages, want 2", n)
	}
}

// rawCall calls a Web API method with a form body and returns its error
// code as an error.
func rawCall(t *testing.T, url, method, form string) error {
	t.Helper()
	resp, err := http.Post(url+method, "application/x-www-form-urlencoded", strings.NewReader("token="+testToken+"&"+form))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		OK    bool
		Error string
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	if body.OK {
		return nil
	}
	return errors.New(body.Error)
}

func TestViewsFollowTriggers(t *testing.T) {
	ctx := context.Background()
	clock := testclock.New(time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC))
	sim, api, _ := newAPI(t, clock)
	trigger := func(user string) string {
		sim.mu.Lock()
		defer sim.mu.Unlock()
		return sim.newTrigger(user)
	}

	trig := trigger("U0TEAMMATE")
	opened, err := api.OpenViewContext(ctx, trig, modal("First"))
	if err != nil {
		t.Fatalf("views.open: %v", err)
	}
	if opened.View.ID == "" || opened.View.Hash == "" {
		t.Errorf("views.open answered a view without id or hash: %+v", opened.View)
	}
	if _, err := api.OpenViewContext(ctx, trig, modal("Again")); slackError(err) != "invalid_trigger_id" {
		t.Errorf("views.open with a used trigger: %v, want invalid_trigger_id", err)
	}
	late := trigger("U0TEAMMATE")
	clock.Add(triggerTTL + time.Second)
	if _, err := api.OpenViewContext(ctx, late, modal("Late")); slackError(err) != "expired_trigger_id" {
		t.Errorf("views.open with an old trigger: %v, want expired_trigger_id", err)
	}
	if _, err := api.PushViewContext(ctx, trigger("U0TEAMMATE"), modal("Second")); err != nil {
		t.Fatalf("views.push: %v", err)
	}
	if _, err := api.UpdateViewContext(ctx, modal("First, updated"), "", "stale-hash", opened.View.ID); slackError(err) != "hash_conflict" {
		t.Errorf("views.update with a stale hash: %v, want hash_conflict", err)
	}
	updated, err := api.UpdateViewContext(ctx, modal("First, updated"), "", opened.View.Hash, opened.View.ID)
	if err != nil {
		t.Fatalf("views.update: %v", err)
	}
	if updated.View.ID != opened.View.ID || updated.View.Hash == opened.View.Hash {
		t.Errorf("views.update answered id %s hash %s; want the same id %s and a new hash", updated.View.ID, updated.View.Hash, opened.View.ID)
	}

	views := sim.State().Views
	if len(views["U0YOU"]) != 0 {
		t.Errorf("You has views open: %+v", views["U0YOU"])
	}
	var titles []string
	for _, v := range views["U0TEAMMATE"] {
		var f struct{ Title struct{ Text string } }
		_ = json.Unmarshal(v.View, &f)
		titles = append(titles, f.Title.Text)
	}
	if got := strings.Join(titles, ", "); got != "First, updated, Second" {
		t.Errorf("Teammate's view stack = %q, want %q", got, "First, updated, Second")
	}
}

func modal(title string) slack.ModalViewRequest {
	v := slack.ModalViewRequest{
		Type:  slack.VTModal,
		Title: slack.NewTextBlockObject(slack.PlainTextType, title, false, false),
	}
	v.Blocks.BlockSet = []slack.Block{slack.NewDividerBlock()}
	return v
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
