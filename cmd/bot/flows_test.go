package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/countersign/countersign/llm/llmtest"
)

func TestApproveFlow(t *testing.T) {
	h := newHarness(t, "")
	h.model.Then(
		llmtest.Reply("I'll deploy v2.", call("c1", "POST", h.target.URL+"/deploy", "v2")),
		llmtest.Reply("Deployed v2."),
	)
	if resp := h.command("deploy v2", nil, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("/agent answered %d", resp.StatusCode)
	}
	root := h.root(1)
	if root.Text != "<@"+requester+"> asked: deploy v2" {
		t.Errorf("root message = %q", root.Text)
	}
	card := h.cards(root, 1)[0]
	for _, want := range []string{"http_request", "I'll deploy v2.", "<@" + requester + ">", "/deploy"} {
		if !strings.Contains(h.card(card), want) {
			t.Errorf("card does not show %q: %s", want, h.card(card))
		}
	}
	if h.target.count("POST /deploy") != 0 {
		t.Fatal("the call ran before anyone approved it")
	}
	if resp := h.click(card, "approve", approver); resp.StatusCode != http.StatusOK {
		t.Fatalf("approve answered %d", resp.StatusCode)
	}
	h.reply(root, "Deployed v2.")
	if n := h.target.count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
	if got := h.card(card); !strings.Contains(got, "Approved by <@"+approver+">") || strings.Contains(got, `"action_id"`) {
		t.Errorf("card after approval = %s; want 'Approved by <@%s>' and no buttons", got, approver)
	}
}
