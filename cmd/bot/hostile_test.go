package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/countersign/countersign/llm/llmtest"
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
	if n := h.target.count("GET /elsewhere"); n != 0 {
		t.Errorf("the redirect to another host was followed %d times", n)
	}
	last := h.model.Requests()[len(h.model.Requests())-1]
	result := last.Messages[len(last.Messages)-1].Text()
	if !strings.HasPrefix(result, "HTTP 302") || !strings.Contains(result, "Location: "+h.target.URL+"/elsewhere") {
		t.Errorf("the model was told %q; want the 302 and its Location", result)
	}
}
