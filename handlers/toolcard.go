package handlers

import "github.com/countersign/countersign/slackui"

// ToolLookup finds a tool by the name the model calls it (slackui.ToolLookup).
type ToolLookup = slackui.ToolLookup

// WithTools makes the reporter name, on approval cards, the MCP server and
// tool behind a call, with the tool's description and annotations.
func (r *Reporter) WithTools(box ToolLookup) *Reporter {
	r.tools = box
	return r
}
