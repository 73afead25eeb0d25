package slackui_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slackui"
	"github.com/countersign/countersign/slackui/slackuitest"
)

// quorumGate: two of Bob, Carol and the ops group approve; Bob has; the
// asker may not approve; no edit; Approve asks for a confirmation.
func quorumGate() *runner.Gate {
	return &runner.Gate{
		Required: 2, Approvals: []agent.Approval{{By: cardApprover, At: cardDecided}},
		Approvers: []string{cardApprover, "U0CAROL", "S0OPS", cardAsker}, Requester: cardAsker,
		Decisions: []agent.Kind{agent.Approve, agent.Reject}, Confirm: true,
	}
}

func TestPendingCardGolden(t *testing.T) {
	t.Parallel()
	edited := callWith(func(c *agent.Call) {
		c.Revision, c.EditedBy, c.EditedArgs = 1, "U0CAROL", callEditedArgs
		c.ApprovalsRequired = 2
	})
	reset := quorumGate()
	reset.Approvals = nil
	tests := []struct {
		name        string
		cardMessage cardMessage
	}{
		{"pending-quorum-posted", cardMessage{slackui.PendingText(pendingCall(), quorumGate()), slackui.PendingCard(pendingCall(), cardAsker, cardRef, cardNow, quorumGate(), true)}},
		{"pending-quorum-reset", cardMessage{slackui.CardText(edited), slackui.PendingCard(edited, cardAsker, cardRef, cardNow, reset, false)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			compareGolden(t, "card-"+tt.name, tt.cardMessage)
			checkMessage(t, tt.cardMessage.Blocks)
		})
	}
}

// The card shows the quorum's progress and who may still approve; it
// mentions the approvers only when first posted.
func TestPendingCardShowsTheQuorum(t *testing.T) {
	t.Parallel()
	posted := slackuitest.Texts(t, slackui.PendingCard(pendingCall(), cardAsker, cardRef, cardNow, quorumGate(), true))
	updated := slackuitest.Texts(t, slackui.PendingCard(pendingCall(), cardAsker, cardRef, cardNow, quorumGate(), false))
	for _, want := range []string{
		"1 of 2 approvals*: <@U0BOB>",
		"Still to approve: 1 more approval from <@U0CAROL> and <!subteam^S0OPS>.",
	} {
		if !strings.Contains(posted, want) || !strings.Contains(updated, want) {
			t.Errorf("card lacks %q:\nposted: %s\nupdated: %s", want, posted, updated)
		}
	}
	announce := "📣 <@U0CAROL> and <!subteam^S0OPS>: your approval is needed."
	if !strings.Contains(posted, announce) {
		t.Errorf("the posted card does not ask the approvers (%q):\n%s", announce, posted)
	}
	if strings.Contains(updated, "📣") {
		t.Errorf("an update mentions the approvers again:\n%s", updated)
	}
	if text := slackui.PendingText(pendingCall(), quorumGate()); !strings.HasSuffix(text, " · <@U0CAROL> and <!subteam^S0OPS>") {
		t.Errorf("PendingText() = %q, want it to name who may still approve", text)
	}
	// Anyone may approve: no one to mention; the card says who may not.
	anyone := &runner.Gate{Required: 3, Approvals: []agent.Approval{{By: cardApprover}}, Requester: cardAsker,
		Decisions: []agent.Kind{agent.Approve, agent.Edit, agent.Reject}}
	got := slackuitest.Texts(t, slackui.PendingCard(pendingCall(), cardAsker, cardRef, cardNow, anyone, true))
	if want := "Still to approve: 2 more approvals from anyone in the channel but <@U0BOB> and <@U0ASKER>."; !strings.Contains(got, want) || strings.Contains(got, "📣") {
		t.Errorf("card of anyone's approval lacks %q, or mentions people:\n%s", want, got)
	}
	// Too few approvers are left.
	stuck := &runner.Gate{Required: 2, Approvers: []string{cardApprover, cardAsker}, Requester: cardAsker,
		Decisions: []agent.Kind{agent.Approve, agent.Reject}}
	if got := slackuitest.Texts(t, slackui.PendingCard(pendingCall(), cardAsker, cardRef, cardNow, stuck, false)); !strings.Contains(got, "Too few approvers are left") {
		t.Errorf("card of an unreachable quorum does not say so:\n%s", got)
	}
}

