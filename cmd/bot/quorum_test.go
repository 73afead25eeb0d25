package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slacksim/slacktest"
)

// Four eyes through the real binary: a call that needs two approvers runs
// once, after the second, whichever replica receives the clicks; the
// requester, an outsider and a second click of one person do not count;
// an edit resets the approvals; a rule's decisions and confirm shape the
// card, and a forged edit is refused.

// quorumPolicy: two of Bob, Carol and Dave approve; nobody approves their
// own request.
const quorumPolicy = `
tools:
  http_request:
    approvers: [U0BOB, U0CAROL, U0DAVE]
    self_approval: false
    approvals_required: 2
    allow_hosts: ["127.0.0.1"]
`

// clickOn presses a button on a card, sending the click to the replica
// at addr.
func (h *harness) clickOn(addr string, card slacktest.Call, actionID, user string) *http.Response {
	h.t.Helper()
	body := slacktest.BlockActions(slacktest.Click{
		User: user, Channel: card.Channel, MessageTS: card.TS, ThreadTS: card.ThreadTS,
		ActionID: actionID, Value: buttonValue(h.t, card, actionID),
	})
	req := h.signer.Request(http.MethodPost, "http://"+addr+"/slack/interactions", "application/x-www-form-urlencoded", body, time.Now())
	resp, err := botClient.Do(req)
	if err != nil {
		h.t.Fatalf("click on %s: %v", addr, err)
	}
	return resp
}

// latest returns a card's content now, after its updates.
func (h *harness) latest(card slacktest.Call) slacktest.Call {
	h.t.Helper()
	c, ok := h.slack.Message(card.Channel, card.TS)
	if !ok {
		h.t.Fatalf("no message %s", card.TS)
	}
	return c
}

// blocksText is a message's blocks as JSON with <, > and & as they are.
func blocksText(c slacktest.Call) string {
	var blocks any
	_ = json.Unmarshal(c.Blocks, &blocks)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(blocks)
	return b.String()
}

// cardShows waits until the card, as updated, contains every want.
func (h *harness) cardShows(card slacktest.Call, want ...string) {
	h.t.Helper()
	h.eventually(func() bool {
		got := h.card(card)
		for _, w := range want {
			if !strings.Contains(got, w) {
				return false
			}
		}
		return true
	}, "the card to show %q", want)
}

