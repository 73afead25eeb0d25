package handlers_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/handlers"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
)

// A bot with no store yet (its Redis does not answer at start) answers
// Slack as during an outage, and verifies every request first.
func TestUnavailableAnswersAsDuringAnOutage(t *testing.T) {
	t.Parallel()
	fake := slacktest.NewServer(t)
	srv := handlers.New(slack.New("xoxb-test", slack.OptionAPIURL(fake.URL())), nil, nil, "secret", handlers.Options{})
	web := httptest.NewServer(srv.Unavailable())
	t.Cleanup(web.Close)
	signer := slacktest.NewSigner("secret")
	post := func(path, contentType string, body []byte, signed bool) (int, string) {
		t.Helper()
		req := signer.Request(http.MethodPost, web.URL+path, contentType, body, time.Now())
		if !signed {
			req.Header.Del("X-Slack-Signature")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if err := srv.Shutdown(t.Context()); err != nil { // the answers being posted
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	const form = "application/x-www-form-urlencoded"
	command := func(text string) []byte {
		return slacktest.SlashCommand(url.Values{"text": {text}, "user_id": {"U0ALICE"}})
	}

	if code, body := post("/slack/commands", form, command("help"), true); code != 200 || !strings.Contains(body, "Countersign") {
		t.Errorf("/agent help = %d %s; want the usage", code, body)
	}
	if code, body := post("/slack/commands", form, command("deploy"), true); code != 200 || !strings.Contains(body, slackui.TextTryAgain) {
		t.Errorf("/agent deploy = %d %s; want the ephemeral try-again", code, body)
	}
	challenge, _ := json.Marshal(map[string]string{"type": "url_verification", "challenge": "c-123"})
	if code, body := post("/slack/events", "application/json", challenge, true); code != 200 || !strings.Contains(body, "c-123") {
		t.Errorf("url_verification = %d %s; want the challenge", code, body)
	}
	mention := slacktest.EventCallback("Ev1", map[string]any{"type": "app_mention", "channel": slacktest.ChannelID, "user": "U0ALICE",
		"text": "<@" + slacktest.BotUserID + "> deploy", "ts": "1700000002.000001"})
	if code, _ := post("/slack/events", "application/json", mention, true); code/100 == 2 {
		t.Errorf("a mention = %d; want it unacknowledged, so that Slack delivers it again", code)
	}
	edit := slacktest.ViewSubmission(slacktest.Submission{User: "U0BOB", CallbackID: slackui.CallbackEdit, PrivateMetadata: "x"})
	if code, body := post("/slack/interactions", form, edit, true); code != 200 || !strings.Contains(body, `"response_action":"errors"`) ||
		!strings.Contains(body, slackui.BlockArgs) || !strings.Contains(body, "try again") {
		t.Errorf("an edit form = %d %s; want it kept open with the try-again on its arguments", code, body)
	}
	click := slacktest.BlockActions(slacktest.Click{User: "U0MALLORY", Channel: slacktest.ChannelID, MessageTS: "1700000000.000200",
		ActionID: slackui.ActionApprove, Value: "x"})
	if code, _ := post("/slack/interactions", form, click, false); code != http.StatusUnauthorized || len(fake.Calls()) != 0 {
		t.Errorf("an unsigned click = %d and %d Slack calls; want 401 and none", code, len(fake.Calls()))
	}
	click = slacktest.BlockActions(slacktest.Click{User: "U0BOB", Channel: slacktest.ChannelID, MessageTS: "1700000000.000200",
		ActionID: slackui.ActionApprove, Value: "x"})
	if code, _ := post("/slack/interactions", form, click, true); code != 200 {
		t.Errorf("a click = %d, want 200", code)
	}
	if got := fake.CallsTo("chat.postEphemeral"); len(got) != 1 || got[0].User != "U0BOB" || got[0].Text != slackui.TextTryAgain {
		t.Errorf("answers to the click: %+v; want one try-again to U0BOB", got)
	}
}