// decisions: [approve, reject] removes Edit; confirm: true puts Slack's
// confirmation dialog on Approve, naming the tool and its target.
func TestPendingCardButtons(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		gate    *runner.Gate
		want    []cardButton
		confirm bool
	}{
		{"all decisions", &runner.Gate{Required: 1, Decisions: []agent.Kind{agent.Approve, agent.Edit, agent.Reject}},
			[]cardButton{{"approve", "Approve", "primary"}, {"edit", "Edit", ""}, {"reject", "Reject", "danger"}}, false},
		{"approve and reject, confirmed", quorumGate(), []cardButton{{"approve", "Approve", "primary"}, {"reject", "Reject", "danger"}}, true},
		{"approve only", &runner.Gate{Required: 1, Decisions: []agent.Kind{agent.Approve}}, []cardButton{{"approve", "Approve", "primary"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			blocks := slackui.PendingCard(pendingCall(), cardAsker, cardRef, cardNow, tt.gate, true)
			got, _ := buttonsOf(t, blocks)
			if len(got) != len(tt.want) {
				t.Fatalf("buttons = %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("buttons = %v, want %v", got, tt.want)
				}
			}
			confirm := approveConfirm(t, blocks)
			if !tt.confirm {
				if confirm != nil {
					t.Errorf("Approve asks for a confirmation: %+v", confirm)
				}
				return
			}
			if confirm == nil {
				t.Fatal("Approve has no confirmation dialog")
			}
			want := map[string]string{
				"title":   "Approve http_request?",
				"text":    "Your approval counts toward the 2 that http_request needs before it runs: POST https://api.example.com/v1/deploys",
				"confirm": "Approve",
				"deny":    "Cancel",
			}
			got2 := map[string]string{"title": confirm.Title.Text, "text": confirm.Text.Text, "confirm": confirm.Confirm.Text, "deny": confirm.Deny.Text}
			for k, v := range want {
				if got2[k] != v {
					t.Errorf("confirm %s = %q, want %q", k, got2[k], v)
				}
			}
		})
	}
}

// approveConfirm returns the Approve button's confirmation dialog.
func approveConfirm(t *testing.T, blocks []slack.Block) *slack.ConfirmationBlockObject {
	t.Helper()
	raw, err := json.Marshal(blocks)
	if err != nil {
		t.Fatal(err)
	}
	var back slack.Blocks
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	for _, b := range back.BlockSet {
		a, ok := b.(*slack.ActionBlock)
		if !ok {
			continue
		}
		for _, e := range a.Elements.ElementSet {
			if btn, ok := e.(*slack.ButtonBlockElement); ok && btn.ActionID == slackui.ActionApprove {
				return btn.Confirm
			}
		}
	}
	t.Fatal("no Approve button")
	return nil
}

// A settled card of a quorum names every approver, and an edit before
// the approvals.
func TestSettledCardOfAQuorum(t *testing.T) {
	t.Parallel()
	c := callWith(func(c *agent.Call) {
		c.Status, c.Attempts, c.Result = agent.Done, 1, "Note: <@U0CAROL> edited the arguments, and <@U0BOB> and <@U0DAVE> approved them; the call ran with {}.\nHTTP 201 Created"
		c.EditedArgs, c.EditedBy, c.Revision, c.ApprovalsRequired = callEditedArgs, "U0CAROL", 1, 2
		c.Decision = decisionOf(agent.Approve, "")
		c.Decision.Approvals = []agent.Approval{{By: cardApprover}, {By: "U0DAVE"}}
	})
	got := slackuitest.Texts(t, slackui.SettledCard(c, cardAsker, cardNow))
	for _, want := range []string{"✅ Approved by <@U0BOB> and <@U0DAVE> at", "edited by <@U0CAROL>", "What changed", "✔️ Done: HTTP 201 Created"} {
		if !strings.Contains(got, want) {
			t.Errorf("settled card lacks %q:\n%s", want, got)
		}
	}
}

// The edit form of a call several people approve says that it proposes.
func TestEditModalOfAQuorum(t *testing.T) {
	t.Parallel()
	c := callWith(func(c *agent.Call) { c.ApprovalsRequired = 2 })
	view := slackui.EditModal(c, cardRef)
	checkModal(t, view)
	if got := slackuitest.Texts(t, view.Blocks); view.Submit.Text != "Propose" || !strings.Contains(got, "resets the approvals") {
		t.Errorf("edit modal of a quorum: submit %q, texts %s", view.Submit.Text, got)
	}
}
