package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
)

// hostileText is what a fetched page can plant for the model to repeat.
const hostileText = "<!here> <!channel> ping <@U123> <https://evil.example|https://good.example>"

// liveMarkup lists the markup in s that Slack would turn into a mention or
// a link.
func liveMarkup(s string) []string {
	var found []string
	for _, m := range []string{"<!here", "<!channel", "<@U123", "<https://evil"} {
		if strings.Contains(s, m) {
			found = append(found, m)
		}
	}
	return found
}

// Text of a fetched page and of the model's answer is posted escaped:
// none of its mentions or links is live, while the bot's own mentions of
// the requester and the approver still are.
func TestHostileTextIsPostedEscaped(t *testing.T) {
	t.Parallel()
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, hostileText+"\n```")
	}))
	t.Cleanup(page.Close)
	h := newHarness(t, "")
	h.model.Then(
		llmtest.Reply("Fetching. "+hostileText, call("c1", "GET", page.URL+"/news", "")),
		llmtest.Reply("The page says: "+hostileText+" ```unclosed"),
	)
	h.command("read the news", nil, nil)
	root := h.root(1)
	if !strings.HasPrefix(root.Text, "<@"+requester+"> asked:") {
		t.Errorf("root message = %q; want a live mention of the requester", root.Text)
	}
	card := h.cards(root, 1)[0]
	h.click(card, "approve", approver)
	answer := h.reply(root, "The page says:")
	result := h.reply(root, "result:")
	for _, m := range h.slack.Messages(root.Channel, root.TS) {
		if l := liveMarkup(m.Text + string(m.Blocks)); l != nil {
			t.Errorf("message %q has live markup %q", m.Text, l)
		}
	}
	if !strings.Contains(answer.Text, "&lt;!here&gt;") || strings.Count(answer.Text, "```")%2 != 0 {
		t.Errorf("answer = %q; want the text escaped and its code fence closed", answer.Text)
	}
	if !strings.Contains(result.Text, "&lt;@U123&gt;") || strings.Count(result.Text, "```")%2 != 0 {
		t.Errorf("result = %q; want the page escaped in a closed code block", result.Text)
	}
	if got := h.card(card); !strings.Contains(got, "Approved by <@"+approver+">") {
		t.Errorf("card = %s; want a live mention of the approver", got)
	}
}

// Without a policy, a redirect to another host is not followed: the
// model gets the 3xx and its Location, and the other host is not called.
func TestRedirectToAnotherHostIsReturnedToTheModel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, h.target.URL+"/elsewhere", http.StatusFound)
	}))
	t.Cleanup(origin.Close)
	h.model.Then(
		llmtest.Reply("Fetching.", call("c1", "GET", origin.URL+"/start", "")),
		llmtest.Reply("It redirects elsewhere."),
	)
	h.command("fetch the start page", nil, nil)
	root := h.root(1)
	h.click(h.cards(root, 1)[0], "approve", approver)
	h.reply(root, "It redirects elsewhere.")
	if n := h.target.Count("GET /elsewhere"); n != 0 {
		t.Errorf("the redirect to another host was followed %d times", n)
	}
	last := h.model.Requests()[len(h.model.Requests())-1]
	result := last.Messages[len(last.Messages)-1].Text()
	if !strings.HasPrefix(result, "HTTP 302") || !strings.Contains(result, "Location: "+h.target.URL+"/elsewhere") {
		t.Errorf("the model was told %q; want the 302 and its Location", result)
	}
}

