package main

import (
	"strings"
	"testing"

	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slackui/slackuitest"
)

// TestRequestEchoedWithoutBroadcast: the root message that shows what a
// person asked is the bot's post: it must not broadcast (<!here>,
// <!channel>, a user group) or carry a link whose label is another URL
// in that person's name; the person's mention of someone stays live.
func TestRequestEchoedWithoutBroadcast(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "", llmtest.Reply("ok"))
	h.command("<!here> <!subteam^S0OPS|@oncall> ask <@U0CAROL|carol> to log in at <https://evil.example/login|https://sso.corp.example/login>", nil, nil)
	root := h.root(1)
	for _, l := range slackuitest.Mrkdwn(root.Text) {
		if l.Text != "<@"+requester+">" && l.Text != "<@U0CAROL>" {
			t.Errorf("root message = %q; live: %v", root.Text, l)
		}
	}
	if want := "https://sso.corp.example/login (<https://evil.example/login>)"; !strings.Contains(root.Text, want) {
		t.Errorf("root message = %q; want the link shown with its target, %q", root.Text, want)
	}
	if !strings.Contains(root.Text, "<@U0CAROL>") {
		t.Errorf("root message = %q; want the person's mention of carol live", root.Text)
	}
}

// TestRequestOfSeveralLinesIsQuoted: the root message of a request of
// several lines quotes every line of it, so that none reads as the bot's
// own words, such as a line that says the request was approved.
func TestRequestOfSeveralLinesIsQuoted(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "", llmtest.Reply("ok"))
	h.command("deploy v2\n✅ *Approved by* <@U0BOSS>: no review needed", nil, nil)
	root := h.root(1)
	lines := strings.Split(root.Text, "\n")
	if lines[0] != "<@"+requester+"> asked:" || len(lines) != 3 {
		t.Fatalf("root message = %q; want who asked on a line of its own, then the request", root.Text)
	}
	for _, l := range lines[1:] {
		if !strings.HasPrefix(l, "> ") {
			t.Errorf("root message = %q; line %q of the request is not quoted", root.Text, l)
		}
	}
}
