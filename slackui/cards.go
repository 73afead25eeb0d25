package slackui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/tools"
)

// The identifiers of the cards' buttons and the modals' fields, which the
// interaction handlers dispatch on. The approval buttons' action IDs are a
// public contract (docs/architecture.md, Contracts): tests outside the repository click them.
const (
	// Buttons of a pending call's card.
	ActionApprove = "approve"
	ActionEdit    = "edit"
	ActionReject  = "reject"
	// Buttons of a call whose outcome is unknown: Retry is an approval,
	// Skip a rejection, Mark done a MarkDone decision.
	ActionRetry    = "retry"
	ActionMarkDone = "mark_done"
	ActionSkip     = "skip"
	// The button of a run that stopped with an error.
	ActionRetryRun = "retry_run"

	// The modals' callback IDs.
	CallbackEdit   = "edit_call"
	CallbackReject = "reject_call"

	// The modals' input blocks and their plain_text_input action IDs:
	// a submission's values are at View.State.Values[Block…][Input…].
	BlockArgs   = "args"
	InputArgs   = "args_input"
	BlockReason = "reason"
	InputReason = "reason_input"

	// The actions blocks of the cards.
	BlockCallActions = "call_actions"
	BlockRunActions  = "run_actions"
)

// Limits of the modals' inputs.
const (
	// MaxArgsLen is the longest JSON the edit modal holds: Slack's limit
	// for a plain_text_input. Longer arguments cannot be edited in Slack.
	MaxArgsLen = 3000
	// MaxReasonLen is the longest rejection reason the reject modal takes.
	MaxReasonLen = 2000
)

// How much of Slack's Block Kit limits each part of a card may use, in
// characters, with margins. Slack allows 3000 characters in a section's
// text or a context element, 2000 in a section field, 150 in a header and
// 50 blocks in a message; no card has more than 8 blocks. Every text built
// here is measured in UTF-16 code units, which is never less than its
// count of Unicode characters, so a text within a limit is within it
// whichever way Slack counts; escaped text (&amp; and the like) is
// measured escaped. The tests check every card against Slack's limits.
const (
	budgetHeader   = 140  // header text (limit 150)
	budgetCode     = 2700 // a code block's content, without its fences (section limit 3000)
	budgetDiff     = 1500 // the lines of an edit's diff, in a code block
	budgetDiffLine = 300  // one value in the diff
	BudgetReason   = 1200 // the model's reason, before quoting (which at most doubles it)
	budgetDecision = 1000 // a rejection's reason on a settled card
	budgetResult   = 500  // the first line of a tool's result
	BudgetError    = 2500 // the error on an error card
	BudgetName     = 100  // a user ID or tool name inside other text
	BudgetCardText = 300  // the notification text
)

// The outcome-unknown card's explanation.
const unknownCallText = "⚠️ The bot stopped while this call was running, so it may or may not have taken effect. " +
	"Check, then choose: *Retry* runs it again, *Mark done* records it as done without running it, " +
	"*Skip* tells the model it was not run again."

// ApprovalCard is the card of a call waiting for a person: for a pending
// call, its tool, arguments, requester, the model's reason, its deadline
// and the Approve, Edit and Reject buttons; for a call whose outcome is
// unknown (the bot stopped while it ran), an explanation and the Retry,
// Mark done and Skip buttons. Every button's value is ref, which must fit
// Slack's 2000 characters for a button value. now is the clock the
// deadline is shown relative to.
func ApprovalCard(c agent.Call, requester string, ref string, now time.Time) []slack.Block {
	if c.Status == agent.Unknown {
		blocks := []slack.Block{
			HeaderBlock("Outcome unknown: " + c.Tool),
			SectionBlock(unknownCallText),
		}
		args, clipped := argsCardBlocks(c, ref)
		blocks = append(blocks, args...)
		blocks = append(blocks, requestBlocks(c, requester, time.Time{})...)
		return append(blocks, slack.NewActionBlock(BlockCallActions,
			withClippedConfirm(Button(ActionRetry, "Retry", ref, slack.StylePrimary), c, clipped, nil),
			Button(ActionMarkDone, "Mark done", ref, slack.StyleDefault),
			Button(ActionSkip, "Skip", ref, slack.StyleDanger),
		))
	}
	blocks := []slack.Block{HeaderBlock("Approval needed: " + c.Tool)}
	args, clipped := argsCardBlocks(c, ref)
	blocks = append(blocks, args...)
	blocks = append(blocks, requestBlocks(c, requester, now)...)
	return append(blocks, slack.NewActionBlock(BlockCallActions,
		withClippedConfirm(Button(ActionApprove, "Approve", ref, slack.StylePrimary), c, clipped, nil),
		Button(ActionEdit, "Edit", ref, slack.StyleDefault),
		Button(ActionReject, "Reject", ref, slack.StyleDanger),
	))
}

