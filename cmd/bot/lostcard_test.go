package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slacksim/slacktest"
)

// A card is posted, then recorded. Slack shows it before the replica
// that posted it hears back, or that replica dies in between: a click on
// the card reaches a replica that has no record of it. The call runs
// once all the same, and its card, found in the thread, shows the
// decision rather than go on offering its buttons.

// postCardHeld starts a deploy whose card's post Slack answers only when
// release is called (the card is in the thread at once), and returns the
// thread's root and the card once it is posted.
func postCardHeld(h *harness) (root, card slacktest.Call, release func()) {
	h.t.Helper()
	recorded, release := h.slack.HoldAnswer("chat.postMessage", func(c slacktest.Call) bool { return hasAction(c, "approve") })
	h.t.Cleanup(release)
	h.model.Then(
		llmtest.Reply("Deploying.", call("c1", "POST", h.target.URL+"/deploy", "v2")),
		llmtest.Reply("Deployed."),
	)
	h.command("deploy", nil, nil)
	root = h.root(1)
	h.eventually(func() bool {
		select {
		case <-recorded:
			return true
		default:
			return false
		}
	}, "the card to be posted")
	return root, h.cards(root, 1)[0], release
}

// approvedOnce checks that the deploy ran once, that the thread has one
// card, and that it shows the approval without buttons.
func approvedOnce(h *harness, root, card slacktest.Call) {
	h.t.Helper()
	h.cardShows(card, "Approved by <@"+approver+">")
	if got := h.card(card); strings.Contains(got, `"action_id":"approve"`) {
		h.t.Errorf("the card still offers its buttons: %s", got)
	}
	if n := h.target.Count("POST /deploy"); n != 1 {
		h.t.Errorf("deploy ran %d times, want 1", n)
	}
	if n := countCards(h, root); n != 1 {
		h.t.Errorf("%d approval cards were posted, want 1", n)
	}
}

// approveOn has the approver click Approve on card, sending the click to
// the replica at addr, and checks that it was answered.
func (h *harness) approveOn(addr string, card slacktest.Call) {
	h.t.Helper()
	resp := h.clickOn(addr, card, "approve", approver)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		h.t.Fatalf("the click answered %d", resp.StatusCode)
	}
}

// countCards is how many approval cards root's thread shows.
func countCards(h *harness, root slacktest.Call) int {
	n := 0
	for _, c := range h.slack.Messages(root.Channel, root.TS) {
		if hasAction(c, "approve") {
			n++
		}
	}
	return n
}

func TestApprovalOnAnotherReplicaBeforeTheCardIsRecorded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	other := h.replica()
	root, card, release := postCardHeld(h)
	h.approveOn(other, card)
	h.reply(root, "Deployed.")
	release() // the replica that posted the card hears back, and records it
	approvedOnce(h, root, card)
}

func TestCardOfAReplicaKilledBeforeRecordingIt(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	other := h.replica()
	root, card, _ := postCardHeld(h)
	h.kill() // it never records the card
	h.approveOn(other, card)
	h.reply(root, "Deployed.")
	approvedOnce(h, root, card)
	if !strings.Contains(h.logs.String(), "took up a card that was posted and not recorded") {
		t.Errorf("the replica that took the click did not say it took up the card")
	}
}

// Nobody clicks: the replica that wakes the thread (its recovery
// wake-up, 30 s after the pause) shows the card again, finds the one in
// the thread and takes it up, rather than post a second. That card
// decides the call.
func TestCardOfAReplicaKilledBeforeRecordingItIsNotPostedAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	other := h.replica()
	root, card, _ := postCardHeld(h)
	h.kill()
	h.eventually(func() bool {
		return strings.Contains(h.logs.String(), "took up a card that was posted and not recorded") ||
			countCards(h, root) > 1
	}, "the other replica to show the card again")
	h.approveOn(other, card)
	h.reply(root, "Deployed.")
	approvedOnce(h, root, card)
}
