package slacktest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"

	"github.com/countersign/countersign/slacksig"
	"github.com/countersign/countersign/slacksim/slacktest"
)

const token = "xoxb-test-token-1234"

func newClient(srv *slacktest.Server) *slack.Client {
	return slack.New(token, slack.OptionAPIURL(srv.URL()))
}

func section(text string) slack.Block {
	return slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, text, false, false), nil, nil)
}

func TestURL(t *testing.T) {
	srv := slacktest.NewServer(t)
	if u := srv.URL(); !strings.HasSuffix(u, "/") || !strings.HasPrefix(u, "http://127.0.0.1:") {
		t.Errorf("URL() = %q, want a local URL ending with /", u)
	}
}

func TestAuthTest(t *testing.T) {
	srv := slacktest.NewServer(t)
	got, err := newClient(srv).AuthTestContext(context.Background())
	if err != nil {
		t.Fatalf("AuthTest() = %v", err)
	}
	if got.UserID != slacktest.BotUserID || got.BotID != slacktest.BotID || got.TeamID != slacktest.TeamID {
		t.Errorf("AuthTest() = user %q bot %q team %q, want %q %q %q", got.UserID, got.BotID, got.TeamID,
			slacktest.BotUserID, slacktest.BotID, slacktest.TeamID)
	}
}

func TestPostMessageInThread(t *testing.T) {
	ctx := context.Background()
	srv := slacktest.NewServer(t)
	api := newClient(srv)
	channel, root, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("<@U1> asked: deploy", false))
	if err != nil {
		t.Fatalf("PostMessage(root) = %v", err)
	}
	if channel != "C1" || root == "" {
		t.Fatalf("PostMessage(root) = %q, %q", channel, root)
	}
	var replies []string
	for i := range 3 {
		_, ts, err := api.PostMessageContext(ctx, "C1",
			slack.MsgOptionText(fmt.Sprintf("reply %d", i), false),
			slack.MsgOptionBlocks(section(fmt.Sprintf("*reply* %d", i))),
			slack.MsgOptionTS(root))
		if err != nil {
			t.Fatalf("PostMessage(reply %d) = %v", i, err)
		}
		replies = append(replies, ts)
	}
	prev := root
	for _, ts := range replies {
		if ts <= prev {
			t.Errorf("ts %q after %q, want unique and increasing", ts, prev)
		}
		prev = ts
	}
	msgs := srv.Messages("C1", root)
	if len(msgs) != 3 {
		t.Fatalf("Messages(C1, root) = %d messages, want 3", len(msgs))
	}
	for i, m := range msgs {
		if m.TS != replies[i] || m.Text != fmt.Sprintf("reply %d", i) || m.ThreadTS != root || m.Channel != "C1" {
			t.Errorf("message %d = ts %q text %q thread %q channel %q", i, m.TS, m.Text, m.ThreadTS, m.Channel)
		}
		var blocks slack.Blocks
		if err := json.Unmarshal(m.Blocks, &blocks); err != nil || len(blocks.BlockSet) != 1 {
			t.Errorf("message %d blocks %s: %v", i, m.Blocks, err)
		}
		if !m.Token {
			t.Errorf("message %d: Token = false, want true", i)
		}
		if _, ok := m.Params["token"]; ok {
			t.Errorf("message %d: the token is kept in Params", i)
		}
		for k, v := range m.Params {
			if strings.Contains(v, token) {
				t.Errorf("message %d: Params[%q] holds the token", i, k)
			}
		}
	}
	if top := srv.Messages("C1", ""); len(top) != 1 || top[0].TS != root {
		t.Errorf("Messages(C1, \"\") = %v, want the root only", top)
	}
}