// SettledCard is a call's card once a decision was made or the call made
// progress: the decision, the call's progress, what an edit changed, and
// the arguments it runs with, without buttons. The decision's time is
// c.Decision.At, or now if that is not set.
func SettledCard(c agent.Call, requester string, now time.Time) []slack.Block {
	var lines []string
	if l := decisionLine(c, now); l != "" {
		lines = append(lines, l)
	}
	if c.EditedBy != "" && c.Decision != nil && c.Decision.Kind != agent.Edit {
		lines = append(lines, "✏️ The arguments were edited by "+UserMention(c.EditedBy)+" before the approvals")
	}
	if l := progressLine(c); l != "" {
		lines = append(lines, l)
	}
	blocks := []slack.Block{HeaderBlock("Tool call: " + c.Tool)}
	if len(lines) > 0 {
		blocks = append(blocks, SectionBlock(strings.Join(lines, "\n")))
	}
	if c.Editor() != "" {
		blocks = append(blocks, SectionBlock("*What changed*\n"+codeFence(argsDiff(tools.MaskSecrets(c.Tool, c.Args), ShownArgs(c)), budgetDiff+budgetDiffLine)))
	}
	view, _ := argsView(c)
	blocks = append(blocks, view...)
	blocks = append(blocks, hashLine(c))
	return append(blocks, requestBlocks(c, requester, time.Time{})...)
}

// CardText is the plain notification text of a call's card, for the text
// field of chat.postMessage and chat.update.
func CardText(c agent.Call) string {
	tool := c.Tool
	if tool == "" {
		tool = "a tool call"
	}
	var text string
	switch {
	case c.Status == agent.Pending && c.Decision != nil:
		// Decided, and not yet applied: the card shows the decision.
		text = tool + ": " + c.Decision.Kind.Past()
	case c.Status == agent.Pending:
		text = "Approval needed: " + tool
	case c.Status == agent.Unknown:
		text = "Outcome unknown: " + tool
	default:
		text = tool + ": " + callStatusWord(c)
	}
	return ClipText(slackEscape(text), BudgetCardText)
}

// ErrorCard is the message of a run that stopped with an error, with a
// Retry button whose value is ref.
func ErrorCard(errText string, ref string) []slack.Block {
	return []slack.Block{
		SectionBlock("⚠️ The run stopped: " + ClipText(slackEscape(OneLine(errText)), BudgetError)),
		slack.NewActionBlock(BlockRunActions, Button(ActionRetryRun, "Retry", ref, slack.StylePrimary)),
	}
}

// FinalErrorCard is the message of a run that stopped with an error a
// retry cannot fix (runner.Event.Final): no Retry button, and what to do
// instead.
func FinalErrorCard(errText string) []slack.Block {
	return []slack.Block{
		SectionBlock("⚠️ The run stopped: " + ClipText(slackEscape(OneLine(errText)), BudgetError)),
		ContextBlock("Retrying would fail the same way, so this run can't be retried. " + TextFinalAdvice),
	}
}

