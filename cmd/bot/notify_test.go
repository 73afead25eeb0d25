package main

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/slacksim/slacktest"
)

// Approvers are told beyond the thread: a copy of the card in a notify
// channel, direct messages, reminders and escalation from the schedule.

const (
	dave      = "U0DAVE"
	notifyCh  = "C0NOTIFY"
	opsGroup  = "S0OPS"
	oncallGrp = "S0ONCALL"
)

// clickAt presses a button on a message through the bot at addr, from
// channel (the message's own when "").
func (h *harness) clickAt(addr string, msg slacktest.Call, channel, actionID, user string) {
	h.t.Helper()
	if channel == "" {
		channel = msg.Channel
	}
	body := slacktest.BlockActions(slacktest.Click{User: user, Channel: channel, MessageTS: msg.TS, ThreadTS: msg.ThreadTS,
		ActionID: actionID, Value: buttonValue(h.t, msg, actionID)})
	req := h.signer.Request(http.MethodPost, "http://"+addr+"/slack/interactions", "application/x-www-form-urlencoded", body, time.Now())
	resp, err := botClient.Do(req)
	if err != nil {
		h.t.Fatalf("click at %s: %v", addr, err)
	}
	resp.Body.Close()
}

// copyIn waits for the copy of a card (a message with an Approve button)
// at the top of channel, and returns it.
//
// It also waits for the bot to record the copy, which it does right
// after posting it: a click that comes before counts for nothing, as
// from any channel the card was not posted in.
func (h *harness) copyIn(channel string) slacktest.Call {
	h.t.Helper()
	var found slacktest.Call
	h.eventually(func() bool {
		for _, c := range h.slack.Messages(channel, "") {
			if hasAction(c, "approve") {
				found = c
				return true
			}
		}
		return false
	}, "a copy of the card in %s", channel)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: h.redis.Addr()})
	defer rdb.Close()
	h.eventually(func() bool {
		keys, _ := rdb.Keys(ctx, "cs:*:claims").Result()
		for _, k := range keys {
			fields, _ := rdb.HKeys(ctx, k).Result()
			for _, f := range fields {
				if strings.HasPrefix(f, "copy:") && strings.HasSuffix(f, ":"+channel) {
					return true
				}
			}
		}
		return false
	}, "the copy in %s recorded", channel)
	return found
}

// inStep waits until a card and its copies show the same state, whose
// text contains want, without buttons.
func (h *harness) inStep(card slacktest.Call, want string, copies ...slacktest.Call) {
	h.t.Helper()
	h.eventually(func() bool {
		c, _ := h.slack.Message(card.Channel, card.TS)
		if !strings.Contains(c.Text, want) || hasAction(c, "approve") || len(c.Blocks) < 2 {
			return false
		}
		for _, cp := range copies {
			got, _ := h.slack.Message(cp.Channel, cp.TS)
			if got.Text != c.Text || !bytes.HasSuffix(got.Blocks, c.Blocks[1:]) {
				return false
			}
		}
		return true
	}, "the card and its %d copies to show %q", len(copies), want)
}

