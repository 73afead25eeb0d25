// Package agenttest holds test doubles for the agent and the packages
// built on it: a tool that records its executions and a deterministic
// model whose reply is a pure function of the conversation, so that a run
// replayed from any checkpoint asks the same questions and gets the same
// answers.
package agenttest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/countersign/countersign/llm"
)

// Tool is a tools.Tool that records every execution.
type Tool struct {
	ToolName string
	// NotIdempotent makes Idempotent report false.
	NotIdempotent bool
	// Fail, if set, makes calls fail with it.
	Fail error

	mu   sync.Mutex
	runs []string
}

// Name implements tools.Tool.
func (t *Tool) Name() string { return t.ToolName }

// Description implements tools.Tool.
func (t *Tool) Description() string { return "Test tool " + t.ToolName + "." }

// Schema implements tools.Tool: any object; "n" must be an integer if set.
func (t *Tool) Schema() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`)
}

// Idempotent implements tools.Tool.
func (t *Tool) Idempotent(json.RawMessage) bool { return !t.NotIdempotent }

// Call implements tools.Tool: it records the arguments and returns
// "ran <name> <args>".
func (t *Tool) Call(_ context.Context, args json.RawMessage) (string, error) {
	t.mu.Lock()
	t.runs = append(t.runs, string(args))
	t.mu.Unlock()
	if t.Fail != nil {
		return "", t.Fail
	}
	return fmt.Sprintf("ran %s %s", t.ToolName, args), nil
}

// Runs returns the arguments of every execution, in order.
func (t *Tool) Runs() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.runs)
}

// Planner is a model whose reply depends only on the conversation. After
// a user message it asks for the calls Plan gives for that message (with
// the text "Working on it."); after tool results it answers with a summary
// of every result since its last turn. Call IDs are derived from the
// message's position, so replays are identical.
type Planner struct {
	Plan func(userText string) []llm.ToolCall
}

// Name implements llm.Model.
func (p *Planner) Name() string { return "planner" }

// Generate implements llm.Model.
func (p *Planner) Generate(_ context.Context, msgs []llm.Message, _ []llm.ToolDef) (llm.Message, error) {
	last := msgs[len(msgs)-1]
	switch last.Role {
	case llm.RoleUser:
		calls := p.Plan(last.Content)
		for i := range calls {
			if calls[i].ID == "" {
				calls[i].ID = fmt.Sprintf("call-%d-%d", len(msgs), i)
			}
		}
		if len(calls) == 0 {
			return llm.Message{Role: llm.RoleAssistant, Content: "You said: " + last.Content}, nil
		}
		return llm.Message{Role: llm.RoleAssistant, Content: "Working on it.", ToolCalls: calls}, nil
	case llm.RoleTool:
		var results []string
		for i := len(msgs) - 1; i >= 0 && msgs[i].Role == llm.RoleTool; i-- {
			results = append([]string{msgs[i].Name + " → " + msgs[i].Content}, results...)
		}
		return llm.Message{Role: llm.RoleAssistant, Content: "Done. " + strings.Join(results, " | ")}, nil
	}
	return llm.Message{}, fmt.Errorf("planner: cannot answer a %s message", last.Role)
}
