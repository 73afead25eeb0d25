package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/countersign/countersign/slacksim/slacktest"
)

// The bot removed from a conversation's channel (/remove, a channel
// manager kicking it) or the channel archived, while the conversation
// goes on: Slack refuses what the bot posts there, and sends it
// channel_left (channel_archive, group_left).

// onlyBob is a policy whose calls wait for U0BOB alone.
const onlyBob = "tools:\n  http_request: {approval: required, approvers: [" + approver + "], self_approval: false}\n"

// removedLine is the line the bot logs when it can no longer post in a
// conversation's channel.
const removedLine = "the bot can no longer post in the conversation's channel"

// dms returns the direct messages the bot posted to user.
func (h *harness) dms(user string) []slacktest.Call {
	var out []slacktest.Call
	for _, c := range h.slack.CallsTo("chat.postMessage") {
		if c.OK() && c.Channel == slacktest.DMChannel(user) {
			out = append(out, c)
		}
	}
	return out
}

// dm waits for a direct message to user containing want and returns it.
func (h *harness) dm(user, want string) slacktest.Call {
	h.t.Helper()
	var found slacktest.Call
	h.eventually(func() bool {
		for _, c := range h.dms(user) {
			if strings.Contains(c.Text, want) {
				found = c
				return true
			}
		}
		return false
	}, "a direct message to %s containing %q (got %d)", user, want, len(h.dms(user)))
	return found
}

// left sends the event Slack sends the bot once it is removed from
// channel, signed as Slack signs it.
func (h *harness) left(kind, channel string) {
	h.t.Helper()
	resp := h.event("", map[string]any{"type": kind, "channel": channel, "actor_id": carol, "event_ts": "1700000000.000001"})
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		h.t.Fatalf("%s event answered %d", kind, resp.StatusCode)
	}
}

// lines counts the bot's log lines containing s.
func (h *harness) lines(s string) int { return strings.Count(h.logs.String(), s) }

// The bot is removed while a call waits for approval: the approver still
// has it in the Home tab and decides it there; the call runs once; what
// can no longer be posted in the thread — the card's update, the
// outcome, the answer — reaches the requester once by direct message,
// escaped; the log says so once, and nothing is retried.
func TestRemovedWhileACallWaits(t *testing.T) {
	t.Parallel()
	h := newHarness(t, onlyBob)
	root, card := h.deployFlow("Deployed *v2* to <!here> & <https://evil.example|the docs>.")
	value := buttonValue(t, card, "approve")
	h.openHome(approver)
	h.home(approver, "to list the call", func(v homeView) bool { return len(v.approve) == 1 })

	h.slack.RemoveBot(root.Channel)
	h.left("channel_left", root.Channel)
	h.homeClick(approver, "approve", value)

	answer := h.dm(requester, "Deployed")
	for _, want := range []string{"<#" + root.Channel + ">", "&lt;!here&gt;", "&amp;"} {
		if !strings.Contains(answer.Text, want) {
			t.Errorf("the answer's direct message does not show %q: %q", want, answer.Text)
		}
	}
	if strings.Contains(answer.Text, "<!here>") || strings.Contains(answer.Text, "<https://evil.example") {
		t.Errorf("the answer's direct message carries live markup: %q", answer.Text)
	}
	h.dm(requester, "http_request")
	h.home(approver, "to list nothing", func(v homeView) bool { return len(v.approve) == 0 })
	if n := h.target.Count("POST /deploy"); n != 1 {
		t.Errorf("the call ran %d times, want 1", n)
	}
	if n := h.lines(removedLine); n != 1 {
		t.Errorf("the log says %d times that the bot can no longer post there, want once", n)
	}
	if n := h.lines(`"msg":"reporting"`); n != 0 {
		t.Errorf("the runner logged %d failures to show events (they are retried): %s", n, h.logs.String())
	}
}
