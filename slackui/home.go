package slackui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/mcpauth"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/tools"
)

// The Home tab's view: each person's inbox, the calls that wait for
// their decision across channels, newest first, with the buttons of the
// calls' cards (the same action IDs and values, so that a click is
// decided like a click on the card), and what they decided lately.
// Package handlers publishes it.

// Limits of the Home view: Slack allows 100 blocks in it (the
// connections take up to 12, homeconn.go).
const (
	HomeMaxCalls  = 15 // calls shown, 4 blocks each
	HomeMaxRecent = 10 // recent decisions shown, one block each
	// budgetSummary is a call's arguments in the view (its card shows
	// all of them).
	budgetSummary = 1500
)

// HomeContent is what a Home view shows.
type HomeContent struct {
	// Calls wait for the viewer, newest first; Refs are their buttons'
	// values; More says there are more than those.
	Calls []runner.Waiting
	Refs  []string
	More  bool
	// Recent are the viewer's recent decisions, newest first.
	Recent []runner.DecisionRecord
	// Notice, if set, is shown first: what became of the last click.
	Notice string
	// TeamURL is the workspace's URL, for links to threads (default
	// https://slack.com/).
	TeamURL string
	// Connections are the servers that run calls with the viewer's own
	// account, and their connection to each (homeconn.go).
	Connections []mcpauth.Personal
}

// HomeView is the Home tab of a person: the calls waiting for them, each
// with its tool, a summary of its arguments (credentials masked), who
// asked, where, how long it has waited, a link to its thread and the
// buttons of its card; then what they decided lately. now is the clock
// waiting times are measured by.
func HomeView(hc HomeContent, now time.Time) slack.HomeTabViewRequest {
	blocks := []slack.Block{HeaderBlock("Waiting for your decision")}
	if hc.Notice != "" {
		blocks = append(blocks, SectionBlock("⚠️ "+ClipText(hc.Notice, BudgetError)))
	}
	switch n := len(hc.Calls); {
	case n == 0:
		blocks = append(blocks, ContextBlock("Nothing waits for you. Tool calls that need your approval show up here, from every channel, with the buttons of their cards."))
	case hc.More:
		blocks = append(blocks, ContextBlock(fmt.Sprintf("The %d newest of the calls waiting for you; the others wait in their threads.", n)))
	case n == 1:
		blocks = append(blocks, ContextBlock("1 call waits for you."))
	default:
		blocks = append(blocks, ContextBlock(fmt.Sprintf("%d calls wait for you, newest first.", n)))
	}
	for i, w := range hc.Calls {
		summary, clipped := homeSummary(w.AgentCall)
		blocks = append(blocks,
			slack.NewDividerBlock(),
			SectionBlock("*Approval needed:* "+CodeSpan(w.Tool)+"\n"+summary),
			ContextBlock(homeCallLine(w, hc.TeamURL, now)),
		)
		// The buttons of the call's card: those its rule offers, and
		// Approve asking first where the card's does.
		var confirm *slack.ConfirmationBlockObject
		if w.Gate != nil && w.Gate.Confirm {
			confirm = approveConfirm(w.AgentCall, *w.Gate)
		}
		buttons := []slack.BlockElement{withClippedConfirm(Button(ActionApprove, "Approve", hc.Refs[i], slack.StylePrimary), w.AgentCall, clipped, confirm)}
		if w.Gate == nil || w.Gate.Offers(agent.Edit) {
			buttons = append(buttons, Button(ActionEdit, "Edit", hc.Refs[i], slack.StyleDefault))
		}
		if w.Gate == nil || w.Gate.Offers(agent.Reject) {
			buttons = append(buttons, Button(ActionReject, "Reject", hc.Refs[i], slack.StyleDanger))
		}
		if clipped {
			buttons = append(buttons, Button(ActionShowArgs, "Show all", hc.Refs[i], slack.StyleDefault))
		}
		blocks = append(blocks, slack.NewActionBlock(fmt.Sprintf("%s_%d", BlockCallActions, i), buttons...))
	}
	blocks = append(blocks, slack.NewDividerBlock(), HeaderBlock("You decided lately"))
	if len(hc.Recent) == 0 {
		blocks = append(blocks, ContextBlock("Nothing yet."))
	}
	for _, d := range hc.Recent[:min(len(hc.Recent), HomeMaxRecent)] {
		blocks = append(blocks, ContextBlock(recentLine(d, hc.TeamURL)))
	}
	blocks = append(blocks, homeConnections(hc.Connections)...)
	return slack.HomeTabViewRequest{Type: slack.VTHomeTab, Blocks: slack.Blocks{BlockSet: blocks}}
}