// A copy of the card in the notify channel links to the thread; a click
// on it (received by another replica) decides the call, and the card and
// its copy end showing the same state. The copy's button clicked from any
// other channel decides nothing.
func TestNotifyChannelCopy(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
tools:
  http_request:
    approvers: [U0BOB, U0CAROL]
    self_approval: false
    notify: C0NOTIFY
`)
	other := h.replica()
	root, card := h.deployFlow("Deployed.")
	cp := h.copyIn(notifyCh)
	if link := slacktest.Permalink(root.Channel, root.TS); !bytes.Contains(cp.Blocks, []byte(link)) {
		t.Errorf("the copy does not link to the thread %s: %s", link, cp.Blocks)
	}
	if buttonValue(t, cp, "approve") != buttonValue(t, card, "approve") {
		t.Errorf("the copy's Approve carries another value than the card's")
	}

	// The copy's button, from a channel it was never posted in.
	h.clickAt(h.addr, cp, "C0ELSEWHERE", "approve", approver)
	h.ephemeral(approver, "belongs to another channel")
	if n := h.target.Count("POST /deploy"); n != 0 {
		t.Fatalf("deploy ran %d times on a click from another channel", n)
	}

	h.clickAt(other, cp, "", "approve", approver)
	h.reply(root, "Deployed.")
	h.inStep(card, "done", cp)
	if shown := h.card(cp); !strings.Contains(shown, "Approved by <@"+approver+">") {
		t.Errorf("the copy after the decision: %s", shown)
	}
	h.click(card, "approve", carol)
	h.ephemeral(carol, "Already approved by <@"+approver+">")
	if n := h.target.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
}

// With notify_dm, each approver but the requester gets the card by direct
// message — the members of a listed group too — and a click in one
// decides; every copy follows the card.
func TestNotifyDirectMessages(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
tools:
  http_request:
    approvers: [U0BOB, S0OPS]
    self_approval: false
    notify_dm: true
`)
	h.slack.SetGroupMembers(opsGroup, carol, requester)
	root, card := h.deployFlow("Deployed.")
	bob, carolDM := h.copyIn(slacktest.DMChannel(approver)), h.copyIn(slacktest.DMChannel(carol))
	if n := len(h.slack.CallsTo("conversations.open")); n != 2 {
		t.Errorf("conversations.open called %d times, want 2: Bob and Carol, not the requester", n)
	}
	if got := h.slack.Messages(slacktest.DMChannel(requester), ""); len(got) != 0 {
		t.Errorf("the requester got %d direct messages, want none", len(got))
	}
	h.click(carolDM, "approve", carol)
	h.reply(root, "Deployed.")
	h.inStep(card, "done", bob, carolDM)
	if n := h.target.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
}

// Reminders come from the schedule with no request arriving: one per
// interval, mentioning the approvers, at most remind_times, and each once
// though two replicas tick the schedule.
func TestRemindersFromTheSchedule(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
tools:
  http_request:
    approvers: [U0BOB, S0OPS]
    remind_after: 3s
    remind_times: 2
    expires_after: 11s
`)
	h.replica()
	root, card := h.deployFlow("Nobody approved; I did not deploy.")
	// Nothing is sent to the bot from here on. A third reminder would be
	// due at 9s; after the expiry at 11s, none can come any more.
	h.reply(root, "Nobody approved")
	h.inStep(card, "expired")
	var reminders []string
	for _, c := range h.slack.Messages(root.Channel, root.TS) {
		if strings.HasPrefix(c.Text, "Reminder:") {
			reminders = append(reminders, c.Text)
		}
	}
	want := []string{
		"Reminder: <@U0BOB>, <!subteam^S0OPS> — http_request has waited 3s for approval",
		"Reminder: <@U0BOB>, <!subteam^S0OPS> — http_request has waited 6s for approval",
	}
	if strings.Join(reminders, "\n") != strings.Join(want, "\n") {
		t.Errorf("reminders in the thread:\n%s\nwant:\n%s", strings.Join(reminders, "\n"), strings.Join(want, "\n"))
	}
}

// An escalation comes from the schedule: the escalation group is
// mentioned in the thread, and one of its members, refused before, may
// then approve.
func TestEscalationFromTheSchedule(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
tools:
  http_request:
    approvers: [U0BOB]
    self_approval: false
    escalate_after: 6s
    escalate_to: S0ONCALL
`)
	h.slack.SetGroupMembers(oncallGrp, dave)
	root, card := h.deployFlow("Deployed.")
	h.click(card, "approve", dave)
	h.ephemeral(dave, "only <@U0BOB> may approve this call")
	if n := h.target.Count("POST /deploy"); n != 0 {
		t.Fatalf("deploy ran %d times before the escalation", n)
	}
	h.reply(root, "Escalated: <!subteam^S0ONCALL> — http_request has waited 6s for approval")
	h.click(card, "approve", mallory)
	h.ephemeral(mallory, "<!subteam^S0ONCALL> may approve")
	h.click(card, "approve", dave)
	h.reply(root, "Deployed.")
	if shown := h.card(card); !strings.Contains(shown, "Approved by <@"+dave+">") {
		t.Errorf("the card after the escalated approval: %s", shown)
	}
	if n := h.target.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
	escalations := 0
	for _, c := range h.slack.Messages(root.Channel, root.TS) {
		if strings.HasPrefix(c.Text, "Escalated:") {
			escalations++
		}
	}
	if escalations != 1 {
		t.Errorf("%d escalation messages, want 1", escalations)
	}
}
