package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
)

// hasConnection reports whether bot mcp connections lists user's
// connection to tickets.
func (h *harness) hasConnection(t *testing.T, user string) bool {
	t.Helper()
	return strings.Contains(h.cli(t, "", "mcp", "connections", "--json"), `"server":"tickets","user":"`+user+`"`)
}

// publishes counts the Home views published for user.
func (h *harness) publishes(user string) int {
	n := 0
	for _, c := range h.slack.CallsTo("views.publish") {
		if c.User == user {
			n++
		}
	}
	return n
}

// TestHomeTabConnections: the Home tab lists the servers that run calls
// with the person's own account. Connect there gives them the sign-in
// page in a modal, and once the browser is back at the callback the tab
// shows the connection, which a call then uses without asking. Someone
// else clicking Revoke — with their own value or a forged one naming the
// requester — revokes nothing of the requester's; the requester's own
// Revoke does, and their tab is published again without it.
func TestHomeTabConnections(t *testing.T) {
	t.Parallel()
	h, srv := oauthHarness(t, "    approval: never\n")
	h.openHome(requester)
	h.home(requester, "to list tickets, not connected", func(v homeView) bool {
		return strings.Contains(v.text, "Your connections") && strings.Contains(v.text, "*tickets*\nNot connected")
	})

	// Connect from the Home tab: a modal, then the sign-in page in it.
	h.homeClick(requester, slackui.ActionMCPHomeConnect, "tickets")
	if opened := h.slack.WaitFor(t, "views.open", 1, 10*time.Second); !strings.Contains(string(opened[0].Blocks), "sign-in page") {
		t.Errorf("the Connect modal = %s", opened[0].Blocks)
	}
	var authURL string
	h.eventually(func() bool {
		for _, c := range h.slack.CallsTo("views.update") {
			if hasAction(c, slackui.ActionMCPConnect) {
				authURL = buttonURL(t, c, slackui.ActionMCPConnect)
				return true
			}
		}
		return false
	}, "the Connect modal to show the sign-in page")
	if status, page := h.browse(authURL, requester); status != http.StatusOK || !strings.Contains(page, "Connected to tickets") {
		t.Fatalf("callback = %d %q, want the connection made", status, page)
	}
	h.home(requester, "to show the connection", func(v homeView) bool {
		return strings.Contains(v.text, "Connected to tickets") && strings.Contains(v.text, "✅ Connected since")
	})
	if !h.hasConnection(t, requester) {
		t.Fatal("bot mcp connections does not list the connection made from the Home tab")
	}
	// A call then runs as the requester without asking.
	h.model.Then(
		llmtest.Reply("Checking.", llmtest.Call("c1", "tickets__whoami", `{}`)),
		llmtest.Reply("That is you."),
	)
	h.command("who am I on tickets?", nil, nil)
	h.reply(h.root(1), "That is you.")
	if n := srv.Calls(requester); n != 1 || len(h.slack.CallsTo("chat.postEphemeral")) != 0 {
		t.Errorf("whoami ran %d times as %s, with %d prompts; want once, without asking", n, requester, len(h.slack.CallsTo("chat.postEphemeral")))
	}

	// Someone else's tab does not show the requester's connection, and
	// their Revoke, whatever its value says, revokes nothing of it.
	h.openHome(approver)
	h.home(approver, "to list tickets, not connected", func(v homeView) bool {
		return strings.Contains(v.text, "*tickets*\nNot connected")
	})
	for _, forged := range []struct{ value, notice string }{
		{"tickets", "You had no connection to tickets."},
		{"tickets:" + requester, "nothing was revoked"},
		{`{"server":"tickets","user":"` + requester + `"}`, "nothing was revoked"},
		{requester + "/tickets", "nothing was revoked"},
	} {
		before := h.publishes(approver)
		h.homeClick(approver, slackui.ActionMCPRevoke, forged.value)
		h.home(approver, "to be published again, saying "+forged.notice, func(v homeView) bool {
			return h.publishes(approver) > before && strings.Contains(v.text, forged.notice)
		})
		if !h.hasConnection(t, requester) {
			t.Fatalf("%s's Revoke with value %q revoked %s's connection", approver, forged.value, requester)
		}
	}
	// Revoke from a message rather than the Home tab is no such button.
	body := slacktest.BlockActions(slacktest.Click{User: approver, Channel: slacktest.ChannelID, MessageTS: "1700000000.000100", ActionID: slackui.ActionMCPRevoke, Value: "tickets"})
	h.send("/slack/interactions", "application/x-www-form-urlencoded", body, nil).Body.Close()
	if !h.hasConnection(t, requester) {
		t.Fatal("a Revoke outside the Home tab revoked the connection")
	}

	// The requester's own Revoke: gone, and the tab says so.
	h.homeClick(requester, slackui.ActionMCPRevoke, "tickets")
	h.home(requester, "to show the connection revoked", func(v homeView) bool {
		return strings.Contains(v.text, "Revoked your connection to tickets") && strings.Contains(v.text, "*tickets*\nNot connected")
	})
	if h.hasConnection(t, requester) {
		t.Error("the connection is still listed after its Revoke")
	}
}