// homeCallLine says who asked for a call, where, how long it has waited,
// the hash an approval binds to, and links its thread.
func homeCallLine(w runner.Waiting, teamURL string, now time.Time) string {
	parts := []string{"Requested by " + UserMention(w.Requester)}
	if w.Channel != "" {
		parts[0] += " in " + ChannelMention(w.Channel)
	}
	if !w.Since.IsZero() {
		parts = append(parts, "waiting "+agoText(now.Sub(w.Since))+" (since "+Date(w.Since)+")")
	}
	if !w.Expires.IsZero() {
		parts = append(parts, "expires "+UntilText(w.Expires.Sub(now)))
	}
	parts = append(parts, "🔏 "+CodeSpan("sha256:"+tools.ShortHash(w.AgentCall.RunHash())))
	if link := threadLink(w.Thread, teamURL); link != "" {
		parts = append(parts, "<"+link+"|Open the thread>")
	}
	return strings.Join(parts, " · ")
}

// recentLine is one of a person's recent decisions.
func recentLine(d runner.DecisionRecord, teamURL string) string {
	var what string
	switch d.Kind {
	case agent.Approve:
		what = "✅ Approved"
	case agent.Edit:
		what = "✏️ Edited and approved"
	case agent.Reject:
		what = "🚫 Rejected"
	case agent.Respond:
		what = "💬 Rejected with a reply"
	case agent.MarkDone:
		what = "☑️ Marked done"
	default:
		what = slackEscape(d.Kind.Past())
	}
	line := what + " " + CodeSpan(d.Tool)
	if d.Channel != "" {
		line += " in " + ChannelMention(d.Channel)
	}
	if !d.At.IsZero() {
		line += " · " + Date(d.At)
	}
	if link := threadLink(d.Thread, teamURL); link != "" {
		line += " · <" + link + "|thread>"
	}
	if r := strings.TrimSpace(d.Reason); r != "" {
		line += " — " + ClipText(slackEscape(OneLine(r)), 150)
	}
	return line
}

// homeSummary is a call's target and arguments, credentials masked: for
// http_request the method and the URL as dialled, and whether it sends
// headers or a body; for another tool its arguments as JSON. clipped says
// something was left out, which "Show all" then shows.
func homeSummary(c agent.Call) (text string, clipped bool) {
	args := ShownArgs(c)
	if c.Tool == tools.HTTPRequestName {
		var a struct {
			Method  string            `json:"method"`
			URL     string            `json:"url"`
			Headers map[string]string `json:"headers"`
			Body    *string           `json:"body"`
		}
		if json.Unmarshal(args, &a) == nil && !hasInvisible(string(args)) {
			shown, _ := DialledURL(a.URL)
			target := a.Method + " " + shown
			code, n := FitCode(target, budgetSummary)
			clipped = n < len([]rune(target))
			var extra []string
			if len(a.Headers) == 1 {
				extra = append(extra, "1 header")
			} else if len(a.Headers) > 1 {
				extra = append(extra, fmt.Sprintf("%d headers", len(a.Headers)))
			}
			if a.Body != nil {
				extra = append(extra, "a body")
			}
			if len(extra) > 0 {
				code += "\n_with " + strings.Join(extra, " and ") + ": *Show all* shows them_"
				clipped = true
			}
			return code, clipped
		}
	}
	var b bytes.Buffer
	if json.Compact(&b, args) != nil {
		b.Reset()
		b.Write(args)
	}
	if b.Len() == 0 {
		return "_no arguments_", false
	}
	text = visibleJSON(b.String())
	code, n := FitCode(text, budgetSummary)
	return code, n < len([]rune(text))
}

// agoText says how long ago something began.
func agoText(d time.Duration) string {
	d = d.Round(time.Minute)
	switch {
	case d < time.Minute:
		return "less than a minute"
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d.Minutes()))
	case d < 48*time.Hour:
		h, m := int(d.Hours()), int(d.Minutes())%60
		if m == 0 {
			return fmt.Sprintf("%dh", h)
		}
		return fmt.Sprintf("%dh %dm", h, m)
	}
	return fmt.Sprintf("%d days", int(d.Hours()/24))
}

// ChannelMention links a channel ID; anything else is shown as text.
func ChannelMention(id string) string {
	for _, r := range id {
		if (r < 'A' || r > 'Z') && (r < '0' || r > '9') {
			return ClipText(slackEscape(id), BudgetName)
		}
	}
	if id == "" || len(id) > BudgetName {
		return "_a channel_"
	}
	return "<#" + id + ">"
}

// threadLink is the URL of a thread's root message, or "" if the thread
// is not a Slack one.
func threadLink(thread, teamURL string) string {
	_, channel, ts, err := ParseThread(thread)
	if err != nil || strings.ContainsAny(channel+ts, "<>|& /?#") {
		return ""
	}
	if teamURL == "" {
		teamURL = "https://slack.com/"
	}
	return strings.TrimSuffix(teamURL, "/") + "/archives/" + channel + "/p" + strings.ReplaceAll(ts, ".", "")
}