// EditModal is the form that edits a pending call's arguments: one
// multiline input (block BlockArgs, action InputArgs) holding the
// arguments as pretty JSON; submitting it approves the call with the
// edited arguments. ref is the modal's private metadata (at most 3000
// characters).
//
// Slack's inputs hold at most MaxArgsLen characters. Arguments whose
// pretty JSON is longer are offered compact; if even that is too long the
// modal has no input and no submit button — it explains that the
// arguments cannot be edited in Slack and only closes.
func EditModal(c agent.Call, ref string) slack.ModalViewRequest {
	view := slack.ModalViewRequest{
		Type:            slack.VTModal,
		Title:           PlainTextObject("Edit arguments"),
		Close:           PlainTextObject("Cancel"),
		CallbackID:      CallbackEdit,
		PrivateMetadata: ref,
	}
	toolLine := ContextBlock("Tool: " + CodeSpan(c.Tool))
	args, ok := editableArgs(c.RunArgs())
	if !ok {
		view.Close = PlainTextObject("Close")
		view.Blocks.BlockSet = []slack.Block{
			toolLine,
			SectionBlock(fmt.Sprintf("The arguments are %s characters long, and a text field in Slack holds at most %s, so they cannot be edited here. "+
				"Approve or reject the call as it stands, or reply in the thread to tell the agent what to change.",
				withCommas(slackLen(string(indentJSON(c.RunArgs())))), withCommas(MaxArgsLen))),
		}
		return view
	}
	input := slack.NewPlainTextInputBlockElement(nil, InputArgs).
		WithMultiline(true).
		WithMaxLength(MaxArgsLen).
		WithInitialValue(args)
	input.FocusOnLoad = true
	view.Submit = PlainTextObject("Approve")
	hint := "Submitting approves the call with these arguments. They must be valid JSON that fits the tool."
	if c.Quorum() > 1 {
		// Several people approve this call: an edit is a proposal.
		view.Submit = PlainTextObject("Propose")
		hint = fmt.Sprintf("Submitting replaces the arguments and resets the approvals: the call then runs once %d people approve the new ones on its card (you may be one). "+
			"They must be valid JSON that fits the tool.", c.Quorum())
	}
	view.Blocks.BlockSet = []slack.Block{
		toolLine,
		slack.NewInputBlock(BlockArgs, PlainTextObject("Arguments (JSON)"), PlainTextObject(hint), input),
	}
	return view
}

// RejectModal is the form that rejects a pending call: one optional
// multiline input (block BlockReason, action InputReason) for the reason,
// which the model is told. ref is the modal's private metadata.
func RejectModal(c agent.Call, ref string) slack.ModalViewRequest {
	input := slack.NewPlainTextInputBlockElement(PlainTextObject("What should the agent do instead?"), InputReason).
		WithMultiline(true).
		WithMaxLength(MaxReasonLen)
	input.FocusOnLoad = true
	view := slack.ModalViewRequest{
		Type:            slack.VTModal,
		Title:           PlainTextObject("Reject call"),
		Submit:          PlainTextObject("Reject"),
		Close:           PlainTextObject("Cancel"),
		CallbackID:      CallbackReject,
		PrivateMetadata: ref,
	}
	view.Blocks.BlockSet = []slack.Block{
		ContextBlock("Tool: " + CodeSpan(c.Tool)),
		slack.NewInputBlock(BlockReason, PlainTextObject("Reason"),
			PlainTextObject("The call is not run. The model is told who rejected it and why, and may try something else."), input).
			WithOptional(true),
	}
	return view
}

// ShownArgs are the arguments a call runs with, as people see them: with
// credentials masked.
func ShownArgs(c agent.Call) json.RawMessage { return tools.MaskSecrets(c.Tool, c.RunArgs()) }

// argsCardBlocks shows a waiting call's arguments, the hash an approval
// binds to, and a "Show all" button if the arguments were shortened
// (clipped).
func argsCardBlocks(c agent.Call, ref string) (blocks []slack.Block, clipped bool) {
	blocks, clipped = argsView(c)
	if clipped {
		blocks = append(blocks, showAllBlock(ref))
	}
	return append(blocks, hashLine(c)), clipped
}

