package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
)

// homeView is what a person's Home tab shows: its texts, and the values
// of its Approve buttons.
type homeView struct {
	text    string
	approve []string
}

// openHome sends the event of user opening the Home tab.
func (h *harness) openHome(user string) {
	h.t.Helper()
	resp := h.send("/slack/events", "application/json", slacktest.AppHomeOpened("", user), nil)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		h.t.Fatalf("app_home_opened for %s = %d", user, resp.StatusCode)
	}
}

// homeClick clicks a button in user's Home tab with value.
func (h *harness) homeClick(user, actionID, value string) {
	h.t.Helper()
	body := slacktest.BlockActions(slacktest.Click{Home: true, User: user, ActionID: actionID, Value: value})
	resp := h.send("/slack/interactions", "application/x-www-form-urlencoded", body, nil)
	resp.Body.Close()
}

// home waits until the Home tab last published for user satisfies ok,
// and returns it.
func (h *harness) home(user, what string, ok func(homeView) bool) homeView {
	h.t.Helper()
	var v homeView
	h.eventually(func() bool {
		c, published := h.slack.HomeView(user)
		if !published {
			return false
		}
		v = decodeHome(h.t, c.Blocks)
		return ok(v)
	}, "%s's Home tab %s (last: %+v)", user, what, &v)
	return v
}

func decodeHome(t testing.TB, raw json.RawMessage) homeView {
	t.Helper()
	var blocks any
	if err := json.Unmarshal(raw, &blocks); err != nil {
		t.Fatalf("Home view blocks: %v", err)
	}
	var v homeView
	var texts []string
	var walk func(any)
	walk = func(x any) {
		switch x := x.(type) {
		case map[string]any:
			if s, ok := x["text"].(string); ok {
				texts = append(texts, s)
			}
			if x["type"] == "button" && x["action_id"] == "approve" {
				value, _ := x["value"].(string)
				v.approve = append(v.approve, value)
			}
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(blocks)
	v.text = strings.Join(texts, "\n")
	return v
}

// approvalsList runs "bot approvals list --json" with args.
func (h *harness) approvalsList(t *testing.T, args ...string) []approvalRow {
	t.Helper()
	out := h.cli(t, "", append([]string{"approvals", "list", "--json"}, args...)...)
	var rows []approvalRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("bot approvals list --json %v printed %q: %v", args, out, err)
	}
	return rows
}

// TestHomeTabInbox: the approver's Home tab lists the waiting call with
// the card's buttons; someone else's and the requester's (who may not
// approve their own request) do not. A click there by someone else, with
// the card's value, is refused and says why; the approver's click runs
// the call once, updates the card, and the approver's tab is published
// again without the call and with it among their recent decisions.
// "bot approvals list" shows the same from the command line.
func TestHomeTabInbox(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "tools:\n  http_request: {approval: required, approvers: ["+approver+"], self_approval: false}\n")
	root, card := h.deployFlow("Deployed.")
	value := buttonValue(t, card, "approve")
	thread := slackui.ThreadKey(slacktest.TeamID, root.Channel, root.TS)
	for _, user := range []string{approver, carol, requester} {
		h.openHome(user)
	}
	bob := h.home(approver, "to list the call", func(v homeView) bool { return len(v.approve) == 1 })
	if bob.approve[0] != value {
		t.Errorf("the Approve button in the Home tab has value %q, the card's has %q", bob.approve[0], value)
	}
	for _, want := range []string{"POST " + h.target.URL + "/deploy", "Requested by <@" + requester + "> in <#" + slacktest.ChannelID + ">", "Open the thread"} {
		if !strings.Contains(bob.text, want) {
			t.Errorf("the approver's Home tab does not show %q:\n%s", want, bob.text)
		}
	}
	for _, user := range []string{carol, requester} {
		h.home(user, "to list nothing", func(v homeView) bool { return len(v.approve) == 0 && strings.Contains(v.text, "Nothing waits for you") })
	}

	rows := h.approvalsList(t)
	if len(rows) != 1 || rows[0].Thread != thread || rows[0].Tool != "http_request" || !slices.Equal(rows[0].Approvers, []string{approver}) ||
		rows[0].SelfApproval || !strings.Contains(string(rows[0].Args), "/deploy") || rows[0].Requester != requester {
		t.Errorf("approvals list = %+v; want the one waiting call", rows)
	}
	if rows := h.approvalsList(t, "--user", approver); len(rows) != 1 || !slices.Equal(rows[0].For, []string{approver}) {
		t.Errorf("approvals list --user %s = %+v; want the call, for him", approver, rows)
	}
	for _, user := range []string{carol, requester} {
		if rows := h.approvalsList(t, "--user", user); len(rows) != 0 {
			t.Errorf("approvals list --user %s = %+v; want nothing", user, rows)
		}
	}
	if out := h.cli(t, "", "approvals", "list", "--wide", "--user", approver); !strings.Contains(out, "POST "+h.target.URL+"/deploy") || !strings.Contains(out, approver) {
		t.Errorf("approvals list --user %s:\n%s\nwant the call in a table", approver, out)
	}

	// Carol clicks Approve in her Home tab with the card's value.
	h.homeClick(carol, "approve", value)
	h.home(carol, "to say why she may not decide", func(v homeView) bool {
		return strings.Contains(v.text, "You can't decide this call: only <@"+approver+"> may approve this call")
	})
	if n := h.target.Count("POST /deploy"); n != 0 {
		t.Fatalf("the call ran %d times after a refused click", n)
	}
	if !hasAction(h.cardNow(card), "approve") {
		t.Fatalf("the card lost its buttons after a refused click: %s", h.card(card))
	}

	h.homeClick(approver, "approve", value)
	h.reply(root, "Deployed.")
	if n := h.target.Count("POST /deploy"); n != 1 {
		t.Errorf("the call ran %d times, want 1", n)
	}
	h.eventually(func() bool { return strings.Contains(h.card(card), "Approved by <@"+approver+">") }, "the card to show the approval")
	h.home(approver, "to show the decision instead of the call", func(v homeView) bool {
		return len(v.approve) == 0 && strings.Contains(v.text, "✅ Approved `http_request` in <#"+slacktest.ChannelID+">")
	})
	if rows := h.approvalsList(t); len(rows) != 0 {
		t.Errorf("approvals list after the approval = %+v; want nothing", rows)
	}
}

