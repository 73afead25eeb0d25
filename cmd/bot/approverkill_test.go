package main

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
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
	checkCardApproved(t, h, card) // the original card, after the crash
	h.click(retry, "retry", approver)
	h.reply(root, "Deployed.")
	if n := h.target.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want once", n)
	}
}

// TestApproveAndRejectAtOnceOnTwoReplicas: the approver clicks Approve on
// one replica as the requester submits a rejection on the other. One
// decision wins: the card shows it, the call runs only if it was the
// approval, and the person whose decision lost is told who decided
// first — nobody is told "try again".
func TestApproveAndRejectAtOnceOnTwoReplicas(t *testing.T) {
	// Not in parallel: two replicas, whose timing the other tests' load changes.
	h := newHarness(t, "")
	other := h.replica()
	h.model.Then(llmtest.Reply("Deploying.", call("c1", "POST", h.target.URL+"/deploy", "v2")), llmtest.Reply("Done."))
	h.command("deploy", nil, nil)
	root := h.root(1)
	card := h.cards(root, 1)[0]
	reject := slacktest.ViewSubmission(slacktest.Submission{User: requester, CallbackID: slackui.CallbackReject,
		PrivateMetadata: buttonValue(t, card, "reject"),
		Values:          map[string]map[string]string{slackui.BlockReason: {slackui.InputReason: "not today"}}})
	var wg sync.WaitGroup
	var rejectBody string
	wg.Add(2)
	go func() {
		defer wg.Done()
		h.click(card, "approve", approver).Body.Close()
	}()
	go func() {
		defer wg.Done()
		req := h.signer.Request(http.MethodPost, "http://"+other+"/slack/interactions", "application/x-www-form-urlencoded", reject, time.Now())
		resp, err := botClient.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		rejectBody = string(b)
	}()
	wg.Wait()
	h.reply(root, "Done.")
	got := h.card(card)
	approved := strings.Contains(got, "Approved by <@"+approver+">")
	rejected := strings.Contains(got, "Rejected by <@"+requester+">")
	if approved == rejected || strings.Contains(got, `"action_id"`) {
		t.Fatalf("card = %s; want one decision and no buttons", got)
	}
	t.Logf("approved first: %v", approved)
	if n, want := h.target.Count("POST /deploy"), map[bool]int{true: 1, false: 0}[approved]; n != want {
		t.Errorf("deploy ran %d times, want %d (approved: %v)", n, want, approved)
	}
	for _, e := range h.slack.CallsTo("chat.postEphemeral") {
		if strings.Contains(e.Text, "try again") {
			t.Errorf("%s was told %q", e.User, e.Text)
		}
	}
	if approved {
		if !strings.Contains(rejectBody, "Already approved") {
			t.Errorf("the requester's rejection was answered %q; want who approved first", rejectBody)
		}
	} else {
		h.eventually(func() bool { return len(ephemeralsTo(h, approver)) > 0 }, "an answer to the approver")
		if told := ephemeralsTo(h, approver); len(told) != 1 || !strings.Contains(told[0], "Already rejected") {
			t.Errorf("the approver was told %q; want who rejected first", told)
		}
	}
}

// TestKilledDuringTheTool: the replica is killed while the approved call
// is being sent (the target has it and never answers). The next process
// cannot know whether it had its effect: it does not send it again, it
// asks a person on a card of its own, and the original card says who
// approved and offers no buttons. Marking it done lets the run go on; the
// call was sent once.
func TestKilledDuringTheTool(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	h.model.Then(llmtest.Reply("Deploying.", call("c1", "POST", h.target.URL+"/deploy", "v2")), llmtest.Reply("Deployed."))
	h.command("deploy", nil, nil)
	root := h.root(1)
	card := h.cards(root, 1)[0]
	h.target.HoldNext("POST /deploy")
	h.click(card, "approve", approver)
	h.eventually(func() bool { return h.target.Count("POST /deploy") == 1 }, "the call to reach the target")
	h.kill()
	h.start()
	settle := h.cardWith(root, "mark_done", time.Minute)
	checkCardApproved(t, h, card) // the original card, after the crash
	h.click(settle, "mark_done", approver)
	h.reply(root, "Deployed.")
	if n := h.target.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy was sent %d times, want once", n)
	}
	for _, e := range h.slack.CallsTo("chat.postEphemeral") {
		if e.User == approver {
			t.Errorf("the approver was told %q", e.Text)
		}
	}
}
