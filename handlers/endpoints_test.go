package handlers_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
)

// Fast tests of the three Slack endpoints, in process: signed requests
// through httptest against the real handlers, runner and Redis.

func (g *gate) post(t *testing.T, path, contentType string, body []byte) (int, string) {
	t.Helper()
	req := g.signer.Request(http.MethodPost, g.http.URL+path, contentType, body, time.Now())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if err := g.srv.Shutdown(t.Context()); err != nil { // the work the request left behind
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestCommandsEndpoint(t *testing.T) {
	t.Parallel()
	g := newGate(t)
	form := func(text string) []byte {
		return slacktest.SlashCommand(url.Values{"text": {text}, "user_id": {gateRequester}})
	}
	if code, body := g.post(t, "/slack/commands", "application/x-www-form-urlencoded", form("help")); code != 200 || !strings.Contains(body, `"response_type":"ephemeral"`) {
		t.Errorf("/agent help = %d %s; want the usage, ephemeral", code, body)
	}
	if code, _ := g.post(t, "/slack/commands", "application/x-www-form-urlencoded", []byte("%zz")); code != http.StatusBadRequest {
		t.Errorf("a malformed form = %d, want 400", code)
	}
	cmd := form("deploy it")
	for range 2 { // Slack's retry of the same trigger_id is one request
		if code, body := g.post(t, "/slack/commands", "application/x-www-form-urlencoded", cmd); code != 200 || body != "" {
			t.Errorf("/agent deploy it = %d %q; want an empty 200", code, body)
		}
	}
	var roots []string
	for _, c := range g.slack.CallsTo("chat.postMessage") {
		if c.ThreadTS == "" {
			roots = append(roots, c.Text)
		}
	}
	if len(roots) != 1 || roots[0] != "<@"+gateRequester+"> asked: deploy it" {
		t.Errorf("root messages = %q; want one", roots)
	}
	if cards := len(g.slack.CallsTo("chat.postMessage")) - 1; cards != 1 {
		t.Errorf("%d cards posted, want 1", cards)
	}
}

func TestEventsEndpoint(t *testing.T) {
	t.Parallel()
	g := newGate(t)
	challenge, _ := json.Marshal(map[string]string{"type": "url_verification", "challenge": "c-123"})
	if code, body := g.post(t, "/slack/events", "application/json", challenge); code != 200 || !strings.Contains(body, "c-123") {
		t.Errorf("url_verification = %d %s", code, body)
	}
	if code, _ := g.post(t, "/slack/events", "application/json", []byte("{")); code != http.StatusBadRequest {
		t.Errorf("malformed JSON = %d, want 400", code)
	}
	own := slacktest.EventCallback("", map[string]any{"type": "message", "channel": slacktest.ChannelID, "user": slacktest.BotUserID,
		"bot_id": slacktest.BotID, "text": "Deploying.", "ts": "1700000001.000001", "thread_ts": "1700000000.000001"})
	if code, _ := g.post(t, "/slack/events", "application/json", own); code != 200 || len(g.slack.Calls()) != 0 {
		t.Errorf("the bot's own message = %d and %d Slack calls; want 200 and none", code, len(g.slack.Calls()))
	}
	mention := slacktest.EventCallback("Ev1", map[string]any{"type": "app_mention", "channel": slacktest.ChannelID, "user": gateRequester,
		"text": "<@" + slacktest.BotUserID + "> deploy", "ts": "1700000002.000001"})
	for range 2 { // a repeated event_id is one request
		if code, _ := g.post(t, "/slack/events", "application/json", mention); code != 200 {
			t.Errorf("app_mention = %d", code)
		}
	}
	if msgs := g.slack.Messages(slacktest.ChannelID, "1700000002.000001"); len(msgs) != 1 {
		t.Errorf("the mention's thread has %d messages, want one card", len(msgs))
	}
	// The requester replies in the thread while the call waits: feedback
	// that rejects it.
	reply := slacktest.EventCallback("", map[string]any{"type": "message", "channel": slacktest.ChannelID, "user": gateRequester,
		"text": "never mind", "ts": "1700000003.000001", "thread_ts": "1700000002.000001"})
	if code, _ := g.post(t, "/slack/events", "application/json", reply); code != 200 {
		t.Errorf("reply = %d", code)
	}
	thread := slackui.ThreadKey(slacktest.TeamID, slacktest.ChannelID, "1700000002.000001")
	res, err := g.svc.State(t.Context(), thread)
	if err != nil || res.Status().String() != "done" || !strings.Contains(res.State.Answer(), "never mind") {
		t.Errorf("after the reply: %v %v; want done, the call rejected with the reply", res, err)
	}
}

func TestInteractionsEndpoint(t *testing.T) {
	t.Parallel()
	g := newGate(t)
	if code, _ := g.post(t, "/slack/interactions", "application/x-www-form-urlencoded", []byte("payload=%7B")); code != http.StatusBadRequest {
		t.Errorf("malformed payload = %d, want 400", code)
	}
	_, value := g.pending(t)
	unknown := slacktest.BlockActions(slacktest.Click{User: gateApprover, ActionID: slackui.ActionApprove, Value: "0123456789abcdef01234567"})
	if code, _ := g.post(t, "/slack/interactions", "application/x-www-form-urlencoded", unknown); code != 200 {
		t.Errorf("a click on an unknown card = %d, want 200", code)
	}
	click := slacktest.BlockActions(slacktest.Click{User: gateApprover, ActionID: slackui.ActionApprove, Value: value})
	if code, body := g.post(t, "/slack/interactions", "application/x-www-form-urlencoded", click); code != 200 || body != "" {
		t.Errorf("approve = %d %q", code, body)
	}
	if runs := g.tool.Runs(); len(runs) != 1 {
		t.Errorf("the tool ran %d times, want 1", len(runs))
	}
	ephemerals := g.slack.CallsTo("chat.postEphemeral")
	if len(ephemerals) != 1 || !strings.Contains(ephemerals[0].Text, "no longer pending") {
		t.Errorf("ephemeral answers = %v; want one saying the unknown card is no longer pending", ephemerals)
	}
}