// With no approvers listed, a call waits for anyone in its channel: the
// Home tab lists it for members (conversations.members) and not for
// others, and refuses a click by someone outside the channel.
func TestHomeTabAnyoneInTheChannel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	h.slack.SetChannelMembers(slacktest.ChannelID, requester, approver)
	root, card := h.deployFlow("Deployed.")
	value := buttonValue(t, card, "approve")
	h.openHome(approver)
	h.openHome(carol)
	h.home(approver, "to list the call", func(v homeView) bool { return slices.Equal(v.approve, []string{value}) })
	h.home(carol, "to list nothing", func(v homeView) bool { return len(v.approve) == 0 })
	h.homeClick(carol, "approve", value)
	h.home(carol, "to say why she may not decide", func(v homeView) bool {
		return strings.Contains(v.text, "only members of <#"+slacktest.ChannelID+"> may decide this call")
	})
	h.homeClick(approver, "approve", value)
	h.reply(root, "Deployed.")
	if n := h.target.Count("POST /deploy"); n != 1 {
		t.Errorf("the call ran %d times, want 1", n)
	}
}

// cardNow returns a card's latest content.
func (h *harness) cardNow(card slacktest.Call) slacktest.Call {
	c, _ := h.slack.Message(card.Channel, card.TS)
	return c
}

// The Home tab's buttons of a call are those of its card: where the
// policy asks Approve to confirm, Approve in the Home tab asks too — the
// Home tab is no way around the question — and a decision the policy
// does not offer has no button there either.
func TestHomeTabButtonsFollowThePolicy(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "tools:\n  http_request: {approval: required, approvers: ["+approver+"], confirm: true, decisions: [approve, reject]}\n")
	_, card := h.deployFlow("Deployed.")
	h.openHome(approver)
	h.home(approver, "to list the call", func(v homeView) bool { return len(v.approve) == 1 })
	c, _ := h.slack.HomeView(approver)
	var blocks []struct {
		Elements []struct {
			ActionID string          `json:"action_id"`
			Confirm  json.RawMessage `json:"confirm"`
		} `json:"elements"`
	}
	if err := json.Unmarshal(c.Blocks, &blocks); err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, b := range blocks {
		for _, e := range b.Elements {
			switch e.ActionID {
			case "approve", "edit", "reject":
				actions = append(actions, e.ActionID)
			}
			if e.ActionID == "approve" && !strings.Contains(string(e.Confirm), "http_request will run: POST "+h.target.URL+"/deploy") {
				t.Errorf("Approve in the Home tab asks %s; want the card's question", e.Confirm)
			}
		}
	}
	if strings.Join(actions, " ") != "approve reject" || hasAction(card, "edit") {
		t.Errorf("the Home tab's buttons = %v (the card has Edit: %v); want approve and reject, as the policy offers", actions, hasAction(card, "edit"))
	}
}
