// Package llmtest holds test doubles for package llm, for the tests of
// any package that talks to a model:
//
//   - Scripted, an llm.Model that returns queued replies and records every
//     request, for tests that do not care about the wire;
//   - OpenAIServer and AnthropicServer, local HTTP servers that speak
//     each provider's wire protocol, answer from a script and validate
//     requests the way the real APIs do where it matters (every tool
//     call answered, roles in order), so that converter bugs fail tests.
//     They also serve end-to-end tests that run the bot against them
//     through OPENAI_BASE_URL or ANTHROPIC_BASE_URL.
//
// It owns no production code and no provider logic beyond what the fakes
// need to check requests.
package llmtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/countersign/countersign/llm"
)

// ErrScriptExhausted is returned by Scripted when a call finds no reply
// left in the script.
var ErrScriptExhausted = errors.New("llmtest: script exhausted")

// Func computes a reply from a request; Scripted.ThenFunc queues one.
type Func func(ctx context.Context, msgs []llm.Message, tools []llm.ToolDef) (llm.Message, error)

// Request is one recorded call of a Scripted model.
type Request struct {
	Messages []llm.Message
	Tools    []llm.ToolDef
}

// Scripted is an llm.Model that answers each call with the next step of
// its script: a fixed reply, an error, or a Func. It records every call,
// including ones that find the script exhausted. It is safe for
// concurrent use; concurrent calls take steps in the order they arrive.
type Scripted struct {
	mu       sync.Mutex
	name     string
	steps    []Func
	requests []Request
}

// NewScripted returns a Scripted model that answers with replies, in
// order. A reply's Role defaults to assistant.
func NewScripted(replies ...llm.Message) *Scripted {
	s := &Scripted{name: "scripted"}
	return s.Then(replies...)
}

// Then appends fixed replies to the script.
func (s *Scripted) Then(replies ...llm.Message) *Scripted {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range replies {
		r := cloneMessage(r)
		if r.Role == "" {
			r.Role = llm.RoleAssistant
		}
		s.steps = append(s.steps, func(context.Context, []llm.Message, []llm.ToolDef) (llm.Message, error) {
			return cloneMessage(r), nil
		})
	}
	return s
}

// ThenError appends a step that fails with err.
func (s *Scripted) ThenError(err error) *Scripted {
	return s.ThenFunc(func(context.Context, []llm.Message, []llm.ToolDef) (llm.Message, error) {
		return llm.Message{}, err
	})
}

// ThenFunc appends a step that computes the reply from the request. It
// runs outside the model's lock, so it may block.
func (s *Scripted) ThenFunc(f Func) *Scripted {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steps = append(s.steps, f)
	return s
}

// WithName sets what Name returns (default "scripted").
func (s *Scripted) WithName(name string) *Scripted {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.name = name
	return s
}

// Name implements llm.Model.
func (s *Scripted) Name() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.name
}

// Generate records the request and runs the next step of the script.
func (s *Scripted) Generate(ctx context.Context, msgs []llm.Message, tools []llm.ToolDef) (llm.Message, error) {
	s.mu.Lock()
	s.requests = append(s.requests, Request{Messages: cloneMessages(msgs), Tools: cloneTools(tools)})
	n := len(s.requests)
	if len(s.steps) == 0 {
		s.mu.Unlock()
		return llm.Message{}, fmt.Errorf("%w: call %d has no reply left (last message: %s)", ErrScriptExhausted, n, describeLast(msgs))
	}
	step := s.steps[0]
	s.steps = s.steps[1:]
	s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return llm.Message{}, err
	}
	return step(ctx, cloneMessages(msgs), cloneTools(tools))
}

// Requests returns a copy of every request so far, in order.
func (s *Scripted) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.requests))
	for i, r := range s.requests {
		out[i] = Request{Messages: cloneMessages(r.Messages), Tools: cloneTools(r.Tools)}
	}
	return out
}

// Remaining is the number of steps not used yet.
func (s *Scripted) Remaining() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.steps)
}

// Reply builds an assistant message with text and tool calls.
func Reply(text string, calls ...llm.ToolCall) llm.Message {
	return llm.Message{Role: llm.RoleAssistant, Content: text, ToolCalls: calls}
}

// Call builds a tool call; args is JSON text.
func Call(id, name, args string) llm.ToolCall {
	return llm.ToolCall{ID: id, Name: name, Arguments: args}
}

// Result builds the tool message that answers a call.
func Result(call llm.ToolCall, content string) llm.Message {
	return llm.Message{Role: llm.RoleTool, ToolCallID: call.ID, Name: call.Name, Content: content}
}

func describeLast(msgs []llm.Message) string {
	if len(msgs) == 0 {
		return "none"
	}
	m := msgs[len(msgs)-1]
	b, _ := json.Marshal(m) // a Message always marshals
	const limit = 200
	if len(b) > limit {
		return string(b[:limit]) + "…"
	}
	return string(b)
}

func cloneMessage(m llm.Message) llm.Message {
	m.ToolCalls = slices.Clone(m.ToolCalls)
	m.Thinking = slices.Clone(m.Thinking)
	return m
}

func cloneMessages(msgs []llm.Message) []llm.Message {
	if msgs == nil {
		return nil
	}
	out := make([]llm.Message, len(msgs))
	for i, m := range msgs {
		out[i] = cloneMessage(m)
	}
	return out
}

func cloneTools(tools []llm.ToolDef) []llm.ToolDef {
	if tools == nil {
		return nil
	}
	out := make([]llm.ToolDef, len(tools))
	for i, t := range tools {
		t.Parameters = slices.Clone(t.Parameters)
		out[i] = t
	}
	return out
}