func TestUpdateMessage(t *testing.T) {
	ctx := context.Background()
	srv := slacktest.NewServer(t)
	api := newClient(srv)
	_, ts, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("Approval needed", false), slack.MsgOptionBlocks(section("pending")))
	if err != nil {
		t.Fatal(err)
	}
	channel, gotTS, _, err := api.UpdateMessageContext(ctx, "C1", ts, slack.MsgOptionText("approved", false), slack.MsgOptionBlocks(section("✅ Approved")))
	if err != nil {
		t.Fatalf("UpdateMessage() = %v", err)
	}
	if channel != "C1" || gotTS != ts {
		t.Errorf("UpdateMessage() = %q, %q, want C1, %q", channel, gotTS, ts)
	}
	updates := srv.CallsTo("chat.update")
	if len(updates) != 1 || updates[0].TS != ts || !strings.Contains(string(updates[0].Blocks), "✅ Approved") {
		t.Errorf("CallsTo(chat.update) = %+v", updates)
	}
	msg, ok := srv.Message("C1", ts)
	if !ok || msg.Text != "approved" || !strings.Contains(string(msg.Blocks), "✅ Approved") || msg.Method != "chat.postMessage" {
		t.Errorf("Message(C1, ts) = %+v, %v, want the updated message", msg, ok)
	}

	_, _, _, err = api.UpdateMessageContext(ctx, "C1", "1.000000", slack.MsgOptionText("x", false))
	if code := slackError(err); code != "message_not_found" {
		t.Errorf("UpdateMessage(unknown ts) = %v, want message_not_found", err)
	}
}

func TestPostEphemeral(t *testing.T) {
	srv := slacktest.NewServer(t)
	ts, err := newClient(srv).PostEphemeralContext(context.Background(), "C1", "U2", slack.MsgOptionText("Already approved by <@U3>", false))
	if err != nil || ts == "" {
		t.Fatalf("PostEphemeral() = %q, %v", ts, err)
	}
	calls := srv.CallsTo("chat.postEphemeral")
	if len(calls) != 1 || calls[0].User != "U2" || calls[0].Channel != "C1" || calls[0].Text != "Already approved by <@U3>" || calls[0].TS != ts {
		t.Errorf("CallsTo(chat.postEphemeral) = %+v", calls)
	}
	if len(srv.Messages("C1", "")) != 0 {
		t.Errorf("an ephemeral message shows among the channel's messages")
	}
}

func TestViews(t *testing.T) {
	ctx := context.Background()
	srv := slacktest.NewServer(t)
	api := newClient(srv)
	view := slack.ModalViewRequest{
		Type:            slack.VTModal,
		Title:           slack.NewTextBlockObject(slack.PlainTextType, "Reject call", false, false),
		CallbackID:      "reject_call",
		PrivateMetadata: "ref-1",
		Blocks:          slack.Blocks{BlockSet: []slack.Block{section("why?")}},
	}
	opened, err := api.OpenViewContext(ctx, "trigger.1", view)
	if err != nil {
		t.Fatalf("OpenView() = %v", err)
	}
	if opened.ID == "" || opened.CallbackID != "reject_call" || opened.PrivateMetadata != "ref-1" || opened.Hash == "" {
		t.Errorf("OpenView() view = id %q callback %q metadata %q hash %q", opened.ID, opened.CallbackID, opened.PrivateMetadata, opened.Hash)
	}
	calls := srv.CallsTo("views.open")
	if len(calls) != 1 || calls[0].Params["trigger_id"] != "trigger.1" || !strings.Contains(string(calls[0].Blocks), "why?") {
		t.Errorf("CallsTo(views.open) = %+v", calls)
	}
	var sent slack.ModalViewRequest
	if err := json.Unmarshal([]byte(calls[0].Params["view"]), &sent); err != nil || sent.CallbackID != "reject_call" {
		t.Errorf("Params[view] = %s: %v", calls[0].Params["view"], err)
	}

	view.Blocks = slack.Blocks{BlockSet: []slack.Block{section("updated")}}
	updated, err := api.UpdateViewContext(ctx, view, "", "", opened.ID)
	if err != nil || updated.ID != opened.ID {
		t.Fatalf("UpdateView() = %v, %v", updated, err)
	}
	if calls := srv.CallsTo("views.update"); len(calls) != 1 || !strings.Contains(string(calls[0].Blocks), "updated") {
		t.Errorf("CallsTo(views.update) = %+v", calls)
	}
	if _, err := api.UpdateViewContext(ctx, view, "", "", "V_UNKNOWN"); slackError(err) != "not_found" {
		t.Errorf("UpdateView(unknown id) = %v, want not_found", err)
	}
}