// withClippedConfirm gives the button that runs a call whose arguments
// the card shows only in part (clipped) a confirmation that says so:
// approving is then a choice made knowing that not all was seen, never
// a click on what looked whole. confirm is the button's confirmation
// otherwise (nil for none), which the warning then ends.
func withClippedConfirm(b *slack.ButtonBlockElement, c agent.Call, clipped bool, confirm *slack.ConfirmationBlockObject) *slack.ButtonBlockElement {
	if !clipped {
		if confirm != nil {
			b = b.WithConfirm(confirm)
		}
		return b
	}
	const warning = "Not all of the arguments are shown here: Show all shows every character."
	if confirm == nil {
		confirm = slack.NewConfirmationBlockObject(
			PlainTextObject(ClipText(OneLine(b.Text.Text+" "+c.Tool+"?"), budgetConfirmTitle)),
			PlainTextObject(warning),
			PlainTextObject(b.Text.Text),
			PlainTextObject("Cancel"),
		)
		return b.WithConfirm(confirm)
	}
	text := *confirm.Text
	text.Text = ClipText(text.Text, budgetConfirmText-len(warning)-1) + " " + warning
	confirm.Text = &text
	return b.WithConfirm(confirm)
}

// requestBlocks says who asked for the call, until when it waits (if
// expiresFrom is set: the deadline is shown relative to it) and what the
// model said alongside it.
func requestBlocks(c agent.Call, requester string, expiresFrom time.Time) []slack.Block {
	fields := []*slack.TextBlockObject{mrkdwnText("*Requested by*\n" + UserMention(requester))}
	if !expiresFrom.IsZero() {
		deadline := "no deadline"
		if !c.Expires.IsZero() {
			deadline = Date(c.Expires) + " (" + UntilText(c.Expires.Sub(expiresFrom)) + ")"
		}
		fields = append(fields, mrkdwnText("*Expires*\n"+deadline))
	}
	blocks := []slack.Block{slack.NewSectionBlock(nil, fields, nil)}
	if reason := strings.TrimSpace(c.Reason); reason != "" {
		quoted := "> " + strings.ReplaceAll(ClipText(slackEscape(reason), BudgetReason), "\n", "\n> ")
		blocks = append(blocks, SectionBlock("*Why the model asks*\n"+quoted))
	}
	return blocks
}

// decisionLine is the settled card's first line: who decided what, when.
func decisionLine(c agent.Call, now time.Time) string {
	d := c.Decision
	if d == nil {
		switch {
		case c.Status == agent.Expired:
			return "⌛ Expired — nobody decided in time"
		case !c.NeedsApproval:
			return "▶️ Runs without approval: the policy allows this tool"
		}
		return ""
	}
	at := d.At
	if at.IsZero() {
		at = now
	}
	by := UserMention(d.By) + " at " + Date(at)
	switch d.Kind {
	case agent.Approve:
		if len(d.Approvals) > 1 {
			return "✅ Approved by " + MentionList(d.Approvers(), BudgetMentions) + " at " + Date(at)
		}
		if earlierRuns(c) > 0 {
			return "🔁 Retry approved by " + by
		}
		return "✅ Approved by " + by
	case agent.Edit:
		return "✏️ Edited and approved by " + by
	case agent.Reject:
		line := "🚫 Rejected by " + by
		if c.Attempts > 0 {
			line = "⏭️ Skipped by " + by
		}
		return line + reasonSuffix(d.Reason)
	case agent.Respond:
		return "💬 Rejected by " + by + " with a reply in the thread" + reasonSuffix(d.Reason)
	case agent.MarkDone:
		return "☑️ Marked done by " + by
	case agent.Expire:
		return "⌛ Expired — nobody decided in time"
	}
	return slackEscape(d.Kind.Past()) + " by " + by
}

// progressLine says how the call's run stands.
func progressLine(c agent.Call) string {
	switch c.Status {
	case agent.Running:
		return "⏳ Running…"
	case agent.Asking:
		return askingLine(c.Input)
	case agent.Done:
		if c.Decision != nil && c.Decision.Kind == agent.MarkDone {
			return "" // the decision line says it all
		}
		if l := resultLine(c); l != "" {
			return "✔️ Done: " + l
		}
		return "✔️ Done"
	case agent.Failed:
		if l := resultLine(c); l != "" {
			return "❌ Failed: " + l
		}
		return "❌ Failed"
	}
	return ""
}

