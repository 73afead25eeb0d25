package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slacksim/slacktest"
)

// redeploy stops the bot and starts it again with another policy file, as
// a deploy of a new version would.
func (h *harness) redeploy(policy string) {
	h.t.Helper()
	h.stop()
	path := filepath.Join(h.t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(policy), 0o600); err != nil {
		h.t.Fatal(err)
	}
	h.env = append(h.env, "BOT_POLICY="+path) // the last value wins
	h.start()
}

// changedCard waits for the card of a run the updated bot cannot resume.
func (h *harness) changedCard(root slacktest.Call) slacktest.Call {
	h.t.Helper()
	var found slacktest.Call
	h.eventually(func() bool {
		for _, c := range h.slack.Messages(root.Channel, root.TS) {
			if hasAction(c, "restart_run") && hasAction(c, "cancel_run") {
				found = c
				return true
			}
		}
		return false
	}, "a card with Restart from here and Cancel")
	return found
}

// Three threads wait for approval of http_request. A first deploy keeps
// the tool (only its policy changes): the paused thread resumes. A second
// deploy drops the tool: approving runs nothing and the thread gets a card
// saying what changed; Restart from here lets the model plan again,
// Cancel ends the request. The call never runs.
func TestDeployOverPausedThreads(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	h.model.Then(
		llmtest.Reply("Deploying A.", call("a", "POST", h.target.URL+"/deploy", "a")),
		llmtest.Reply("Deploying B.", call("b", "POST", h.target.URL+"/deploy", "b")),
		llmtest.Reply("Deploying C.", call("c", "POST", h.target.URL+"/deploy", "c")),
	)
	var roots, cards []slacktest.Call
	for i, text := range []string{"deploy a", "deploy b", "deploy c"} {
		h.command(text, nil, nil)
		roots = append(roots, h.root(i+1))
		cards = append(cards, h.cards(roots[i], 1)[0])
	}

	// A compatible deploy: the tool is the same, its rule changes.
	h.redeploy("tools:\n  http_request: {approval: required, expires_after: 48h}\n")
	h.model.Then(llmtest.Reply("C is out."))
	h.click(cards[2], "approve", approver)
	h.reply(roots[2], "C is out.")
	if got := h.target.Bodies("POST /deploy"); len(got) != 1 || got[0] != "c" {
		t.Fatalf("deploy bodies after the compatible deploy = %q, want [c]", got)
	}

	// An incompatible deploy: http_request is no longer offered.
	h.redeploy("tools:\n")
	h.click(cards[0], "approve", approver)
	changed := h.changedCard(roots[0])
	if text := h.card(changed); !strings.Contains(text, "the tool http_request is no longer available") {
		t.Errorf("card = %s, want it to say the tool is gone", text)
	}
	if c := h.card(cards[0]); strings.Contains(c, "Approved by") {
		t.Errorf("approval card = %s, want it not to claim an approval that was not applied", c)
	}
	h.model.Then(llmtest.Reply("I can no longer deploy from here."))
	h.click(changed, "restart_run", approver)
	h.reply(roots[0], "I can no longer deploy from here.")
	// A second click on the card changes nothing.
	h.click(changed, "restart_run", approver)
	h.ephemeral(approver, "restarted or cancelled already")

	h.click(cards[1], "approve", approver)
	h.click(h.changedCard(roots[1]), "cancel_run", approver)
	h.reply(roots[1], "Cancelled by <@"+approver+">") // the bot's own line, with a live mention

	if got := h.target.Bodies("POST /deploy"); len(got) != 1 {
		t.Errorf("deploy bodies = %q, want only c's", got)
	}
}
