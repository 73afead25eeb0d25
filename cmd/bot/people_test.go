package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slacksim/slacktest"
)

// Who a person is, and who may act, as the bot shows and checks it: the
// conversation names people in plain words, the front end renders them;
// a tool's question goes to the author of the turn; a copy of a card and
// the "what changed" card let no one decide who could not on the card.

// slackMarkup is Slack's markup for people, groups, broadcasts and
// channels, which the model must never be given.
var slackMarkup = []string{"<@", "<!", "<#"}

// After a Reject, the model is given no Slack markup — not in the tool
// result, nor in the system prompt — and its answer, which quotes the
// result, reads as plain words in the thread; the card names the person
// with a live mention.
func TestRejectReachesTheModelWithoutMarkup(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	h.model.Then(
		llmtest.Reply("Deploying.", call("c1", "POST", h.target.URL+"/deploy", "v2")),
		llmtest.Reply("Not deployed: Rejected by user "+approver+": not today"),
	)
	h.command("deploy", nil, nil)
	root := h.root(1)
	card := h.cards(root, 1)[0]
	h.click(card, "reject", approver)
	view := decodeView(t, h.slack.WaitFor(t, "views.open", 1, 10*time.Second)[0])
	resp := h.submit(slacktest.Submission{User: approver, CallbackID: view.CallbackID, PrivateMetadata: view.PrivateMetadata,
		Values: map[string]map[string]string{"reason": {"reason_input": "not today"}}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("reject submission answered %d", resp.StatusCode)
	}
	h.reply(root, "Not deployed")

	if got, want := lastToolResult(t, h), "Rejected by user "+approver+": not today"; got != want {
		t.Errorf("the model was told %q, want %q", got, want)
	}
	for i, req := range h.model.Requests() {
		for _, m := range req.Messages {
			for _, markup := range slackMarkup {
				if strings.Contains(m.Text(), markup) {
					t.Errorf("request %d: the %s message holds Slack markup %q: %q", i, m.Role, markup, m.Text())
				}
			}
		}
	}
	if got := h.card(card); !strings.Contains(got, "Rejected by <@"+approver+">") {
		t.Errorf("the card does not name the approver with a mention: %s", got)
	}
	for _, m := range h.slack.Messages(root.Channel, root.TS) {
		if strings.Contains(m.Text, "&lt;@") || strings.Contains(m.Text, "<@"+approver+">:") {
			t.Errorf("the thread shows a mention as markup: %q", m.Text)
		}
	}
}

// In a thread where Carol started a later turn, the MCP server's request
// for input goes to her: the first requester cannot answer it, she can,
// and the system prompt of her turn names her.
func TestElicitationAsksTheAuthorOfTheTurn(t *testing.T) {
	t.Parallel()
	h := newHarness(t, everythingPolicy(t, "  everything__trigger-elicitation-request: {approval: never}\n"))
	h.model.Then(
		llmtest.Reply("Hello."),
		llmtest.Reply("I need your details.", llmtest.Call("c1", "everything__trigger-elicitation-request", `{}`)),
		llmtest.Reply("Thanks, Ada."),
	)
	h.command("hi", nil, nil)
	root := h.root(1)
	h.reply(root, "Hello.")
	h.event("", map[string]any{"type": "message", "channel": root.Channel, "user": carol, "text": "sign me up",
		"ts": "1700000100.000100", "thread_ts": root.TS})
	question := h.reply(root, "asks")
	if shown := h.card(question); !strings.Contains(shown, "<@"+carol+">") || strings.Contains(shown, "<@"+requester+">") {
		t.Errorf("the request does not ask Carol, who asked for the turn: %s", shown)
	}
	reqs := h.model.Requests()
	if system := reqs[len(reqs)-1].Messages[0]; system.Role != "system" || !strings.Contains(system.Text(), "user "+carol) {
		t.Errorf("the system prompt of Carol's turn = %q, want it to name her", system.Text())
	}

	for _, action := range []string{"elicit_answer", "elicit_decline", "elicit_cancel"} {
		h.click(question, action, requester)
	}
	h.ephemeral(requester, "Only <@"+carol+">")
	if n := len(h.slack.CallsTo("views.open")); n != 0 {
		t.Fatalf("the first requester's click opened %d forms", n)
	}
	if shown := h.card(question); strings.Contains(shown, "Declined") || strings.Contains(shown, "Cancelled") {
		t.Fatalf("the first requester settled Carol's request: %s", shown)
	}

	h.click(question, "elicit_answer", carol)
	view := decodeView(t, h.slack.WaitFor(t, "views.open", 1, 10*time.Second)[0])
	resp := h.submit(slacktest.Submission{User: carol, CallbackID: view.CallbackID, PrivateMetadata: view.PrivateMetadata,
		Values: map[string]map[string]string{"field:name": {"value": "Ada Lovelace"}}})
	if body := readAll(t, resp); resp.StatusCode != http.StatusOK || body != "" {
		t.Fatalf("submitting the form answered %d %q", resp.StatusCode, body)
	}
	h.reply(root, "Thanks, Ada.")
	if got := lastToolResult(t, h); !strings.Contains(got, "Name: Ada Lovelace") {
		t.Errorf("the model was told %q; want Carol's answer", got)
	}
	h.eventually(func() bool { return strings.Contains(h.card(question), "Answered by <@"+carol+">") }, "the request to say Carol answered")
}

// A call anyone in its channel may decide: a member of the notify channel
// who is not in the call's channel cannot approve it from the copy; a
// member of the call's channel can.
func TestCopyIsJudgedAsTheCard(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
tools:
  http_request:
    notify: C0NOTIFY
`)
	h.slack.SetChannelMembers(slacktest.ChannelID, requester, approver)
	h.slack.SetChannelMembers(notifyCh, approver, dave)
	root, _ := h.deployFlow("Deployed.")
	cp := h.copyIn(notifyCh)

	// Slack fails to say who is in the channel (to the check against the
	// state in memory and to the one against Redis): that is no answer.
	h.slack.FailNext("conversations.members", "internal_error", 2)
	h.clickAt(h.addr, cp, "", "approve", dave)
	h.ephemeral(dave, "please try again")
	if n := h.target.Count("POST /deploy"); n != 0 {
		t.Fatalf("deploy ran %d times when membership could not be checked", n)
	}
	h.slack.FailNext("conversations.members", "", 0) // Slack answers again

	h.clickAt(h.addr, cp, "", "approve", dave)
	h.ephemeral(dave, "only members of <#"+slacktest.ChannelID+"> may decide this call")
	if n := h.target.Count("POST /deploy"); n != 0 {
		t.Fatalf("deploy ran %d times on a click from outside the call's channel", n)
	}
	if got := h.card(cp); strings.Contains(got, "Approved by") {
		t.Fatalf("the copy after Dave's click: %s", got)
	}

	h.clickAt(h.addr, cp, "", "approve", approver)
	h.reply(root, "Deployed.")
	if n := h.target.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
}

// The update removed the waiting call's tool. Someone its rule did not
// let approve cannot cancel the run from the "what changed" card; the
// person who asked can, and the thread says so with a live mention.
func TestWhatChangedCardIsForThoseWhoMayDecide(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
tools:
  http_request:
    approvers: [U0BOB]
`)
	root, card := h.deployFlow("Deployed.")
	h.redeploy("tools:\n")
	h.click(card, "approve", approver)
	changed := h.changedCard(root)

	for _, action := range []string{"cancel_run", "restart_run"} {
		h.click(changed, action, mallory)
	}
	h.ephemeral(mallory, "You can't do this: only the person who asked")
	h.eventually(func() bool {
		n := 0
		for _, c := range h.slack.CallsTo("chat.postEphemeral") {
			if c.User == mallory {
				n++
			}
		}
		return n == 2
	}, "both of Mallory's clicks refused")
	for _, m := range h.slack.Messages(root.Channel, root.TS) {
		if strings.Contains(m.Text, "Cancelled by") {
			t.Fatalf("Mallory cancelled the run: %q", m.Text)
		}
	}
	if n := len(h.model.Requests()); n != 1 {
		t.Fatalf("the model was asked %d times, want once: Mallory restarted the run", n)
	}

	h.click(changed, "cancel_run", requester)
	line := h.reply(root, "Cancelled by")
	if !strings.Contains(line.Text, "Cancelled by <@"+requester+">") || strings.Contains(line.Text, "&lt;") {
		t.Errorf("the thread says %q, want it to name the requester with a mention", line.Text)
	}
	if n := h.target.Count("POST /deploy"); n != 0 {
		t.Errorf("deploy ran %d times", n)
	}
}
