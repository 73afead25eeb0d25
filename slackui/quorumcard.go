package slackui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/tools"
)

// What a pending call's card says about deciding it (runner.Gate): the
// approvers, mentioned when the card is first posted; with a quorum, how
// many approvals it has and who may still give them, and that an edit
// reset them; the decisions its rule offers; and Slack's confirmation
// dialog on Approve when the rule asks for one.

// Limits of Slack's confirmation dialog, in characters.
const (
	budgetConfirmTitle = 100
	budgetConfirmText  = 300
	BudgetMentions     = 1500 // a list of mentions on a card
)

// PendingCard is ApprovalCard with what g says about deciding c: the
// card Reporter posts and updates. announce is set on the card's first
// post: it mentions the approvers, so that Slack notifies them; the
// card's updates mention them no more. g may be nil.
func PendingCard(c agent.Call, requester string, ref string, now time.Time, g *runner.Gate, announce bool) []slack.Block {
	if c.Status == agent.Unknown || g == nil {
		return ApprovalCard(c, requester, ref, now)
	}
	blocks := []slack.Block{HeaderBlock("Approval needed: " + c.Tool)}
	if announce {
		if l := announceLine(*g); l != "" {
			blocks = append(blocks, SectionBlock(l))
		}
	}
	if c.Revision > 0 {
		blocks = append(blocks, SectionBlock("✏️ *Approvals reset: the arguments were edited* by "+UserMention(c.EditedBy)+
			". Earlier approvals were of other arguments; these need approving anew.\n*What changed*\n"+
			codeFence(argsDiff(tools.MaskSecrets(c.Tool, c.Args), ShownArgs(c)), budgetDiff+budgetDiffLine)))
	}
	args, clipped := argsCardBlocks(c, ref)
	blocks = append(blocks, args...)
	blocks = append(blocks, requestBlocks(c, requester, now)...)
	if l := gateLines(*g); l != "" {
		blocks = append(blocks, SectionBlock(l))
	}
	var confirm *slack.ConfirmationBlockObject
	if g.Confirm {
		confirm = approveConfirm(c, *g)
	}
	approve := withClippedConfirm(Button(ActionApprove, "Approve", ref, slack.StylePrimary), c, clipped, confirm)
	buttons := []slack.BlockElement{approve}
	if g.Offers(agent.Edit) {
		buttons = append(buttons, Button(ActionEdit, "Edit", ref, slack.StyleDefault))
	}
	if g.Offers(agent.Reject) {
		buttons = append(buttons, Button(ActionReject, "Reject", ref, slack.StyleDanger))
	}
	return append(blocks, slack.NewActionBlock(BlockCallActions, buttons...))
}

// PendingText is CardText for a card's first post: with the approvers'
// mentions, so that the notification names them.
func PendingText(c agent.Call, g *runner.Gate) string {
	text := CardText(c)
	if g == nil || c.Status != agent.Pending || len(g.StillToApprove()) == 0 {
		return text
	}
	return text + " · " + MentionList(g.StillToApprove(), BudgetCardText)
}

// announceLine asks the listed approvers for their decision; "" when
// anyone in the channel may decide.
func announceLine(g runner.Gate) string {
	who := g.StillToApprove()
	if len(who) == 0 {
		return ""
	}
	ask := "your approval is needed"
	if g.Missing() > 1 {
		ask = fmt.Sprintf("%d approvals from you are needed", g.Missing())
	}
	return "📣 " + MentionList(who, BudgetMentions) + ": " + ask + "."
}

// gateLines show a quorum's progress and who may still approve; "" for a
// call one approval decides.
func gateLines(g runner.Gate) string {
	if g.Required < 2 {
		return ""
	}
	var lines []string
	progress := fmt.Sprintf("☑️ *%d of %d approvals*", len(g.Approvals), g.Required)
	if len(g.Approvals) > 0 {
		var who []string
		for _, a := range g.Approvals {
			who = append(who, a.By)
		}
		progress += ": " + MentionList(who, BudgetMentions)
	}
	lines = append(lines, progress)
	more := fmt.Sprintf("%d more %s", g.Missing(), plural(g.Missing(), "approval", "approvals"))
	switch still := g.StillToApprove(); {
	case !g.Reachable():
		lines = append(lines, "⚠️ Too few approvers are left to give "+more+": the call can only be rejected, or expire.")
	case len(g.Approvers) == 0:
		line := "Still to approve: " + more + " from anyone in the channel"
		if who := approvedOrAsked(g); who != "" {
			line += " but " + who
		}
		lines = append(lines, line+".")
	default:
		lines = append(lines, "Still to approve: "+more+" from "+MentionList(still, BudgetMentions)+".")
	}
	return strings.Join(lines, "\n")
}

// approvedOrAsked names who may not give the approvals still missing of
// a call anyone may approve: those who gave theirs, and the requester
// without self-approval.
func approvedOrAsked(g runner.Gate) string {
	var who []string
	for _, a := range g.Approvals {
		who = append(who, a.By)
	}
	if !g.SelfApproval && g.Requester != "" && !g.Approved(g.Requester) {
		who = append(who, g.Requester)
	}
	return MentionList(who, BudgetMentions)
}

// approveConfirm is Slack's "are you sure?" dialog on Approve: it names
// the tool and what the call acts on.
func approveConfirm(c agent.Call, g runner.Gate) *slack.ConfirmationBlockObject {
	text := c.Tool + " will run: " + callTarget(c)
	if g.Required > 1 {
		text = fmt.Sprintf("Your approval counts toward the %d that %s needs before it runs: %s", g.Required, c.Tool, callTarget(c))
	}
	return slack.NewConfirmationBlockObject(
		PlainTextObject(ClipText(OneLine("Approve "+c.Tool+"?"), budgetConfirmTitle)),
		PlainTextObject(ClipText(OneLine(text), budgetConfirmText)),
		PlainTextObject("Approve"),
		PlainTextObject("Cancel"),
	)
}

// callTarget says in one line what a call acts on: an HTTP request's
// method and the URL it dials, or the arguments as compact JSON.
func callTarget(c agent.Call) string {
	args := ShownArgs(c)
	if c.Tool == tools.HTTPRequestName {
		var a struct {
			Method string `json:"method"`
			URL    string `json:"url"`
		}
		if json.Unmarshal(args, &a) == nil && a.URL != "" && !hasInvisible(string(args)) {
			shown, _ := DialledURL(a.URL)
			return strings.TrimSpace(a.Method + " " + shown)
		}
	}
	var b bytes.Buffer
	if json.Compact(&b, args) == nil {
		return visibleJSON(b.String())
	}
	return visibleJSON(string(args))
}

// ApproverMention mentions a Slack user, or a user group (tools.IsGroupID).
func ApproverMention(id string) string {
	if tools.IsGroupID(id) {
		return "<!subteam^" + id + ">"
	}
	return UserMention(id)
}

// MentionList mentions people and groups, "a, b and c", within budget
// characters: those past it are counted, not named.
func MentionList(ids []string, budget int) string {
	var names []string
	used := 0
	for i, id := range ids {
		m := ApproverMention(id)
		if used+len(m)+2 > budget-20 && i < len(ids)-1 {
			names = append(names, fmt.Sprintf("%d more", len(ids)-i))
			break
		}
		names = append(names, m)
		used += len(m) + 2
	}
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
