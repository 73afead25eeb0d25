package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/tools"
)

// StateVersion is the version of State's format, recorded in every
// checkpoint's fingerprint. Raise it only with an upgrade path: a thread
// saved under another version is not resumed.
const StateVersion = 1

// toolPart names a tool among the graph's fingerprint parts.
func toolPart(name string) string { return "tool:" + name }

// fixedToolbox is a Toolbox some of whose tools come and go with servers
// outside the bot (MCP servers, tools/mcp). Only its fixed tools are part
// of the fingerprint: the others are not known when the graph is compiled,
// change when their server says so, and are checked when a call is made
// (a tool that is gone or a server that is down is an error to the model).
type fixedToolbox interface {
	FixedTools() []tools.Tool
}

// fingerprinted adds to opts what a resume of the agent's graph depends on
// besides its shape: every tool's name and a hash of its schema, and the
// state's version.
func fingerprinted(opts graph.Options, box Toolbox) graph.Options {
	parts := maps.Clone(opts.Parts)
	if parts == nil {
		parts = map[string]string{}
	}
	ts := box.Tools
	if f, ok := box.(fixedToolbox); ok {
		ts = f.FixedTools
	}
	for _, t := range ts() {
		parts[toolPart(t.Name())] = schemaHash(t.Schema())
	}
	opts.Parts = parts
	if opts.StateVersion == 0 {
		opts.StateVersion = StateVersion
	}
	return opts
}

// schemaHash hashes a JSON schema in canonical form, so that formatting
// does not count as a change.
func schemaHash(schema json.RawMessage) string {
	b := []byte(schema)
	var v any
	if err := json.Unmarshal(schema, &v); err == nil {
		b, _ = json.Marshal(v) // object keys come out sorted
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:12]
}

// pendingTools names the tools of the calls that have yet to run or be
// reported: a resume depends on their schemas. Only tools among the
// fingerprint's parts count; the others (an MCP server's, see
// fixedToolbox) are checked when the call is made.
func pendingTools(parts map[string]string) func(s *State) []string {
	// The parts' names by tool, made once: this runs at every save. A
	// state mostly depends on one part at most: the list of that one
	// alone is made once too, and shared (the engine only reads it).
	named := map[string][]string{}
	for p := range parts {
		if tool, ok := strings.CutPrefix(p, toolPart("")); ok {
			named[tool] = []string{p}
		}
	}
	return func(s *State) []string {
		var out []string
		for _, c := range s.Calls {
			part, fixed := named[c.Tool]
			switch {
			case !fixed || c.Status.Settled():
			case out == nil:
				out = part
			default:
				out = append(slices.Clip(out), part...)
			}
		}
		return out
	}
}

// Incompatible tells how a thread's checkpoint differs from the graph
// running now, in words for people, e.g. "the tool http_request changed".
func Incompatible(changes []graph.Change) []string {
	var out []string
	for _, c := range changes {
		tool, isTool := strings.CutPrefix(c.Name, "tool:")
		switch {
		case c.Kind == "part" && isTool:
			what := "changed its arguments"
			if c.Removed {
				what = "is no longer available"
			}
			out = append(out, fmt.Sprintf("the tool %s %s", tool, what))
		case c.Kind == "node":
			out = append(out, fmt.Sprintf("the agent's %s step changed", c.Name))
		default:
			out = append(out, c.String())
		}
	}
	return out
}

// Restart is the way on for a thread paused under an incompatible graph:
// the calls that had not run are reported to the model as not run, and
// the model plans again from its last step with the tools as they are now.
func (a *Agent) Restart(ctx context.Context, thread string) (*graph.Result[State], error) {
	return a.graph.Restart(ctx, thread, ModelNode, func(_ context.Context, _ graph.NodePath, s *State) error {
		closeCalls(s, "Not run: the bot was updated while this call waited, and the call no longer fits. Plan again with the tools as they are now.")
		return nil
	})
}

// Cancel ends a thread paused under an incompatible graph without running
// anything; a later reply in the thread starts a new turn. The state's
// Cancelled says who cancelled, for front ends to show.
func (a *Agent) Cancel(ctx context.Context, thread, by string) (*graph.Result[State], error) {
	return a.graph.Stop(ctx, thread, func(_ context.Context, _ graph.NodePath, s *State) error {
		closeCalls(s, fmt.Sprintf("Not run: cancelled by %s after the bot was updated.", mention(by)))
		s.Messages = append(s.Messages, llm.Message{Role: llm.RoleAssistant, Content: fmt.Sprintf("Cancelled by %s: the bot was updated while this request waited.", mention(by))})
		s.Cancelled = &Cancellation{By: by, Message: len(s.Messages) - 1}
		return nil
	})
}

// closeCalls reports every call of the last turn to the conversation, the
// unsettled ones with note, so that the conversation stays well formed.
func closeCalls(s *State, note string) {
	for _, c := range s.Calls {
		if !c.Status.Settled() {
			c.Result, c.IsError = note, true
			if c.Status == Running {
				c.Result = "The call was cut off while running and may or may not have had its effect. " + note
			}
		}
		s.Messages = append(s.Messages, llm.Message{Role: llm.RoleTool, ToolCallID: c.ID, Name: c.Tool, Content: c.Result, IsError: c.IsError, Images: c.Images})
	}
	s.Calls = nil
}
