package slackui

import (
	"strings"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/tools"
)

// ToolLookup finds a tool by the name the model calls it, to show where
// it comes from on its card. *mcp.Manager and *tools.Registry are
// ToolLookups.
type ToolLookup interface {
	Lookup(name string) (tools.Tool, tools.Rule, bool)
}

// budgetToolAbout is a tool's description on its card (a context
// element holds 3000).
const budgetToolAbout = 600

// ToolBlock says where a tool from outside the bot comes from: the MCP
// server and the tool's own name, its description (marked as the
// server's), and the server's
// annotations of it, marked as the server's word when the policy does
// not trust them (the MCP specification warns that they may be wrong).
// It returns nil for a built-in tool.
func ToolBlock(t tools.Tool) slack.Block {
	ot, ok := t.(tools.OriginTool)
	if !ok {
		return nil
	}
	o := ot.Origin()
	lines := []string{"MCP server *" + slackEscape(ClipText(o.Server, BudgetName)) + "* · tool " + CodeSpan(o.Tool)}
	if d := strings.TrimSpace(t.Description()); d != "" {
		// The server's words, on a line that says so: a description
		// cannot pass for a line of the bot's, such as the annotations
		// line below.
		lines = append(lines, "The server describes it: "+ClipText(slackEscape(OneLine(d)), budgetToolAbout))
	}
	if len(o.Hints) > 0 {
		who := "the server says (not verified)"
		if o.Trusted {
			who = "the server says (trusted by the policy)"
		}
		lines = append(lines, "Annotations — "+who+": "+strings.Join(o.Hints, ", "))
	}
	return ContextBlock(strings.Join(lines, "\n"))
}

// WithToolBlock puts the tool's ToolBlock below a card's header.
func WithToolBlock(blocks []slack.Block, box ToolLookup, name string) []slack.Block {
	if box == nil || len(blocks) == 0 {
		return blocks
	}
	t, _, ok := box.Lookup(name)
	if !ok {
		return blocks
	}
	b := ToolBlock(t)
	if b == nil {
		return blocks
	}
	return append(blocks[:1:1], append([]slack.Block{b}, blocks[1:]...)...)
}
