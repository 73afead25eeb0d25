package slackui_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slackui"
)

// FuzzCards renders every card and modal of a call made of fuzzed text
// and checks each against Slack's Block Kit limits (checkMessage,
// checkModal): lengths, block counts, balanced code fences, and no markup
// but the bot's own mentions and dates.
func FuzzCards(f *testing.F) {
	f.Add("http_request", `{"method":"GET","url":"https://x"}`, "Because <!here>", "HTTP 200\n<@U1>", "U0ALICE", uint8(0))
	f.Add("t`o`o`l", "```<!channel>", "``` 🙂 &amp;", "Error: \xff\xfe", "<!channel>", uint8(3))
	f.Add(strings.Repeat("日本", 200), `{"headers":{"Authorization":"Bearer x"}}`, strings.Repeat("> quote\n", 300), strings.Repeat("&", 4000), "W0BOB", uint8(5))
	f.Fuzz(func(t *testing.T, tool, args, reason, result, requester string, kind uint8) {
		c := agent.Call{
			Key: "0.0", ID: "c1", Tool: tool, Args: json.RawMessage(args), Reason: reason,
			Status: agent.Pending, NeedsApproval: true, Expires: cardNow.Add(time.Hour),
		}
		checkMessage(t, slackui.ApprovalCard(c, requester, cardRef, cardNow))
		gate := &runner.Gate{Required: 1 + int(kind)%4, Approvals: []agent.Approval{{By: requester}, {By: reason}},
			Approvers: []string{requester, "S0OPS", result}, Requester: requester, Confirm: true,
			Decisions: []agent.Kind{agent.Approve, agent.Reject}}
		for _, announce := range []bool{true, false} {
			q := c
			q.Revision, q.EditedBy, q.EditedArgs = int(kind)%2, requester, json.RawMessage(result)
			checkMessage(t, slackui.PendingCard(q, requester, cardRef, cardNow, gate, announce))
			checkText(t, "PendingText", slackui.PendingText(q, gate), 3000, "mrkdwn")
		}
		checkModal(t, slackui.EditModal(c, cardRef))
		checkModal(t, slackui.RejectModal(c, cardRef))
		kinds := []agent.Kind{agent.Approve, agent.Edit, agent.Reject, agent.Respond, agent.MarkDone, agent.Expire}
		k := kinds[int(kind)%len(kinds)]
		c.Decision = &agent.Decision{Kind: k, By: requester, Reason: reason, At: cardNow}
		c.Status, c.Attempts, c.Result = agent.Done, 1, result
		if k == agent.Edit {
			c.EditedArgs = json.RawMessage(result)
		}
		checkMessage(t, slackui.SettledCard(c, requester, cardNow))
		c.Status = agent.Failed
		checkMessage(t, slackui.SettledCard(c, requester, cardNow))
		checkText(t, "CardText", slackui.CardText(c), 3000, "mrkdwn")
		checkMessage(t, slackui.ErrorCard(result, cardRef))
		checkMessage(t, slackui.FinalErrorCard(result))
	})
}