func TestGetUserGroupMembers(t *testing.T) {
	ctx := context.Background()
	srv := slacktest.NewServer(t)
	srv.SetGroupMembers("S1", "U1", "U2")
	api := newClient(srv)
	got, err := api.GetUserGroupMembersContext(ctx, "S1")
	if err != nil || fmt.Sprint(got) != "[U1 U2]" {
		t.Errorf("GetUserGroupMembers(S1) = %v, %v, want [U1 U2]", got, err)
	}
	if _, err := api.GetUserGroupMembersContext(ctx, "S2"); slackError(err) != "no_such_subteam" {
		t.Errorf("GetUserGroupMembers(S2) = %v, want no_such_subteam", err)
	}
	if calls := srv.CallsTo("usergroups.users.list"); len(calls) != 2 || calls[0].Params["usergroup"] != "S1" {
		t.Errorf("CallsTo(usergroups.users.list) = %+v", calls)
	}
}

func TestConversationsInfo(t *testing.T) {
	srv := slacktest.NewServer(t)
	ch, err := newClient(srv).GetConversationInfoContext(context.Background(), &slack.GetConversationInfoInput{ChannelID: "C9"})
	if err != nil || ch.ID != "C9" {
		t.Errorf("GetConversationInfo(C9) = %+v, %v", ch, err)
	}
}

// A direct message goes to the channel conversations.open names, and a
// message's permalink names its channel and ts.
func TestDirectMessageAndPermalink(t *testing.T) {
	ctx := context.Background()
	srv := slacktest.NewServer(t)
	api := newClient(srv)
	dm, _, _, err := api.OpenConversationContext(ctx, &slack.OpenConversationParameters{Users: []string{"U0BOB"}})
	if err != nil || dm.ID != slacktest.DMChannel("U0BOB") || !strings.HasPrefix(dm.ID, "D") {
		t.Fatalf("OpenConversation(U0BOB) = %+v, %v; want %s", dm, err, slacktest.DMChannel("U0BOB"))
	}
	if _, _, _, err := api.OpenConversationContext(ctx, &slack.OpenConversationParameters{Users: []string{"bob"}}); err == nil || err.Error() != "user_not_found" {
		t.Errorf("OpenConversation(bob) = %v, want user_not_found", err)
	}
	_, ts, err := api.PostMessageContext(ctx, dm.ID, slack.MsgOptionText("hello", false))
	if err != nil {
		t.Fatal(err)
	}
	if got := srv.Messages(dm.ID, ""); len(got) != 1 || got[0].Text != "hello" {
		t.Errorf("Messages(%s) = %+v, want the direct message", dm.ID, got)
	}
	link, err := api.GetPermalinkContext(ctx, &slack.PermalinkParameters{Channel: dm.ID, Ts: ts})
	if err != nil || link != slacktest.Permalink(dm.ID, ts) || !strings.Contains(link, "/archives/"+dm.ID+"/p") {
		t.Errorf("GetPermalink = %q, %v; want %q", link, err, slacktest.Permalink(dm.ID, ts))
	}
	if _, err := api.GetPermalinkContext(ctx, &slack.PermalinkParameters{Channel: "C1", Ts: "1.000001"}); err == nil || err.Error() != "message_not_found" {
		t.Errorf("GetPermalink(unknown) = %v, want message_not_found", err)
	}
}