// Ten clicks at once, of approvers, the requester and an outsider, spread
// over two replicas: the deploy runs exactly once, and the card ends
// approved by two distinct approvers. The approvers were mentioned once,
// when the card was posted.
func TestQuorumTenClicksOverTwoReplicas(t *testing.T) {
	t.Parallel()
	h := newHarness(t, quorumPolicy)
	other := h.replica()
	root, card := h.deployFlow("Deployed.")
	posted := blocksText(card)
	if !strings.Contains(card.Text, "<@U0BOB>, <@U0CAROL> and <@U0DAVE>") || !strings.Contains(posted, "📣 <@U0BOB>, <@U0CAROL> and <@U0DAVE>: 2 approvals from you are needed.") {
		t.Errorf("the posted card does not mention the approvers: %s %s", card.Text, posted)
	}
	if !strings.Contains(posted, "0 of 2 approvals") {
		t.Errorf("the posted card does not show its progress: %s", posted)
	}
	people := []string{approver, carol, dave, mallory, requester}
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			addr := h.addr
			if i%2 == 1 {
				addr = other
			}
			resp := h.clickOn(addr, card, "approve", people[i%len(people)])
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("click %d answered %d", i, resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	h.reply(root, "Deployed.")
	if n := h.target.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
	h.cardShows(card, "Approved by <@", "Done")
	got := h.card(card)
	names := 0
	for _, who := range []string{approver, carol, dave} {
		if strings.Contains(got, "<@"+who+">") {
			names++
		}
	}
	if !strings.Contains(got, "Approved by <@") || !strings.Contains(got, "> and <@") || names != 2 {
		t.Errorf("the card ends as %s; want it approved by two of Bob, Carol and Dave", got)
	}
	if strings.Contains(got, mallory) || strings.Contains(got, "Approved by <@"+requester) {
		t.Errorf("the card names the outsider or the requester as approvers: %s", got)
	}
	for _, c := range h.slack.CallsTo("chat.update") {
		if c.TS == card.TS && strings.Contains(blocksText(c), "📣") {
			t.Errorf("a card update mentions the approvers again: %s", blocksText(c))
		}
	}
	h.ephemeral(mallory, "only <@U0BOB>, <@U0CAROL> and <@U0DAVE> may approve this call")
	h.ephemeral(requester, "may not approve it yourself")
}

// The requester's and an outsider's clicks do not count, nor a second
// click of Bob's (he is told so); the card shows Bob's approval to
// everyone, and Carol's completes it.
func TestQuorumCountsDistinctApprovers(t *testing.T) {
	t.Parallel()
	h := newHarness(t, quorumPolicy)
	root, card := h.deployFlow("Deployed.")
	h.click(card, "approve", requester).Body.Close()
	h.ephemeral(requester, "may not approve it yourself")
	h.click(card, "approve", mallory).Body.Close()
	h.ephemeral(mallory, "may approve this call")
	h.click(card, "approve", approver).Body.Close()
	h.cardShows(card, "1 of 2 approvals*: <@U0BOB>", "Still to approve: 1 more approval from <@U0CAROL> and <@U0DAVE>.")
	h.click(h.latest(card), "approve", approver).Body.Close()
	h.ephemeral(approver, "you have approved this call already (1 of 2 approvals); it needs 1 more approval from someone else")
	if n := h.target.Count("POST /deploy"); n != 0 {
		t.Fatalf("deploy ran %d times after one approval of two", n)
	}
	h.click(h.latest(card), "approve", carol).Body.Close()
	h.reply(root, "Deployed.")
	h.cardShows(card, "Approved by <@U0BOB> and <@U0CAROL>")
	if n := h.target.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
}

// An edit after one approval resets it: the card says so, the approval
// from before the edit no longer counts or applies, and the edited call
// runs once two people approve the new arguments.
func TestQuorumEditResetsTheApprovals(t *testing.T) {
	t.Parallel()
	h := newHarness(t, quorumPolicy)
	root, card := h.deployFlow("Deployed.")
	h.click(card, "approve", approver).Body.Close()
	h.cardShows(card, "1 of 2 approvals*: <@U0BOB>")
	before := h.latest(card)

	h.click(before, "edit", carol).Body.Close()
	view := decodeView(t, h.slack.WaitFor(t, "views.open", 1, 10*time.Second)[0])
	edited := `{"method":"POST","url":"` + h.target.URL + `/deploy-edited","body":"v3"}`
	resp := h.submit(slacktest.Submission{User: carol, CallbackID: view.CallbackID, PrivateMetadata: view.PrivateMetadata,
		Values: map[string]map[string]string{"args": {"args_input": edited}}})
	if body := readAll(t, resp); resp.StatusCode != http.StatusOK || body != "" {
		t.Fatalf("submitting the edit answered %d %q", resp.StatusCode, body)
	}
	h.cardShows(card, "Approvals reset: the arguments were edited", "by <@U0CAROL>", "0 of 2 approvals", "/deploy-edited")

	// Dave clicks the card as it was before the edit.
	h.click(before, "approve", dave).Body.Close()
	h.ephemeral(dave, "no longer pending")
	if n := h.target.Count("POST /deploy") + h.target.Count("POST /deploy-edited"); n != 0 {
		t.Fatalf("a deploy ran %d times before anyone approved the edit", n)
	}
	h.click(h.latest(card), "approve", approver).Body.Close()
	h.cardShows(card, "1 of 2 approvals*: <@U0BOB>", "/deploy-edited")
	h.click(h.latest(card), "approve", dave).Body.Close()
	h.reply(root, "Deployed.")
	if a, b := h.target.Count("POST /deploy-edited"), h.target.Count("POST /deploy"); a != 1 || b != 0 {
		t.Errorf("the edited deploy ran %d times and the original %d; want 1 and 0", a, b)
	}
	h.cardShows(card, "Approved by <@U0BOB> and <@U0DAVE>", "edited by <@U0CAROL>")
	for _, c := range h.slack.CallsTo("chat.update") {
		if c.TS == card.TS && strings.Contains(blocksText(c), "Edited and approved") {
			t.Errorf("the card said the edit approved the call: %s", blocksText(c))
		}
	}
}

// decisions: [approve, reject] shows no Edit button; a forged edit — a
// crafted click and a crafted form submission — is refused and changes
// nothing. confirm: true puts Slack's confirmation dialog on Approve.
func TestDecisionsAndConfirmOnTheCard(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
tools:
  http_request:
    decisions: [approve, reject]
    confirm: true
    allow_hosts: ["127.0.0.1"]
`)
	root, card := h.deployFlow("Deployed.")
	if hasAction(card, "edit") || !hasAction(card, "reject") {
		t.Fatalf("card buttons: %s; want Approve and Reject, no Edit", card.Blocks)
	}
	var blocks []struct {
		Elements []struct {
			ActionID string `json:"action_id"`
			Confirm  *struct {
				Title, Text, Confirm, Deny struct{ Text string }
			} `json:"confirm"`
		} `json:"elements"`
	}
	if err := json.Unmarshal(card.Blocks, &blocks); err != nil {
		t.Fatal(err)
	}
	confirmed := false
	for _, b := range blocks {
		for _, e := range b.Elements {
			if e.ActionID != "approve" {
				continue
			}
			if e.Confirm == nil {
				t.Fatal("Approve has no confirmation dialog")
			}
			c := e.Confirm
			if c.Title.Text != "Approve http_request?" || !strings.Contains(c.Text.Text, "http_request will run: POST "+h.target.URL+"/deploy") ||
				c.Confirm.Text != "Approve" || c.Deny.Text != "Cancel" {
				t.Errorf("confirmation dialog = %+v", *c)
			}
			confirmed = true
		}
	}
	if !confirmed {
		t.Fatal("no Approve button")
	}

	// A crafted click on Edit, with the card's reference.
	value := buttonValue(t, card, "approve")
	forged := slacktest.BlockActions(slacktest.Click{User: approver, Channel: card.Channel, MessageTS: card.TS, ThreadTS: card.ThreadTS,
		ActionID: "edit", Value: value})
	h.send("/slack/interactions", "application/x-www-form-urlencoded", forged, nil).Body.Close()
	h.ephemeral(approver, "the policy offers only approve and reject for http_request, not edit")
	// A crafted submission of the edit form.
	resp := h.submit(slacktest.Submission{User: approver, CallbackID: "edit_call", PrivateMetadata: value,
		Values: map[string]map[string]string{"args": {"args_input": `{"method":"POST","url":"` + h.target.URL + `/elsewhere"}`}}})
	if body := readAll(t, resp); !strings.Contains(body, `"response_action":"errors"`) || !strings.Contains(body, "not edit") {
		t.Errorf("a forged edit submission answered %q; want it refused in the form", body)
	}
	if n := len(h.slack.CallsTo("views.open")); n != 0 {
		t.Errorf("%d forms were opened for a tool without edit", n)
	}
	h.click(card, "approve", approver).Body.Close()
	h.reply(root, "Deployed.")
	if a, b := h.target.Count("POST /deploy"), h.target.Count("POST /elsewhere"); a != 1 || b != 0 {
		t.Errorf("deploy ran %d times and the forged call %d; want 1 and 0", a, b)
	}
	if got := h.card(card); !strings.Contains(got, fmt.Sprintf("Approved by <@%s>", approver)) {
		t.Errorf("card after approval = %s", got)
	}
}

// bot chat shows the quorum's progress, offers no edit when the rule
// leaves it out, and asks to confirm an approval; the second person's
// approval, in another chat on the same thread, runs the call.
func TestChatQuorumDecisionsAndConfirm(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
tools:
  http_request:
    approvals_required: 2
    decisions: [approve, reject]
    confirm: true
    allow_hosts: ["127.0.0.1"]
`)
	h.model.Then(llmtest.Reply("Deploying.", call("c1", "POST", h.target.URL+"/deploy", "v2")), llmtest.Reply("Deployed."))
	// Bob tries to edit, declines the confirmation once, then approves.
	first, _ := h.run("deploy v2\ne\na\nn\na\ny\nq\n", "chat", "--user", approver, "--thread", "chat-quorum")
	for _, want := range []string{
		"0 of 2 approvals",
		"[a]pprove [r]eject [q]uit> ",
		"Approve http_request: POST " + h.target.URL + "/deploy? [y/N]> ",
		"1 of 2 approvals: " + approver,
		"you approved it",
		"[r]eject [q]uit> ",
	} {
		if !strings.Contains(first, want) {
			t.Errorf("bot chat as %s lacks %q:\n%s", approver, want, first)
		}
	}
	if strings.Contains(first, "[e]dit") || strings.Contains(first, "new arguments") {
		t.Errorf("bot chat offered an edit:\n%s", first)
	}
	if n := h.target.Count("POST /deploy"); n != 0 {
		t.Fatalf("deploy ran %d times after one approval of two", n)
	}
	second, err := h.run("a\ny\n", "chat", "--user", carol, "--thread", "chat-quorum")
	if err != nil || !strings.Contains(second, "Deployed.") || !strings.Contains(second, "approved by "+approver+", "+carol) {
		t.Errorf("bot chat as %s: %v\n%s", carol, err, second)
	}
	if n := h.target.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
}

// Slack shows a posted card in the channel before the bot hears back, so
// an approver can click it before the replica that posted it has recorded
// it. The replica that takes the click, another one here, waits for that
// record instead of posting a second card or leaving the count to the
// recovery wake-up: the one card shows the approval at once.
func TestQuorumApprovalBeforeTheCardIsRecorded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, quorumPolicy)
	other := h.replica()
	root, card, release := postCardHeld(h)
	h.approveOn(other, card)
	cards := func() int { return countCards(h, root) }
	h.eventually(func() bool {
		return strings.Contains(h.logs.String(), "waiting for the card to be recorded by the process showing it") || cards() > 1
	}, "the replica that took the click to wait for the card's record")
	if n := cards(); n != 1 {
		t.Fatalf("%d approval cards were posted, want 1", n)
	}
	release() // the replica that posted the card hears back, and records it
	h.cardShows(card, "1 of 2 approvals*: <@U0BOB>")
	h.click(h.latest(card), "approve", carol).Body.Close()
	h.reply(root, "Deployed.")
	h.cardShows(card, "Approved by <@U0BOB> and <@U0CAROL>")
	if n := h.target.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
	if n := cards(); n != 1 {
		t.Errorf("%d approval cards were posted, want 1", n)
	}
}