// A credential in a call's headers or its URL's query is masked on the card, in the audit
// stream, in the logs and in `bot checkpoints show`, while the call still
// sends the real value; a server that echoes it back does not show it in
// the thread either.
func TestCredentialsAreMaskedButSent(t *testing.T) {
	t.Parallel()
	const secret = "sk-live-0123456789abcdef"
	var mu sync.Mutex
	var got []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Authorization")+"|"+r.Header.Get("X-Api-Key")+"|"+r.URL.Query().Get("api_key"))
		mu.Unlock()
		fmt.Fprintf(w, "created; you sent Authorization: %s and X-Api-Key: %s", r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"))
	}))
	t.Cleanup(api.Close)
	h := newHarness(t, "")
	args, _ := json.Marshal(map[string]any{"method": "POST", "url": api.URL + "/items?api_key=" + secret + "&page=2",
		"headers": map[string]string{"Authorization": "Bearer " + secret, "X-Api-Key": secret, "Accept": "text/plain"}})
	h.model.Then(
		llmtest.Reply("Creating the item.", llm.ToolCall{ID: "c1", Name: "http_request", Arguments: string(args)}),
		llmtest.Reply("Created."),
	)
	h.command("create the item", nil, nil)
	root := h.root(1)
	card := h.cards(root, 1)[0]
	if c := h.card(card); strings.Contains(c, secret) || !strings.Contains(c, "Bearer ••••••") || !strings.Contains(c, "text/plain") ||
		!strings.Contains(c, "/items?api_key=••••••&amp;page=2") {
		t.Errorf("card = %s; want the credentials masked, other headers shown", c)
	}
	h.click(card, "approve", approver)
	h.reply(root, "Created.")
	mu.Lock()
	if want := "Bearer " + secret + "|" + secret + "|" + secret; len(got) != 1 || got[0] != want {
		t.Errorf("the API got credentials %q, want one call with %q", got, want)
	}
	mu.Unlock()
	if c := h.card(card); strings.Contains(c, secret) {
		t.Errorf("settled card = %s; shows the secret", c)
	}
	if result := h.reply(root, "result:"); !strings.Contains(result.Text, "you sent Authorization: •••••• and X-Api-Key: ••••••") {
		t.Errorf("result = %q; want the echoed credentials masked", result.Text)
	}
	for _, m := range h.slack.Messages(root.Channel, root.TS) {
		if strings.Contains(m.Text+string(m.Blocks), secret) {
			t.Errorf("message %q shows the secret", m.Text)
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: h.redis.Addr()})
	defer rdb.Close()
	records, err := rdb.XRange(context.Background(), "cs:audit", "-", "+").Result()
	if err != nil || len(records) == 0 {
		t.Fatalf("audit stream: %d records, %v", len(records), err)
	}
	for _, r := range records {
		if s := fmt.Sprint(r.Values); strings.Contains(s, secret) || !strings.Contains(s, "••••••") {
			t.Errorf("audit record %s; want the credentials masked", s)
		}
	}
	thread := slackui.ThreadKey(slacktest.TeamID, root.Channel, root.TS)
	for _, extra := range [][]string{nil, {"--json"}} {
		out := h.cli(t, "", append([]string{"checkpoints", "show", "--thread", thread}, extra...)...)
		if strings.Contains(out, secret) || !strings.Contains(out, "••••••") {
			t.Errorf("checkpoints show %v:\n%s\nwant the credentials masked", extra, out)
		}
	}
	if out := h.cli(t, "", "checkpoints", "list", "--thread", thread, "--json"); strings.Contains(out, secret) {
		t.Errorf("checkpoints list --json shows the secret")
	}
	if strings.Contains(h.logs.String(), secret) {
		t.Error("the logs contain the secret")
	}
}

// One model turn asking for more calls than max_calls_per_turn posts
// cards for the first ones only; the rest reach the model as errors.
func TestOneTurnPostsAtMostTheCapOfCards(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	var calls []llm.ToolCall
	for i := range 12 {
		calls = append(calls, call(fmt.Sprintf("c%d", i), "POST", fmt.Sprintf("%s/item/%d", h.target.URL, i), ""))
	}
	h.model.Then(llmtest.Reply("Twelve things.", calls...), llmtest.Reply("Nothing done."))
	h.command("do twelve things", nil, nil)
	root := h.root(1)
	h.cards(root, 10)
	// A reply in the thread rejects every pending call; the run then asks
	// the model again, which ends the turn.
	h.event("", map[string]any{"type": "message", "channel": root.Channel, "user": requester,
		"text": "stop", "ts": "1800000000.000001", "thread_ts": root.TS})
	h.reply(root, "Nothing done.")
	if n := len(h.cards(root, 10)); n != 10 {
		t.Errorf("%d approval cards, want 10", n)
	}
	last := h.model.Requests()[len(h.model.Requests())-1]
	capped := 0
	for _, m := range last.Messages {
		if m.Role == "tool" && strings.Contains(m.Text(), "at most 10 tool calls") {
			capped++
		}
	}
	if capped != 2 {
		t.Errorf("the model saw %d results about the cap, want 2", capped)
	}
	if n := h.target.Total(); n != 0 {
		t.Errorf("%d calls ran, want none", n)
	}
}

// An approved call to the bot's own address gets the bot's refusal, not
// what its endpoints say.
func TestBotRefusesItsOwnTool(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	h.model.Then(
		llmtest.Reply("Checking.", call("c1", "GET", "http://"+h.addr+"/readyz", "")),
		llmtest.Reply("Checked."),
	)
	h.command("is the bot ready?", nil, nil)
	root := h.root(1)
	h.click(h.cards(root, 1)[0], "approve", approver)
	h.reply(root, "Checked.")
	last := h.model.Requests()[len(h.model.Requests())-1]
	if result := last.Messages[len(last.Messages)-1].Text(); !strings.HasPrefix(result, "HTTP 403") || strings.Contains(result, "ready") {
		t.Errorf("the model was told %q; want the bot's refusal", result)
	}
}