func TestRateLimitNext(t *testing.T) {
	ctx := context.Background()
	srv := slacktest.NewServer(t)
	api := newClient(srv)
	srv.RateLimitNext("chat.postMessage", 2, 1500*time.Millisecond)
	for i := range 2 {
		_, _, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("hi", false))
		rl, ok := errors.AsType[*slack.RateLimitedError](err)
		if !ok || rl.RetryAfter != 2*time.Second {
			t.Fatalf("PostMessage() %d = %v, want a *slack.RateLimitedError with RetryAfter 2s", i, err)
		}
	}
	if _, _, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("hi", false)); err != nil {
		t.Fatalf("PostMessage() after the rate limit = %v", err)
	}
	calls := srv.CallsTo("chat.postMessage")
	if len(calls) != 3 || calls[0].Error != "ratelimited" || calls[1].OK() || !calls[2].OK() {
		t.Errorf("CallsTo(chat.postMessage) errors = %q %q %q, want ratelimited twice, then ok", calls[0].Error, calls[1].Error, calls[2].Error)
	}
	if msgs := srv.Messages("C1", ""); len(msgs) != 1 {
		t.Errorf("Messages() = %d, want only the one that was posted", len(msgs))
	}
	// Other methods are not limited.
	if _, err := api.AuthTestContext(ctx); err != nil {
		t.Errorf("AuthTest() = %v", err)
	}
}

func TestFailNext(t *testing.T) {
	ctx := context.Background()
	srv := slacktest.NewServer(t)
	api := newClient(srv)
	srv.FailNext("views.open", "expired_trigger_id", 1)
	view := slack.ModalViewRequest{Type: slack.VTModal, Title: slack.NewTextBlockObject(slack.PlainTextType, "x", false, false)}
	if _, err := api.OpenViewContext(ctx, "trigger.1", view); slackError(err) != "expired_trigger_id" {
		t.Fatalf("OpenView() = %v, want expired_trigger_id", err)
	}
	if _, err := api.OpenViewContext(ctx, "trigger.2", view); err != nil {
		t.Fatalf("OpenView() after the failure = %v", err)
	}
}