// askingLine says what a call paused between its attempts waits for,
// and for whom: a person's answers to its server's questions, or their
// connection to its server (auth: requester).
func askingLine(in *agent.CallInput) string {
	switch {
	case in == nil:
		return "✋ Waiting for input"
	case in.Connect != "":
		return "🔌 Waiting for " + UserMention(in.Of) + " to connect to " + ClipText(slackEscape(OneLine(in.Connect)), BudgetName)
	case len(in.Requests) == 1:
		return "✋ Waiting for " + UserMention(in.Of) + "'s answer to the server's question"
	}
	return "✋ Waiting for " + UserMention(in.Of) + "'s answers to the server's questions"
}

// resultLine is the first line of a call's result that says something:
// not the note the agent adds about edited arguments, nor its "Error: "
// prefix.
func resultLine(c agent.Call) string {
	lines := strings.Split(c.Result, "\n")
	if c.Editor() != "" && len(lines) > 1 && strings.HasPrefix(lines[0], "Note: ") {
		lines = lines[1:]
	}
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" {
			l = strings.TrimPrefix(l, "Error: ")
			return ClipText(slackEscape(l), budgetResult)
		}
	}
	return ""
}

// callStatusWord is a call's status for the notification text.
func callStatusWord(c agent.Call) string {
	switch c.Status {
	case agent.Approved:
		if earlierRuns(c) > 0 {
			return "retry approved"
		}
		return "approved"
	case agent.Edited:
		return "edited and approved"
	case agent.Rejected:
		if c.Attempts > 0 {
			return "skipped"
		}
		return "rejected"
	case agent.Done:
		if c.Decision != nil && c.Decision.Kind == agent.MarkDone {
			return "marked done"
		}
	case agent.Asking:
		if c.Input != nil && c.Input.Connect != "" {
			return "waiting for a connection"
		}
		return "waiting for input"
	}
	return c.Status.String()
}

// earlierRuns counts the times the call was started before its current
// run (or before the run about to start; a call that asks was started
// for the run that asked): more than zero means the call is being
// retried after its outcome was unknown.
func earlierRuns(c agent.Call) int {
	switch c.Status {
	case agent.Running, agent.Done, agent.Failed, agent.Asking:
		return c.Attempts - 1
	}
	return c.Attempts
}

func reasonSuffix(reason string) string {
	if reason = strings.TrimSpace(reason); reason == "" {
		return ""
	}
	return ": " + ClipText(slackEscape(OneLine(reason)), budgetDecision)
}

