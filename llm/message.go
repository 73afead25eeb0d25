// Package llm holds the project's own conversation types — the messages and
// tool calls that checkpoints store — and the model clients that turn them
// into provider requests: OpenAI and OpenAI-compatible servers, Anthropic,
// and the offline demo model.
//
// Checkpoints never store langchaingo types: its llms.ToolCall loses fields
// when unmarshalled on its own, and its clients have quirks with multi-part
// messages. The converters in this package translate at the model call and
// work around those quirks; the tests run them against local servers that
// speak each provider's wire protocol (package llmtest).
//
// What the langchaingo v0.1.14 clients do, and what this package does
// about it:
//
//   - OpenAI: a tool message must carry exactly one result, so each tool
//     result is sent as its own tool message (as the API expects anyway).
//     Tool calls are sent with type "function", which the client copies
//     verbatim. This works unchanged with OpenAI-compatible servers.
//   - Anthropic: the client keeps only the first part of an assistant or
//     tool message. The conversation is handed over one block per message
//     and consecutive same-role messages are merged in the request body
//     before it is sent, so every tool_use and tool_result block arrives in
//     correctly alternating turns. See Anthropic for the details and the
//     two small limits that remain.
//   - Both: a tool result is text only. A result's images (Image) go to
//     Anthropic as image blocks in the tool_result, put there in the
//     request body; to OpenAI, which takes images from the user only, as
//     a user message after the turn's tool messages (see toOpenAI).
//   - Both: errors come back as text. The HTTP layer under langchaingo
//     returns a *StatusError for non-200 answers and keeps network errors
//     intact, so IsTransient and Retry can tell a 503 from a 400.
//   - Both: answers lose their stop reason, refusals, errors inside a
//     stream and the index of streamed tool calls. The package reads every
//     200 answer itself (answer.go); langchaingo only builds the request.
//   - Both: a tool schema a provider refuses fails every request. Each
//     client normalises the schemas for its provider, or leaves a tool out
//     (schema.go).
//
// Models that can show a reply while it is written implement Streamer
// (OpenAI and Anthropic by reading the server-sent events themselves,
// the demo word by word); Stream uses it when it is there and falls back
// to Generate.
//
// Which model runs is chosen by FromEnv (LLM_PROVIDER and friends); Retry
// adds backoff and ErrUnavailable; Demo works offline.
//
// The package does not run tools, decide approvals or keep conversations:
// it turns a conversation into the next assistant message.
package llm

import (
	"context"
	"encoding/json"
)

// Role says who a message is from.
type Role string

// The roles.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one turn of a conversation. Field names are stable JSON:
// checkpoints store messages, and a paused thread must still resume after a
// deploy.
type Message struct {
	Role Role `json:"role"`
	// Content is the text of the message (for a tool message: the result).
	Content string `json:"content,omitempty"`
	// ToolCalls are an assistant message's requested calls, in order.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID is the call a tool message answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// Name is the tool a tool message comes from.
	Name string `json:"name,omitempty"`
	// IsError marks a tool message that reports a failure.
	IsError bool `json:"is_error,omitempty"`
	// Images are a tool message's images, or those a person attached to
	// a user message, for the model to look at; Content has a line for
	// each. OpenAI and Anthropic models are
	// sent them (see Image), unless told not to (LLM_IMAGES=off); other
	// models, and people, get the lines only.
	Images []Image `json:"images,omitempty"`
	// Stop says why an assistant message ended, when the model did not
	// simply finish: cut off, filtered or refused. Content then says so
	// in words too.
	Stop Stop `json:"stop,omitempty"`
	// Thinking are the thinking and redacted_thinking blocks of an
	// Anthropic reply with extended thinking, in the order the model
	// wrote them. They are the model's working, not its answer: never
	// shown, and sent back to Anthropic unchanged (it checks their
	// signatures, and wants the turn's thinking back with the results
	// of the tool calls it led to). Other providers are not sent them.
	Thinking []Thinking `json:"thinking,omitempty"`
	// Usage is what a model's reply cost, when the provider said; it is
	// for metrics and never stored.
	Usage *Usage `json:"-"`
}

// Thinking is one thinking or redacted_thinking block of an Anthropic
// reply, kept byte for byte as the model sent it.
type Thinking struct {
	// Type is ThinkingBlock or RedactedThinkingBlock.
	Type string `json:"type"`
	// Text is a thinking block's thinking (a summary of it, with
	// Claude 4 models), Signature its signature.
	Text      string `json:"thinking,omitempty"`
	Signature string `json:"signature,omitempty"`
	// Data is a redacted_thinking block's encrypted thinking.
	Data string `json:"data,omitempty"`
}

// The types of Thinking blocks.
const (
	ThinkingBlock         = "thinking"
	RedactedThinkingBlock = "redacted_thinking"
)

// Usage counts the tokens of one model call.
type Usage struct {
	Input, Output int
}

// ToolCall is one call a model asked for.
type ToolCall struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Arguments is the JSON text the model produced. It may be invalid;
	// the agent answers invalid arguments with an error result.
	Arguments string `json:"arguments"`
	// Truncated: the reply was cut off (by the length limit, a full
	// context window, a refusal or a content filter; Message.Stop says
	// which) while this call was being written, so its arguments may be
	// incomplete. It must not run; the agent answers it with an error
	// result.
	Truncated bool `json:"truncated,omitempty"`
}

// ToolDef describes a tool to the model.
type ToolDef struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Parameters is the JSON schema of the arguments.
	Parameters json.RawMessage `json:"parameters"`
}

// Model produces the next assistant message of a conversation.
// Implementations must be safe for concurrent use.
type Model interface {
	// Generate returns the assistant's reply to msgs, which may ask for
	// calls to the given tools.
	Generate(ctx context.Context, msgs []Message, tools []ToolDef) (Message, error)
	// Name says which model this is, for logs and the start-up line
	// (e.g. "openai gpt-4o-mini", "demo (offline)").
	Name() string
}
