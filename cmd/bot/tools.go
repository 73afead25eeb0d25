package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/bot"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/tools"
)

// runTools lists every tool the bot would offer the model under
// BOT_POLICY: its source (built-in or an MCP server), a summary of its
// arguments, and its effective rule. It starts the policy's MCP servers to
// ask for their tools, and reports those that are down.
func runTools(ctx context.Context, args []string, e env) error {
	fs := flags("tools", "tools", e)
	if err := parse(fs, args, e); err != nil {
		return err
	}
	e, flush := escapedTerminal(e) // names and errors come from MCP servers
	defer flush()
	return toolsCmd(ctx, e.getenv, e.stdout, e.stderr)
}

func toolsCmd(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer) error {
	// Servers that are down are reported below the list; their retries
	// are not news here.
	log, err := newLogger(getenv, stderr, logrus.ErrorLevel)
	if err != nil {
		return err
	}
	box, _, err := bot.NewToolbox(getenv, log)
	if err != nil {
		return err
	}
	defer box.Close()
	// The model tells which tools it would leave out; building it asks
	// no provider anything.
	model, modelErr := llm.FromEnvWithLogger(getenv, log)
	box.Wait(ctx)

	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TOOL\tSOURCE\tARGUMENTS\tRULE")
	for _, t := range box.Tools() {
		_, rule, _ := box.Lookup(t.Name())
		source := "built-in"
		if ot, ok := t.(tools.OriginTool); ok {
			o := ot.Origin()
			source = "mcp " + o.Server + ": " + o.Tool
			if len(o.Hints) > 0 {
				trust := "untrusted"
				if o.Trusted {
					trust = "trusted"
				}
				source += " (" + strings.Join(o.Hints, ", ") + "; " + trust + ")"
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", t.Name(), source, schemaSummary(t.Schema()), ruleSummary(rule))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, st := range box.Status() {
		if st.Err != "" {
			fmt.Fprintf(stdout, "\nMCP server %s is %s, its tools are not listed: %s\n  (%s)\n", st.Name, st.State, st.Err, st.Endpoint)
		}
		if len(st.LeftOut) > 0 {
			fmt.Fprintf(stdout, "\nMCP server %s lists these tools, which are not offered:\n", st.Name)
			for _, l := range st.LeftOut {
				fmt.Fprintf(stdout, "  %s: %s\n", quotedName(l.Tool), l.Why)
			}
		}
	}
	if modelErr != nil {
		fmt.Fprintf(stdout, "\nThe model is not configured, so the tools it would leave out are not known: %v\n", modelErr)
		return nil
	}
	if left := leftOut(model, box.Tools()); len(left) > 0 {
		fmt.Fprintf(stdout, "\nThe model (%s) is not offered these tools:\n", model.Name())
		for _, l := range left {
			fmt.Fprintf(stdout, "  %s\n", l)
		}
	}
	return nil
}

// leftOut says which of offered the model leaves out of its requests
// (see llm.ToolChecker), one line a tool: its name, where it comes from
// and why. MCP servers' tools come and go, so it is asked each time the
// list is shown, with the tools offered then.
func leftOut(model llm.Model, offered []tools.Tool) []string {
	checker, ok := model.(llm.ToolChecker)
	if !ok {
		return nil
	}
	defs := make([]llm.ToolDef, 0, len(offered))
	source := map[string]string{}
	for _, t := range offered {
		// As the agent offers them.
		defs = append(defs, llm.ToolDef{Name: t.Name(), Description: t.Description(), Parameters: t.Schema()})
		source[t.Name()] = "built-in"
		if ot, ok := t.(tools.OriginTool); ok {
			o := ot.Origin()
			source[t.Name()] = "mcp " + o.Server + ": " + quotedName(o.Tool)
		}
	}
	var lines []string
	for _, l := range checker.CheckTools(defs) {
		lines = append(lines, fmt.Sprintf("%s (%s): %s", l.Tool, source[l.Tool], l.Reason))
	}
	return lines
}

// quotedName is a server's own name for its tool, quoted when it has
// characters that would end the line or hide in it (/readyz is not
// written through the terminal escaper).
func quotedName(name string) string {
	if strings.IndexFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(name)
	}
	return name
}

// schemaSummary shows an object schema's properties, required ones
// first: "url* method* body headers".
func schemaSummary(schema json.RawMessage) string {
	// The arguments the model is offered, wherever the schema puts them
	// (behind a top-level $ref, in anyOf or oneOf branches); a schema no
	// provider takes is read as it is (the tool is reported left out).
	if offered, err := llm.OfferedSchema(schema); err == nil {
		schema = offered
	}
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	if json.Unmarshal(schema, &s) != nil {
		return "?"
	}
	if len(s.Properties) == 0 {
		return "-"
	}
	var req, opt []string
	for _, name := range slices.Sorted(maps.Keys(s.Properties)) {
		if slices.Contains(s.Required, name) {
			req = append(req, name+"*")
		} else {
			opt = append(opt, name)
		}
	}
	out := strings.Join(append(req, opt...), " ")
	if len(out) > 60 {
		out = out[:57] + "..."
	}
	return out
}

// ruleSummary shows a rule in the policy file's words.
func ruleSummary(r tools.Rule) string {
	if !r.NeedsApproval() {
		return "approval: never"
	}
	parts := []string{"approval: required"}
	if len(r.Approvers) > 0 {
		parts = append(parts, "approvers: "+strings.Join(r.Approvers, ","))
	} else {
		parts = append(parts, "approvers: anyone")
	}
	if !r.SelfApproval {
		parts = append(parts, "self_approval: false")
	}
	parts = append(parts, "expires_after: "+shortDuration(r.ExpiresAfter))
	if r.Required() > 1 {
		parts = append(parts, fmt.Sprintf("approvals_required: %d", r.Required()))
	}
	if len(r.Decisions) > 0 {
		parts = append(parts, "decisions: "+strings.Join(r.Decisions, ","))
	}
	if r.Confirm {
		parts = append(parts, "confirm: true")
	}
	if len(r.AllowHosts) > 0 {
		parts = append(parts, "allow_hosts: "+strings.Join(r.AllowHosts, ","))
	}
	return strings.Join(parts, ", ")
}

// shortDuration writes 24h rather than 24h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
