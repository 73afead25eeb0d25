package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/countersign/countersign/llm/llmtest"
)

// TestKilledWhilePostingTheRoot: the replica that took "/agent deploy"
// dies after Slack posted the root message and before the bot recorded
// it. The request was acknowledged, so another process carries it on —
// and finds the root message by the request id in its metadata instead
// of posting a second one. The conversation runs in that thread, once.
func TestKilledWhilePostingTheRoot(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	h.model.Then(llmtest.Reply("Deploying.", call("c1", "POST", h.target.URL+"/deploy", "v2")), llmtest.Reply("Deployed."))
	arrived, release := h.slack.HoldNext("chat.postMessage", 0)
	if resp := h.command("deploy", nil, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("the command was answered %d", resp.StatusCode)
	}
	select {
	case <-arrived:
	case <-time.After(20 * time.Second):
		t.Fatal("the bot never posted the root message")
	}
	h.kill()
	release() // Slack posts it; the bot that asked is gone
	h.start()
	root := h.root(1)
	card := h.cards(root, 1)[0]
	h.click(card, "approve", approver)
	h.reply(root, "Deployed.")
	roots := len(h.roots())
	if roots != 1 || h.target.Count("POST /deploy") != 1 {
		t.Errorf("%d root messages and %d deploys, want one of each", roots, h.target.Count("POST /deploy"))
	}
}