// TestRawRequests covers what slack-go does not send: JSON bodies for
// chat methods, missing tokens, unknown methods.
func TestRawRequests(t *testing.T) {
	srv := slacktest.NewServer(t)
	tests := []struct {
		name, method, contentType, body string
		auth                            bool
		want                            string // error code, "" for ok
		wantToken                       bool
	}{
		{"JSON body", "chat.postMessage", "application/json; charset=utf-8",
			`{"channel":"C1","text":"hi","thread_ts":"1700000000.000100","blocks":[{"type":"divider"}],"unfurl_links":false}`, true, "", true},
		{"form body with token", "chat.postMessage", slacktest.FormContentType,
			url.Values{"channel": {"C1"}, "text": {"hi"}, "token": {token}}.Encode(), false, "", true},
		{"no token", "chat.postMessage", slacktest.FormContentType, "channel=C1&text=hi", false, "not_authed", false},
		{"no text", "chat.postMessage", slacktest.FormContentType, "channel=C1", true, "no_text", true},
		{"no channel", "chat.postMessage", slacktest.FormContentType, "text=hi", true, "channel_not_found", true},
		{"broken JSON", "chat.postMessage", "application/json", `{"channel":`, true, "invalid_json", true},
		{"unknown method", "chat.scheduleMessage", slacktest.FormContentType, "channel=C1", true, "unknown_method", true},
		{"query parameters", "conversations.info", "", "", true, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := srv.URL() + tt.method
			if tt.method == "conversations.info" {
				target += "?channel=C7"
			}
			req, err := http.NewRequest(http.MethodPost, target, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if tt.contentType != "" {
				req.Header.Set("Content-Type", tt.contentType)
			}
			if tt.auth {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var got struct {
				OK    bool   `json:"ok"`
				Error string `json:"error"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
				t.Fatal(err)
			}
			if got.Error != tt.want || got.OK != (tt.want == "") {
				t.Fatalf("%s = ok %v error %q, want error %q", tt.method, got.OK, got.Error, tt.want)
			}
			calls := srv.Calls()
			last := calls[len(calls)-1]
			if last.Method != tt.method || last.Error != tt.want || last.Token != tt.wantToken {
				t.Errorf("last call = %s error %q token %v, want %s %q %v", last.Method, last.Error, last.Token, tt.method, tt.want, tt.wantToken)
			}
			if tt.name == "JSON body" {
				if last.ThreadTS != "1700000000.000100" || last.Params["unfurl_links"] != "false" || string(last.Blocks) != `[{"type":"divider"}]` {
					t.Errorf("JSON call = thread %q unfurl %q blocks %s", last.ThreadTS, last.Params["unfurl_links"], last.Blocks)
				}
			}
			if tt.name == "query parameters" && last.Channel != "C7" {
				t.Errorf("channel from the query = %q, want C7", last.Channel)
			}
		})
	}
}

func TestWaitFor(t *testing.T) {
	srv := slacktest.NewServer(t)
	api := newClient(srv)
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 3 {
			time.Sleep(5 * time.Millisecond)
			if _, _, err := api.PostMessageContext(context.Background(), "C1", slack.MsgOptionText("hi", false)); err != nil {
				t.Error(err)
			}
		}
	})
	if got := srv.WaitFor(t, "chat.postMessage", 3, 5*time.Second); len(got) < 3 {
		t.Errorf("WaitFor(3) = %d calls", len(got))
	}
	wg.Wait()

	rec := &recordingTB{TB: t}
	start := time.Now()
	srv.WaitFor(rec, "views.open", 1, 50*time.Millisecond)
	if !rec.failed || !strings.Contains(rec.msg, "0 calls to views.open") {
		t.Errorf("WaitFor(never called) failed %v with %q, want a failure", rec.failed, rec.msg)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("WaitFor gave up after %v, before its timeout", d)
	}
}

// recordingTB records a Fatalf instead of ending the test.
type recordingTB struct {
	testing.TB
	failed bool
	msg    string
}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
}

func (r *recordingTB) Helper() {}

// Slack's documented example of request signing.
const (
	exampleSecret    = "8f742231b10e8888abcd99yyyzzz85a5"
	exampleBody      = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
	exampleSignature = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
)

func TestSignerSlackExample(t *testing.T) {
	at := time.Unix(1531420618, 0)
	s := slacktest.NewSigner(exampleSecret)
	if got := s.Signature(at, []byte(exampleBody)); got != exampleSignature {
		t.Errorf("Signature(example) = %s, want %s", got, exampleSignature)
	}
	req := s.Request(http.MethodPost, "http://bot.test/slack/commands", slacktest.FormContentType, []byte(exampleBody), at)
	if req.Header.Get("X-Slack-Request-Timestamp") != "1531420618" || req.Header.Get("X-Slack-Signature") != exampleSignature ||
		req.Header.Get("Content-Type") != slacktest.FormContentType {
		t.Errorf("Request() headers = %v", req.Header)
	}
}

// TestSignerVerifier signs requests and has the handlers' verifier check
// them, through a real HTTP round trip.
func TestSignerVerifier(t *testing.T) {
	now := time.Date(2025, 3, 14, 9, 0, 0, 0, time.UTC)
	v := slacksig.NewVerifier("the-secret", func() time.Time { return now })
	var got []byte
	bot := httptest.NewServer(v.Middleware(func(w http.ResponseWriter, r *http.Request, body []byte) { got = body }))
	defer bot.Close()
	body := slacktest.SlashCommand(url.Values{"text": {"deploy billing"}})
	tests := []struct {
		name   string
		signer slacktest.Signer
		at     time.Time
		want   int
	}{
		{"right secret", slacktest.NewSigner("the-secret"), now, http.StatusOK},
		{"4 minutes ago", slacktest.NewSigner("the-secret"), now.Add(-4 * time.Minute), http.StatusOK},
		{"wrong secret", slacktest.NewSigner("another"), now, http.StatusUnauthorized},
		{"10 minutes ago", slacktest.NewSigner("the-secret"), now.Add(-10 * time.Minute), http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got = nil
			resp, err := http.DefaultClient.Do(tt.signer.Request(http.MethodPost, bot.URL+"/slack/commands", slacktest.FormContentType, body, tt.at))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Fatalf("status = %d, want %d", resp.StatusCode, tt.want)
			}
			if tt.want == http.StatusOK && string(got) != string(body) {
				t.Errorf("handler got body %q, want %q", got, body)
			}
		})
	}
	// A request also works when handed straight to a handler.
	rec := httptest.NewRecorder()
	v.Middleware(func(w http.ResponseWriter, r *http.Request, body []byte) {}).
		ServeHTTP(rec, slacktest.NewSigner("the-secret").Request(http.MethodPost, "/slack/commands", slacktest.FormContentType, body, now))
	if rec.Code != http.StatusOK {
		t.Errorf("ServeHTTP(signed request) = %d, want 200", rec.Code)
	}
}

// TestPayloads checks that slack-go parses the built payloads as Slack's.
func TestPayloads(t *testing.T) {
	t.Run("slash command", func(t *testing.T) {
		req := httptest.NewRequest(http.MethodPost, "/slack/commands", strings.NewReader(string(slacktest.SlashCommand(url.Values{"text": {"deploy"}, "user_id": {"U9"}}))))
		req.Header.Set("Content-Type", slacktest.FormContentType)
		cmd, err := slack.SlashCommandParse(req)
		if err != nil {
			t.Fatal(err)
		}
		if cmd.Command != "/agent" || cmd.Text != "deploy" || cmd.UserID != "U9" || cmd.ChannelID != slacktest.ChannelID || cmd.TeamID != slacktest.TeamID || cmd.TriggerID == "" {
			t.Errorf("SlashCommandParse() = %+v", cmd)
		}
	})
	t.Run("block actions", func(t *testing.T) {
		a := parsePayload(t, slacktest.BlockActions(slacktest.Click{User: "U2", Channel: "C2", MessageTS: "1700000000.000200", ThreadTS: "1700000000.000100", ActionID: "approve", Value: "ref-1"}))
		b := parsePayload(t, slacktest.BlockActions(slacktest.Click{ActionID: "approve"}))
		if a.Type != slack.InteractionTypeBlockActions || len(a.ActionCallback.BlockActions) != 1 {
			t.Fatalf("payload type %q with %d block actions", a.Type, len(a.ActionCallback.BlockActions))
		}
		act := a.ActionCallback.BlockActions[0]
		if act.ActionID != "approve" || act.Value != "ref-1" || a.User.ID != "U2" || a.Channel.ID != "C2" ||
			a.Container.MessageTs != "1700000000.000200" || a.Message.ThreadTimestamp != "1700000000.000100" || a.TriggerID == "" {
			t.Errorf("block actions = %+v", a)
		}
		if act.ActionTs == b.ActionCallback.BlockActions[0].ActionTs || a.TriggerID == b.TriggerID {
			t.Errorf("two clicks share action_ts %q or trigger_id %q", act.ActionTs, a.TriggerID)
		}
	})
	t.Run("view submission", func(t *testing.T) {
		cb := parsePayload(t, slacktest.ViewSubmission(slacktest.Submission{
			User: "U3", CallbackID: "reject_call", PrivateMetadata: "ref-1",
			Values: map[string]map[string]string{"reason": {"reason_input": "not now"}},
		}))
		if cb.Type != slack.InteractionTypeViewSubmission || cb.View.CallbackID != "reject_call" || cb.View.PrivateMetadata != "ref-1" ||
			cb.User.ID != "U3" || cb.View.ID == "" || cb.View.Hash == "" {
			t.Errorf("view submission = %+v", cb)
		}
		if got := cb.View.State.Values["reason"]["reason_input"].Value; got != "not now" {
			t.Errorf("state value = %q, want %q", got, "not now")
		}
	})
	t.Run("event callback", func(t *testing.T) {
		ev, err := slackevents.ParseEvent(slacktest.EventCallback("", map[string]any{
			"type": "message", "channel": "C1", "user": "U1", "text": "stop", "ts": "1700000000.000300", "thread_ts": "1700000000.000100",
		}), slackevents.OptionNoVerifyToken())
		if err != nil {
			t.Fatal(err)
		}
		msg, ok := ev.InnerEvent.Data.(*slackevents.MessageEvent)
		if ev.Type != slackevents.CallbackEvent || ev.TeamID != slacktest.TeamID || !ok || msg.Text != "stop" || msg.ThreadTimeStamp != "1700000000.000100" {
			t.Errorf("ParseEvent() = %+v, inner %+v", ev, ev.InnerEvent.Data)
		}
	})
}

func parsePayload(t *testing.T, body []byte) slack.InteractionCallback {
	t.Helper()
	form, err := url.ParseQuery(string(body))
	if err != nil {
		t.Fatal(err)
	}
	var cb slack.InteractionCallback
	if err := json.Unmarshal([]byte(form.Get("payload")), &cb); err != nil {
		t.Fatalf("payload does not parse: %v", err)
	}
	return cb
}

// slackError is the error code of a Slack API error, or "" if err is not
// one.
func slackError(err error) string {
	if e, ok := errors.AsType[slack.SlackErrorResponse](err); ok {
		return e.Err
	}
	return ""
}

// Streamed messages record the task updates of their chunks, in order;
// a chunk of tasks counts as something to append.
func TestStreamTasks(t *testing.T) {
	ctx := context.Background()
	srv := slacktest.NewServer(t)
	api := newClient(srv)
	_, root, _ := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("root", false))
	task := func(status slack.TaskCardStatus, details string) slack.MsgOption {
		c := slack.NewTaskUpdateChunk("0.0", "Running srv__long")
		c.Status, c.Details = status, details
		return slack.MsgOptionChunks(c)
	}
	_, ts, err := api.StartStreamContext(ctx, "C1", slack.MsgOptionTS(root), task(slack.TaskCardStatusInProgress, "1 of 2"))
	if err != nil {
		t.Fatalf("chat.startStream = %v", err)
	}
	if _, _, err := api.AppendStreamContext(ctx, "C1", ts, task(slack.TaskCardStatusInProgress, "2 of 2")); err != nil {
		t.Fatalf("chat.appendStream of a task = %v", err)
	}
	if _, _, err := api.StopStreamContext(ctx, "C1", ts, task(slack.TaskCardStatusComplete, "")); err != nil {
		t.Fatalf("chat.stopStream = %v", err)
	}
	var got []string
	for _, u := range srv.Tasks("C1", ts) {
		got = append(got, u.ID+" "+u.Status+" "+u.Details)
	}
	want := []string{"0.0 in_progress 1 of 2", "0.0 in_progress 2 of 2", "0.0 complete "}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("tasks = %q, want %q", got, want)
	}
	if _, _, err := api.AppendStreamContext(ctx, "C1", ts, slack.MsgOptionChunks(slack.NewMarkdownTextChunk("late"))); err == nil {
		t.Error("chat.appendStream after the stop was accepted")
	}
}

// A channel the bot was removed from refuses what it posts and updates
// there with not_in_channel, an archived one with is_archived; other
// channels, and direct messages, are as before; invited back, the bot
// posts there again.
func TestRemoveBotAndArchiveChannel(t *testing.T) {
	srv := slacktest.NewServer(t)
	api := newClient(srv)
	_, ts, err := api.PostMessage("C1", slack.MsgOptionText("before", false))
	if err != nil {
		t.Fatal(err)
	}
	srv.RemoveBot("C1")
	_, _, err = api.PostMessage("C1", slack.MsgOptionText("after", false))
	if code := slackCode(err); code != "not_in_channel" {
		t.Errorf("posting after the removal: %v, want not_in_channel", err)
	}
	_, _, _, err = api.UpdateMessage("C1", ts, slack.MsgOptionText("changed", false))
	if code := slackCode(err); code != "not_in_channel" {
		t.Errorf("updating after the removal: %v, want not_in_channel", err)
	}
	info, err := api.GetConversationInfo(&slack.GetConversationInfoInput{ChannelID: "C1"})
	if err != nil || info.IsMember {
		t.Errorf("conversations.info after the removal = %+v, %v; want no member", info, err)
	}
	if _, _, err := api.PostMessage("C2", slack.MsgOptionText("elsewhere", false)); err != nil {
		t.Errorf("posting in another channel: %v", err)
	}
	srv.ArchiveChannel("C2")
	_, _, err = api.PostMessage("C2", slack.MsgOptionText("archived", false))
	if code := slackCode(err); code != "is_archived" {
		t.Errorf("posting in an archived channel: %v, want is_archived", err)
	}
	srv.InviteBot("C1")
	if _, _, err := api.PostMessage("C1", slack.MsgOptionText("back", false)); err != nil {
		t.Errorf("posting once invited back: %v", err)
	}
}

func slackCode(err error) string {
	var se slack.SlackErrorResponse
	if errors.As(err, &se) {
		return se.Err
	}
	return ""
}

// HoldAnswer: the message is in the channel at once, and its poster hears
// back only once released; other calls are not held.
func TestHoldAnswer(t *testing.T) {
	ctx := context.Background()
	srv := slacktest.NewServer(t)
	api := newClient(srv)
	recorded, release := srv.HoldAnswer("chat.postMessage", func(c slacktest.Call) bool { return strings.Contains(c.Text, "card") })
	if _, _, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("root", false)); err != nil {
		t.Fatalf("PostMessage(root) = %v", err)
	}
	type posted struct {
		ts  string
		err error
	}
	answered := make(chan posted, 1)
	go func() {
		_, ts, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("the card", false))
		answered <- posted{ts, err}
	}()
	<-recorded
	calls := srv.CallsTo("chat.postMessage")
	if len(calls) != 2 || calls[1].Text != "the card" {
		t.Fatalf("CallsTo(chat.postMessage) = %d calls, want the card recorded before its answer", len(calls))
	}
	if m, ok := srv.Message("C1", calls[1].TS); !ok || m.Text != "the card" {
		t.Errorf("Message(the card) = %q, %v; want it in the channel", m.Text, ok)
	}
	// Another post, meanwhile, is answered.
	if _, _, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("another card", false)); err != nil {
		t.Fatalf("PostMessage(another) = %v", err)
	}
	select {
	case p := <-answered:
		t.Fatalf("the held post was answered before its release: %+v", p)
	default:
	}
	release()
	if p := <-answered; p.err != nil || p.ts != calls[1].TS {
		t.Errorf("the held post answered %q, %v; want ts %q", p.ts, p.err, calls[1].TS)
	}
}

// chat.delete removes a message from its thread; one already gone is
// message_not_found.
func TestDeleteMessage(t *testing.T) {
	ctx := context.Background()
	srv := slacktest.NewServer(t)
	api := newClient(srv)
	_, root, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("root", false))
	if err != nil {
		t.Fatal(err)
	}
	_, card, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionTS(root), slack.MsgOptionText("card", false))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := api.DeleteMessageContext(ctx, "C1", card); err != nil {
		t.Fatalf("DeleteMessage() = %v", err)
	}
	if got := srv.Messages("C1", root); len(got) != 0 {
		t.Errorf("Messages() after the delete = %d, want none", len(got))
	}
	if _, ok := srv.Message("C1", card); ok {
		t.Error("Message() finds the deleted message")
	}
	if _, _, err := api.DeleteMessageContext(ctx, "C1", card); slackError(err) != "message_not_found" {
		t.Errorf("DeleteMessage() again = %v, want message_not_found", err)
	}
}