// argsDiff lists what an edit changed in the arguments' top-level keys,
// one line per key in key order: "+ key: value" added, "- key" removed,
// "~ key: old → new" changed. Arguments that are not both JSON objects
// are compared whole.
func argsDiff(before, after json.RawMessage) string {
	var old, edited map[string]json.RawMessage
	if json.Unmarshal(before, &old) != nil || json.Unmarshal(after, &edited) != nil || old == nil || edited == nil {
		if canonicalJSON(before) == canonicalJSON(after) {
			return "no changes"
		}
		o, e := diffValues(canonicalJSON(before), canonicalJSON(after))
		return "~ " + o + " → " + e
	}
	keys := make([]string, 0, len(old)+len(edited))
	for k := range old {
		keys = append(keys, k)
	}
	for k := range edited {
		if _, ok := old[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var lines []string
	for _, k := range keys {
		o, inOld := old[k]
		e, inEdited := edited[k]
		name := ClipText(strconv.Quote(k), BudgetName)
		switch {
		case !inOld:
			lines = append(lines, "+ "+name+": "+ClipText(canonicalJSON(e), budgetDiffLine))
		case !inEdited:
			lines = append(lines, "- "+name)
		case canonicalJSON(o) != canonicalJSON(e):
			o, e := diffValues(canonicalJSON(o), canonicalJSON(e))
			lines = append(lines, "~ "+name+": "+o+" → "+e)
		}
	}
	if len(lines) == 0 {
		return "no changes"
	}
	var b strings.Builder
	for i, l := range lines {
		more := fmt.Sprintf("… and %d more", len(lines)-i)
		if slackLen(b.String())+slackLen(l)+1 > budgetDiff-slackLen(more) {
			b.WriteString(more)
			break
		}
		b.WriteString(l + "\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// diffContext is how many characters before the first difference of two
// long values the diff shows.
const diffContext = 40

// diffValues are a changed value before and after, each shortened to
// budgetDiffLine characters so that the change shows: where the two
// first differ past what a cut at the start would keep, both are shown
// from a little before that point, after "…". A change at the end of a
// long value is not cut off, leaving two values that read the same.
func diffValues(before, after string) (string, string) {
	b, a := []rune(before), []rune(after)
	first := 0
	for first < len(b) && first < len(a) && b[first] == a[first] {
		first++
	}
	if first < budgetDiffLine-diffContext || slackLen(before) <= budgetDiffLine && slackLen(after) <= budgetDiffLine {
		return ClipText(before, budgetDiffLine), ClipText(after, budgetDiffLine)
	}
	from := first - diffContext
	return "…" + ClipText(string(b[from:]), budgetDiffLine-1), "…" + ClipText(string(a[from:]), budgetDiffLine-1)
}

// canonicalJSON is a JSON value in compact form with object keys sorted, so
// that equal values compare equal, its invisible characters escaped
// (visibleJSON); invalid JSON is returned as it is, escaped the same way.
func canonicalJSON(raw json.RawMessage) string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return visibleJSON(string(raw))
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return visibleJSON(string(raw))
	}
	return visibleJSON(strings.TrimSuffix(b.String(), "\n"))
}

// indentJSON indents JSON with two spaces, its invisible characters
// escaped (visibleJSON); invalid JSON is returned as it is, escaped the
// same way.
func indentJSON(raw json.RawMessage) []byte {
	var b bytes.Buffer
	if err := json.Indent(&b, bytes.TrimSpace(raw), "", "  "); err != nil {
		return []byte(visibleJSON(string(raw)))
	}
	return []byte(visibleJSON(b.String()))
}

// editableArgs is the text the edit modal's input starts with: the pretty
// JSON of args, or the compact JSON if only that fits; ok is false if
// neither fits.
func editableArgs(args json.RawMessage) (string, bool) {
	if len(bytes.TrimSpace(args)) == 0 {
		return "{}", true
	}
	if pretty := strings.ToValidUTF8(string(indentJSON(args)), "\uFFFD"); slackLen(pretty) <= MaxArgsLen {
		return pretty, true
	}
	var b bytes.Buffer
	if json.Compact(&b, args) == nil {
		if compact := strings.ToValidUTF8(visibleJSON(b.String()), "\uFFFD"); slackLen(compact) <= MaxArgsLen {
			return compact, true
		}
	}
	return "", false
}

func HeaderBlock(text string) *slack.HeaderBlock {
	return slack.NewHeaderBlock(PlainTextObject(ClipText(OneLine(text), budgetHeader)))
}

func SectionBlock(text string) *slack.SectionBlock {
	return slack.NewSectionBlock(mrkdwnText(text), nil, nil)
}

func ContextBlock(text string) *slack.ContextBlock {
	return slack.NewContextBlock("", mrkdwnText(text))
}

func Button(actionID, text, value string, style slack.Style) *slack.ButtonBlockElement {
	return slack.NewButtonBlockElement(actionID, value, PlainTextObject(text)).WithStyle(style)
}

func PlainTextObject(text string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.PlainTextType, PlainText(text), true, false)
}

// mrkdwnText is a verbatim mrkdwn text: Slack does not turn bare URLs, channel
// names or "@here" into links and mentions; the mentions built here with
// <@…> and <!date…> still work.
func mrkdwnText(text string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.MarkdownType, text, false, true)
}
