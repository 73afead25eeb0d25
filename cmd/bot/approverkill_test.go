package main

import (
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/llm/llmtest"
)

// TestKilledBetweenClaimAndTool: the approver's click is claimed with the
// save that marks the call running, and the replica is killed (SIGKILL)
// before it sends the call — here while Slack is slow to show the
// decision on the card. The next process recovers the run: the call may
// not be sent again by itself (its outcome is unknown to the bot), so it
// asks a person on a card of its own; the original card says who
// approved and offers no buttons (they would answer "no longer
// pending"); a Retry runs the call, once.
func TestKilledBetweenClaimAndTool(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	h.model.Then(llmtest.Reply("Deploying.", call("c1", "POST", h.target.URL+"/deploy", "v2")), llmtest.Reply("Deployed."))
	h.command("deploy", nil, nil)
	root := h.root(1)
	card := h.cards(root, 1)[0]
	// The card's update that shows the decision comes after the save
	// and before the call is sent: Slack refuses it for a minute, and
	// the replica dies waiting.
	updates := len(h.slack.CallsTo("chat.update"))
	h.slack.RateLimitNext("chat.update", 1, time.Minute)
	h.click(card, "approve", approver)
	h.eventually(func() bool { return len(h.slack.CallsTo("chat.update")) > updates }, "the card's update")
	h.kill()
	h.start()
	retry := h.cardWith(root, "retry", time.Minute)
	if n := h.target.Count("POST /deploy"); n != 0 {
		t.Fatalf("deploy ran %d times before anyone retried it", n)
	}
	got := h.card(card)
	if strings.Contains(got, `"action_id"`) || !strings.Contains(got, "Approved by <@"+approver+">") {
		t.Errorf("the original card after the crash = %s; want 'Approved by <@%s>' and no buttons", got, approver)
	}
	h.click(retry, "retry", approver)
	h.reply(root, "Deployed.")
	if n := h.target.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want once", n)
	}
}
